"""The simulated cluster: routers, disaggregation, virtual time and one HTTP endpoint."""

import asyncio
import collections
import subprocess
import sys
import urllib.request

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

import workbench as wb
from workbench.clock import VirtualClock, run_virtual
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.placement import placement_extra
from workbench.report import tables
from workbench.report.canonical import canonical_report, report_digest
from workbench.sim import cost
from workbench.sim.cluster import (
    Cluster,
    ClusterConfig,
    DisaggConfig,
    Placement,
    split_knobs,
)
from workbench.sim.config import EngineConfig
from workbench.sim.router import ROUTERS, make_router
from workbench.sim.server import serve_sim

TIMEOUT = 30
SESSIONS = str(data_path("tracelab/multi_session_example.csv"))


def _prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i * 31) % 30_000 + 8 for i in range(n)]


def _cluster(workers=4, router="round-robin", **engine):
    cfg = EngineConfig.from_knobs(**{"block_size": 16, **engine})
    return Cluster(cfg, ClusterConfig(workers=workers, router=router), VirtualClock())


# -- routers in the cluster, virtual time ----------------------------------------------


def test_round_robin_spreads_evenly():
    async def main():
        c = _cluster(4, "round-robin")
        await c.start()
        try:
            placed = [c.submit(f"r{i}", _prompt(i, 40), 4)[0].worker for i in range(12)]
        finally:
            await c.stop()
        return placed

    assert run_virtual(main()) == [0, 1, 2, 3] * 3


def test_least_loaded_picks_the_worker_with_fewest_requests():
    async def main():
        c = _cluster(3, "least-loaded")
        await c.start()
        try:
            first = [c.submit(f"a{i}", _prompt(i, 40), 50)[0].worker for i in range(3)]
            c.workers[0].submit("extra", _prompt(99, 40), 50)  # worker 0 now holds two
            c.workers[1].submit("extra2", _prompt(98, 40), 50)
            nxt = c.submit("b", _prompt(7, 40), 5)[0].worker
        finally:
            await c.stop()
        return first, nxt

    first, nxt = run_virtual(main())
    assert first == [0, 1, 2]  # ties go to the lowest index
    assert nxt == 2


def test_session_affinity_is_sticky():
    result = simulate({"trace": SESSIONS}, engine={"workers": 3, "router": "session-affinity"})
    homes = collections.defaultdict(set)
    for r in result.records:
        homes[r.session_id].add(r.extra["worker"])
    assert len(homes) > 1
    assert all(len(h) == 1 for h in homes.values())
    assert len({next(iter(h)) for h in homes.values()}) > 1  # new sessions spread


def test_prefix_aware_follows_the_prefix_until_the_holder_is_overloaded():
    """Round 2 of a session goes to the worker holding round 1's prefix although
    another worker is idler; once that worker has more than ``overload_threshold``
    requests above the least-loaded one, requests go elsewhere."""

    async def main():
        cfg = EngineConfig.from_knobs(block_size=16)
        cl = ClusterConfig(workers=4, router="prefix-aware",
                           router_options={"overload_threshold": 2})  # fmt: skip
        c = Cluster(cfg, cl, VirtualClock())
        await c.start()
        try:
            base = _prompt(1, 160)
            w_first, r1 = c.submit("s1-0", base, 2, session="s1")
            await r1.wait()
            others = [c.submit(f"o{i}", _prompt(50 + i, 64), 10_000)[0].worker for i in range(3)]
            w_second, _ = c.submit("s1-1", [*base, *_prompt(2, 40)], 10_000, session="s1")
            follow = []
            for i in range(4):
                where, _ = c.submit(f"s1-x{i}", [*base, *_prompt(3 + i, 40)], 10_000)
                follow.append(where.worker)
            loads = [sum(w.load()[:2]) for w in c.workers]
        finally:
            await c.stop()
        return w_first.worker, others, w_second.worker, follow, loads

    first, others, second, follow, loads = run_virtual(main())
    assert first == 0
    assert others == [0, 1, 2]  # no prefix anywhere: least-loaded, lowest index on ties
    assert second == 0  # the prefix holder, though worker 3 is idle
    # loads before each: w0 2, idlest 0 -> stays (2 - 0 <= 2); w0 3 -> overloaded (3 > 0 + 2):
    # worker 3 (no prefix anywhere else: least-loaded); w0 3, idlest 1 -> stays; w0 4 -> w1
    assert follow == [0, 3, 0, 1]
    assert loads == [4, 2, 1, 1]


