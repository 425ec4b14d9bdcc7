"""Attention-DP workers (sim/dp.py): ranks placed, a barrier per step, per-rank KV."""

import collections

import pytest

from workbench.clock import VirtualClock, run_virtual
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.sim import cost
from workbench.sim.cluster import Cluster, ClusterConfig, split_knobs
from workbench.sim.config import EngineConfig
from workbench.sim.dp import DPWorker
from workbench.sim.engine import Engine

try:  # where issue 42 moves them (the reports), else where they were
    from workbench.report.canonical import canonical_report, report_digest
except ImportError:
    from workbench.executors.virtual import canonical_report, report_digest

MOON = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def _prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i * 31) % 30_000 + 8 for i in range(n)]


def test_the_slowest_rank_sets_every_ranks_step():
    """Rank 0 prefills 4,000 tokens, rank 1 sixteen: both first tokens come at the end of
    the long prefill (the barrier), not at the short one's own step time; alone on an
    engine the short prompt's token comes at its own step time."""
    cfg = EngineConfig(block_size=16, num_blocks=4096)

    async def dp_run():
        clock = VirtualClock()
        w = DPWorker(cfg, clock, 2, "round-robin")
        await w.start()
        try:
            slow = w.submit("slow", _prompt(1, 4000), 2)
            fast = w.submit("fast", _prompt(2, 16), 2)
            await slow.wait()
            await fast.wait()
        finally:
            await w.stop()
        return slow, fast, w

    async def alone():
        clock = VirtualClock()
        e = Engine(cfg, clock)
        await e.start()
        try:
            return (await e.submit("fast", _prompt(2, 16), 2).wait()).token_ns
        finally:
            await e.stop()

    slow, fast, w = run_virtual(dp_run())
    assert (slow.rank, fast.rank) == (0, 1)
    long_step = cost.step_ns(cfg, 4000, 0, 4000, 4000 * 4001 // 2)
    short_step = cost.step_ns(cfg, 16, 0, 16, 16 * 17 // 2)
    assert long_step > 4 * short_step
    assert slow.token_ns[0] == fast.token_ns[0] == long_step
    assert fast.token_ns[1] == slow.token_ns[1]  # the decode step: still together
    assert run_virtual(alone())[0] == short_step
    ranks = w.rank_stats()
    assert ranks[0]["barrier_wait_ns"] == 0  # the slow rank never waits
    assert ranks[1]["barrier_wait_ns"] >= long_step - short_step
    assert w.stats()["dp_barrier_wait_ns"] == ranks[1]["barrier_wait_ns"]


def test_each_rank_has_its_own_kv_capacity():
    """num_blocks is per rank: two requests that together overflow one engine's cache
    run one after the other there, side by side on two ranks."""
    cfg = EngineConfig(block_size=16, num_blocks=80, max_num_seqs=8)

    async def main(dp):
        clock = VirtualClock()
        w = DPWorker(cfg, clock, dp, "round-robin") if dp > 1 else Engine(cfg, clock)
        await w.start()
        try:
            reqs = [w.submit(f"r{i}", _prompt(i, 900), 200) for i in range(2)]
            for r in reqs:
                await r.wait()
            return reqs[0].finish_ns, reqs[1].first_token_ns, reqs[1].finish_ns
        finally:
            await w.stop()

    done0, first1, _ = run_virtual(main(1))  # 2 × 1,100 tokens > 80 blocks of 16
    assert first1 > done0  # the second waited for the first's blocks
    done0, first1, done1 = run_virtual(main(2))
    assert first1 < done0 and done1 == done0  # together, step by step


def test_least_loaded_placement_scores_waiting_four_times():
    cfg = EngineConfig(block_size=16, num_blocks=4096)

    async def main():
        w = DPWorker(cfg, VirtualClock(), 3, "least-loaded")
        ranks = [w.submit(f"r{i}", _prompt(i, 64), 4).rank for i in range(6)]
        await w.stop()
        return ranks

    assert run_virtual(main()) == [0, 1, 2, 0, 1, 2]  # ties to the lower rank


def test_dp_knobs_are_checked_and_dp_1_is_no_cluster():
    assert split_knobs({"dp": 1, "num_blocks": 10})[1] is None
    assert split_knobs({"dp": 2})[1] == ClusterConfig(workers=1, dp=2)
    with pytest.raises(ValueError, match=r"engine.dp must be an integer in \[1, 64\]"):
        split_knobs({"dp": 0})
    with pytest.raises(ValueError, match=r"engine\.dp_placement must be one of"):
        split_knobs({"dp": 2, "dp_placement": "random"})


def test_dp_1_digests_are_todays_and_dp_shows_in_records_and_manifest():
    cfg = {"trace": {"path": MOON, "max_items": 60}}
    plain = simulate(cfg, engine={"workers": 2, "router": "round-robin"})
    ones = simulate(cfg, engine={"workers": 2, "router": "round-robin", "dp": 1})
    # dp: 1 runs what no dp runs (only the config, which names the knob, differs)
    for a, b in ((plain, ones), (simulate(cfg), simulate(cfg, engine={"dp": 1}))):
        ra, rb = canonical_report(a), canonical_report(b)
        for part in ("records", "lifecycle", "metrics_timeline", "summary"):
            assert ra[part] == rb[part]
        assert ra["manifest"].get("cluster") == rb["manifest"].get("cluster")
    dp = simulate(cfg, engine={"workers": 2, "router": "round-robin", "dp": 2,
                               "dp_placement": "round-robin"})
    assert dp.manifest.cluster["dp"] == 2
    per = collections.Counter((r.extra["worker"], r.extra["dp_rank"]) for r in dp.records)
    assert sorted(per) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert max(per.values()) - min(per.values()) <= 1
    assert all(r.status == "ok" for r in dp.records)
    assert report_digest(canonical_report(dp)) != report_digest(canonical_report(plain))


def test_a_dp_cluster_behind_a_router_serves_disaggregated():
    async def main():
        cfg = EngineConfig(block_size=16, num_blocks=2048)
        c = Cluster(cfg, ClusterConfig.from_knobs(
            {"router": "round-robin", "disagg": {"prefill": 1, "decode": 1}, "dp": 2}),
            VirtualClock())
        await c.start()
        try:
            out = []
            for i in range(4):
                where, req = c.submit(f"r{i}", _prompt(i, 100), 5)
                await req.wait()
                out.append((where.rank, where.headers(), req.completion_tokens))
            return out
        finally:
            await c.stop()

    out = run_virtual(main())
    assert {rank for rank, _, _ in out} == {0}  # least-loaded: each finished before the next
    assert all(h["x-workbench-dp-rank"] == "0" and h["x-workbench-decode-worker"] == "1"
               for _, h, _ in out)
    assert [n for _, _, n in out] == [5] * 4


async def test_http_attention_dp_names_the_rank_and_streams_every_token():
    """`sim serve --dp`: over the wall clock the ranks are placed round-robin, named in
    x-workbench-dp-rank, and a stream carries every token."""
    import asyncio

    import aiohttp
    import orjson

    from workbench.sim.server import serve_sim

    body = {"prompt": list(range(10, 50)), "max_tokens": 5, "stream": True,
            "return_token_ids": True}
    async with (
        asyncio.timeout(30),
        serve_sim(speedup=50.0, dp=2, dp_placement="round-robin") as sim,
        aiohttp.ClientSession() as s,
    ):
        ranks, counts = [], []
        for _ in range(4):
            async with s.post(sim.base_url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                ranks.append(resp.headers["x-workbench-dp-rank"])
                raw = await resp.text()
            events = [ln[6:] for ln in raw.splitlines() if ln.startswith("data: ")]
            chunks = [orjson.loads(e) for e in events[:-1]]
            counts.append(sum(len(ch.get("token_ids") or []) for c in chunks
                              for ch in c["choices"]))
    assert ranks == ["0", "1", "0", "1"] and counts == [5] * 4


def test_sim_serve_takes_dp_flags():
    import argparse

    from workbench.commands.sim import cluster_knobs_from_args

    args = argparse.Namespace(workers=2, router=None, overload_threshold=None, disagg=None,
                              bandwidth_gbps=None, dp=4, dp_placement="round-robin")
    assert cluster_knobs_from_args(args) == {"workers": 2, "dp": 4,
                                             "dp_placement": "round-robin"}