def test_prefix_aware_recovers_more_hits_than_round_robin_on_sessions():
    rates = {}
    for router in ("round-robin", "prefix-aware"):
        result = simulate({"trace": SESSIONS, "context": "prefix-preserving"},
                          engine={"workers": 4, "router": router})  # fmt: skip
        rates[router] = wb.summarize(result)["actual_prefix_hit_rate"]
    one = wb.summarize(simulate({"trace": SESSIONS, "context": "prefix-preserving"}))
    assert rates["prefix-aware"] == pytest.approx(one["actual_prefix_hit_rate"])
    assert rates["round-robin"] < rates["prefix-aware"]


# -- disaggregation ------------------------------------------------------------------


def test_decode_starts_after_the_kv_transfer():
    disagg = DisaggConfig(prefill=1, decode=1, bandwidth_gbps=1.0, kv_bytes_per_token=1_000_000)
    cfg = EngineConfig.from_knobs(block_size=16)
    prompt = _prompt(5, 100)

    async def main():
        c = Cluster(cfg, ClusterConfig(disagg=disagg), VirtualClock())
        await c.start()
        try:
            where, req = c.submit("d1", prompt, 5)
            await req.wait()
        finally:
            await c.stop()
        return where, req, c.workers[1].stats()

    where, req, decode_stats = run_virtual(main())
    assert (where.worker, where.decode_worker) == (0, 1)
    assert disagg.transfer_ns(100) == 100_000_000  # 100 tokens x 1 MB at 1 GB/s = 100 ms
    t = req.token_ns
    assert len(t) == 5 and req.finish_reason == "length" and req.finished
    assert t[0] == cost.step_ns(cfg, 100, 0, 0)  # the prefill worker: prompt + first token
    assert req.transfer_start_ns == t[0]
    assert req.transfer_end_ns == t[0] + 100_000_000
    assert req.decode.arrival_ns == req.transfer_end_ns
    # the decode worker's first step is a decode step over the transferred KV, no prefill
    assert t[1] == req.transfer_end_ns + cost.step_ns(cfg, 0, 1, 101)
    assert decode_stats["prefix_cache_hits_tokens"] == 0
    assert len(req.output_ids) == 5


def test_disaggregated_cluster_in_virtual_time_and_bad_configs():
    result = simulate({"trace": SESSIONS}, engine={"disagg": {"prefill": 2, "decode": 1}})
    assert wb.summarize(result)["ok"] == len(result.records)
    assert {r.extra["worker"] for r in result.records} <= {0, 1}
    assert {r.extra["decode_worker"] for r in result.records} == {2}
    with pytest.raises(ValueError, match=r"engine\.disagg\.prefill"):
        split_knobs({"disagg": {"prefill": 0, "decode": 1}})
    with pytest.raises(ValueError, match="unknown key"):
        split_knobs({"disagg": {"prefil": 1}})
    with pytest.raises(ValueError, match=r"engine\.workers"):
        split_knobs({"workers": 0})
    with pytest.raises(ValueError, match="unknown router 'nope'"):
        split_knobs({"router": "nope"})
    with pytest.raises(ValueError, match="overload_threshold"):
        make_router("prefix-aware", {"overload_threshold": -1})
    assert split_knobs({"num_blocks": 8}) == ({"num_blocks": 8}, None)
    assert sorted(ROUTERS.names()) == [
        "least-loaded", "prefix-aware", "round-robin", "session-affinity"]


# -- determinism ---------------------------------------------------------------------


def test_two_processes_one_digest():
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", SESSIONS, "--digest",
           "--engine", "workers=3", "--engine", "router=prefix-aware",
           "--engine", 'disagg={"prefill": 2, "decode": 1}']  # fmt: skip
    digests = []
    for _ in range(2):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
        digests.append([ln for ln in out.stdout.splitlines() if ln.startswith("digest:")])
    assert digests[0] and digests[0] == digests[1]
    engine = {"workers": 3, "router": "prefix-aware", "disagg": {"prefill": 2, "decode": 1}}
    here = report_digest(canonical_report(simulate({"trace": SESSIONS}, engine=engine)))
    assert digests[0] == [f"digest: {here}"]


def test_one_engine_without_cluster_knobs_is_unchanged():
    plain = simulate({"trace": SESSIONS})
    assert plain.manifest.cluster is None
    assert "workers" not in wb.summarize(plain)
    clustered = simulate({"trace": SESSIONS}, engine={"workers": 2})
    assert clustered.manifest.cluster["workers"] == 2
    summary = wb.summarize(clustered)
    assert [w["worker"] for w in summary["workers"]] == [0, 1]
    assert sum(w["requests"] for w in summary["workers"]) == len(clustered.records)
    assert sum(w["prompt_share"] for w in summary["workers"]) == pytest.approx(1.0)
    assert sum(w["cached_tokens"] for w in summary["workers"]) == summary["cached_tokens"]
    table = tables.worker_table(summary)
    assert list(table.index) == [0, 1] and "hit_rate" in table.columns
    assert tables.worker_table(wb.summarize(plain)).empty


# -- one HTTP endpoint ------------------------------------------------------------------

BODIES = {
    "/v1/completions": {"prompt": list(range(10, 50)), "max_tokens": 3},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "ba be bi"}],
                             "max_tokens": 3},
    "/inference/v1/generate": {"token_ids": list(range(10, 50)),
                               "sampling_params": {"max_tokens": 3}},
    "/generate": {"input_ids": list(range(10, 50)), "sampling_params": {"max_new_tokens": 3}},
}  # fmt: skip


async def test_http_cluster_names_the_worker_on_every_protocol_and_exposes_metrics():
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(zero_cost=True, workers=3, router="round-robin") as sim,
        aiohttp.ClientSession() as s,
    ):
        seen = []
        for stream in (True, False):
            for path, body in BODIES.items():
                async with s.post(sim.base_url + path, json={**body, "stream": stream}) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                    seen.append(int(resp.headers["x-workbench-worker"]))
                    assert resp.headers["x-workbench-worker-waiting"].isdigit()
        assert seen == [0, 1, 2, 0, 1, 2, 0, 1]
        async with s.get(sim.base_url + "/metrics") as resp:
            text = await resp.text()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        gen = {smp.labels["engine"]: smp.value for smp in fams["vllm:generation_tokens"].samples
               if smp.name.endswith("_total")}  # fmt: skip
        assert gen == {"0": 9.0, "1": 9.0, "2": 6.0}
        async with s.get(sim.base_url + "/metrics?worker=2") as resp:
            one = await resp.text()
        fams = {f.name: f for f in text_string_to_metric_families(one)}
        assert {smp.labels["engine"] for smp in fams["vllm:generation_tokens"].samples} == {"2"}
        async with s.get(sim.base_url + "/metrics?worker=3") as resp:
            assert resp.status == 404
        rows = sim.debug_requests()
        assert [r["worker"] for r in rows] == seen


async def test_live_replay_against_a_cluster_attributes_every_record():
    cfg = wb.RunConfig.from_dict({
        "trace": SESSIONS, "context": "prefix-preserving", "backend": "vllm-tokens",
        "target": {"url": "sim", "engine": {"zero_cost": True, "workers": 2,
                                             "router": "session-affinity"}},
    })  # fmt: skip
    async with asyncio.timeout(TIMEOUT):
        result = await wb.run_async(cfg)
    assert result.records and all(r.status == "ok" for r in result.records)
    homes = collections.defaultdict(set)
    for r in result.records:
        homes[r.session_id].add(r.extra["worker"])  # from the x-workbench-worker header
    assert all(len(h) == 1 for h in homes.values())  # x-session-id made affinity sticky
    summary = wb.summarize(result)
    assert sum(w["requests"] for w in summary["workers"]) == len(result.records)


async def test_http_disaggregated_stream_carries_every_token():
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(disagg={"prefill": 1, "decode": 1}, speedup=50.0) as sim,
        aiohttp.ClientSession() as s,
    ):
        body = {**BODIES["/v1/completions"], "max_tokens": 6, "stream": True,
                "return_token_ids": True, "stream_options": {"include_usage": True}}  # fmt: skip
        async with s.post(sim.base_url + "/v1/completions", json=body) as resp:
            assert resp.headers["x-workbench-worker"] == "0"
            assert resp.headers["x-workbench-decode-worker"] == "1"
            raw = await resp.text()
        events = [ln[6:] for ln in raw.splitlines() if ln.startswith("data: ")]
        assert events[-1] == "[DONE]"
        import orjson

        chunks = [orjson.loads(e) for e in events[:-1]]
        ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
        assert len(ids) == 6
        finals = [ch["finish_reason"] for c in chunks for ch in c["choices"]]
        assert finals[-1] == "length" and finals.count("length") == 1
        assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_disaggregated_request_aborted_during_the_transfer_never_reaches_decode():
    disagg = DisaggConfig(prefill=1, decode=1, bandwidth_gbps=1.0, kv_bytes_per_token=1_000_000)
    cfg = EngineConfig.from_knobs(block_size=16)

    async def main():
        clock = VirtualClock()
        c = Cluster(cfg, ClusterConfig(disagg=disagg), clock)
        await c.start()
        try:
            _, req = c.submit("d2", _prompt(9, 100), 5)
            # 10 ms after the prefill's first token: the 100 ms transfer is under way
            await clock.sleep_until(cost.step_ns(cfg, 100, 0, 0) + 10_000_000)
            assert req.transfer_start_ns is not None and req.decode is None
            req.abort()
            await req.wait()
            pending_transfer = req.decode
            _, other = c.submit("d3", _prompt(10, 50), 3)  # still serving afterwards
            await other.wait()
            _, left = c.submit("d4", _prompt(11, 50), 3)  # stopped mid-request
        finally:
            await c.stop()
        return req, pending_transfer, other, left, c.workers[1].stats()

    req, pending_transfer, other, left, decode_stats = run_virtual(main())
    assert pending_transfer is None and req.finished and req.finish_reason == "abort"
    assert len(req.token_ns) == 1  # the prefill's first token only
    assert other.finish_reason == "length" and len(other.token_ns) == 3
    assert left.finished and left.finish_reason == "abort"
    assert decode_stats["requests_submitted"] == 1  # only d3 reached the decode worker


def test_cli_cluster_flags_and_a_served_cluster(tmp_path):
    from workbench.cli import build_parser
    from workbench.commands.sim import cluster_knobs_from_args

    args = build_parser().parse_args(
        ["sim", "serve", "--workers", "3", "--router", "prefix-aware",
         "--overload-threshold", "1", "--disagg", "1:2", "--bandwidth-gbps", "25"]
    )  # fmt: skip
    knobs = cluster_knobs_from_args(args)
    _, cluster = split_knobs(knobs)
    assert cluster is not None and cluster.size == 3 and cluster.router == "prefix-aware"
    assert cluster.router_options == {"overload_threshold": 1}
    assert cluster.disagg == DisaggConfig(prefill=1, decode=2, bandwidth_gbps=25.0)

    engine_file = tmp_path / "engine.yaml"
    engine_file.write_text("engine:\n  zero_cost: true\n  block_size: 32\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "sim", "serve", "--workers", "2",
         "--router", "round-robin", "--engine-config", str(engine_file)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = proc.stdout.readline().split()[-1]
        assert url.startswith("http://127.0.0.1:")
        workers = []
        for _ in range(3):
            req = urllib.request.Request(
                url + "/v1/completions", method="POST",
                data=b'{"prompt": [11, 12, 13], "max_tokens": 2}',
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(req, timeout=10) as resp:
                workers.append(resp.headers["x-workbench-worker"])
        assert workers == ["0", "1", "0"]
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            assert 'block_size="32"' in resp.read().decode()  # from the engine file
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_rejected_request_is_routed_nowhere_and_the_router_hashes_the_prompt_once():
    async def main():
        c = _cluster(3, "round-robin", max_model_len=100)
        p = _cluster(2, "prefix-aware", max_model_len=4096)
        await c.start()
        await p.start()
        try:
            placed = [c.submit("ok0", _prompt(0, 40), 4)[0].worker]
            with pytest.raises(ValueError, match="maximum context length"):
                c.submit("too-long", _prompt(1, 100), 4)
            placed += [c.submit(f"ok{i}", _prompt(i, 40), 4)[0].worker for i in (2, 3)]
            # prefix-aware: the second request follows the first's prefix to the busier
            # worker (the router read the sequence's own block hashes), and admission
            # finds the same blocks cached
            first = p.submit("a", _prompt(5, 800), 2)[1]
            await first.wait()
            p.workers[0].submit("busy", _prompt(7, 50), 10_000)
            where, second = p.submit("b", [*_prompt(5, 800)[:640], *_prompt(6, 100)], 2)
            await second.wait()
            return placed, where.worker, p.workers[0].load()[0], second.cached_tokens
        finally:
            await c.stop()
            await p.stop()

    placed, worker, load, cached = run_virtual(main())
    assert placed == [0, 1, 2]  # the rejected request took no round-robin turn
    assert worker == 0 and load == 1 and cached == 640


@pytest.mark.parametrize("decode", [None, 0, 7])
@pytest.mark.parametrize("rank", [None, 0, 3])
def test_a_placements_record_fields_are_its_headers_read_back(decode: int | None,
                                                             rank: int | None) -> None:
    """The virtual replay records ``Placement.extra()``; a client reads the same fields
    from the response headers (``placement_extra``): the same keys, order and values."""
    where = Placement(12, decode, 5, rank)
    assert list(where.extra().items()) == list(placement_extra(where.headers()).items())
