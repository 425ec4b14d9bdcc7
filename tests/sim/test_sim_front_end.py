"""What a request spends beside the engine's steps: ``request_overhead_ms`` (a fixed
latency before the engine sees it), ``intake_ms`` (the front end takes requests in one
after another) and ``idle_wake_ms`` (the first step after the engine was idle takes
longer). Exact arithmetic in virtual time, the same behind HTTP (``sim serve``), 0
changes nothing, and calibration recovers each from records it made itself
(docs/calibration.md, "the lone constant")."""

import asyncio
import json
import subprocess
import sys
import time

import aiohttp
import pytest

from workbench.calibration.fit import calibrate
from workbench.calibration.split import PARTS, search, splits
from workbench.config import ConfigError, RunConfig
from workbench.executors.virtual import simulate
from workbench.report.canonical import canonical_report
from workbench.sim.config import EngineConfig
from workbench.sim.server import serve_sim

# every step 1 ms of prefill constant, decode steps 1 ms flat: times are whole ms
FLAT = {"prefill_coeffs": [0.0, 0.0, 1.0], "decode_coeffs": [0.0, 0.0, 1.0],
        "decode_floor_ms": 0.0, "block_size": 16, "num_blocks": 4096}  # fmt: skip
ENGINE = {"prefill_coeffs": [0.0, 0.01, 2.0], "decode_coeffs": [0.0, 0.0, 1.5],
          "decode_floor_ms": 0.5, "block_size": 16, "num_blocks": 4096}  # fmt: skip


def _trace(path, rows):
    path.write_text("id,arrival_time,input_len,output_len\n"
                    + "".join(f"{i},{t},{n},{o}\n" for i, t, n, o in rows))  # fmt: skip
    return str(path)


def _ttft(records):
    """TTFT (ms) by the trace's row id (a CSV row's request is ``independent_<id>``)."""
    return {r.request_id.removeprefix("independent_"): (r.first_token_ns - r.dispatch_ns) / 1e6
            for r in records}  # fmt: skip


def _gaps(rec):
    return [b - a for a, b in zip(rec.token_times_ns, rec.token_times_ns[1:], strict=False)]


def test_zero_is_the_default_and_changes_nothing(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 3.0, 100 + 40 * i, 4) for i in range(8)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    plain = simulate(cfg, engine=ENGINE).records
    zero = simulate(cfg, engine={**ENGINE, "intake_ms": 0.0, "idle_wake_ms": 0.0}).records
    assert [(r.dispatch_ns, r.token_times_ns) for r in plain] == [
        (r.dispatch_ns, r.token_times_ns) for r in zero
    ]
    assert EngineConfig().intake_ms == EngineConfig().idle_wake_ms == 0.0


def test_requests_that_come_together_reach_the_engine_intake_apart(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", 0.0, 32, 1) for i in range(3)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    ttft = _ttft(simulate(cfg, engine={**FLAT, "intake_ms": 5.0}).records)
    # r0 in at 5 ms, its 1 ms step ends at 6; r1 in at 10 → 11; r2 in at 15 → 16
    assert ttft == {"r0": 6.0, "r1": 11.0, "r2": 16.0}


def test_intake_comes_before_the_overhead_and_keeps_the_order(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", 0.0, 32, 1) for i in range(3)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    engine = {**FLAT, "intake_ms": 5.0, "request_overhead_ms": 20.0}
    recs = simulate(cfg, engine=engine).records
    assert _ttft(recs) == {"r0": 26.0, "r1": 31.0, "r2": 36.0}
    order = [r.request_id[-2:] for r in sorted(recs, key=lambda r: r.first_token_ns)]
    assert order == ["r0", "r1", "r2"]


def test_a_request_spaced_out_pays_no_queue_for_the_intake(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 100.0, 32, 1) for i in range(3)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    ttft = _ttft(simulate(cfg, engine={**FLAT, "intake_ms": 5.0}).records)
    assert ttft == {"r0": 6.0, "r1": 6.0, "r2": 6.0}


def test_the_step_after_idle_pays_the_wake_and_a_joining_request_does_not(tmp_path):
    # a0 alone (idle engine): wake 4 + prefill 1 = 5 ms, then 1 ms decode steps;
    # j1 arrives at 7.5 ms while a0 decodes: joins at the step boundary (8), its
    # step = prefill 1 + decode 1 = 2 ms → first token at 10 → TTFT 2.5, no wake;
    # b2 comes after everything finished: the engine was idle, so it pays it again
    rows = [("a0", 0.0, 32, 20), ("j1", 7.5, 32, 2), ("b2", 100.0, 32, 3)]
    trace = _trace(tmp_path / "t.csv", rows)
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    woken = simulate(cfg, engine={**FLAT, "idle_wake_ms": 4.0}).records
    recs = {r.request_id[-2:]: r for r in woken}
    base = {r.request_id[-2:]: r for r in simulate(cfg, engine=FLAT).records}
    assert _ttft(recs.values()) == {"a0": 5.0, "j1": 2.5, "b2": 5.0}
    assert _ttft(base.values()) == {"a0": 1.0, "j1": 2.5, "b2": 1.0}
    assert _gaps(recs["b2"]) == _gaps(base["b2"]) == [1_000_000, 1_000_000]  # decode: no wake


def test_requests_that_arrive_while_the_engine_wakes_wait_for_the_next_step(tmp_path):
    # the waking step was planned when r0 came: r1 (in 1 ms later) is not in it
    trace = _trace(tmp_path / "t.csv", [("r0", 0.0, 32, 1), ("r1", 0.0, 32, 1)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    ttft = _ttft(simulate(cfg, engine={**FLAT, "intake_ms": 1.0, "idle_wake_ms": 4.0}).records)
    assert ttft == {"r0": 6.0, "r1": 7.0}  # r0: in at 1, 1+4 → 6; r1: in at 2, 6 → 7


def test_a_cluster_worker_wakes_on_its_own(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", 0.0, 32, 1) for i in range(2)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    engine = {**FLAT, "idle_wake_ms": 4.0, "workers": 2, "router": "round-robin"}
    recs = simulate(cfg, engine=engine).records
    assert sorted(r.extra["worker"] for r in recs) == [0, 1]
    ttft = _ttft(recs)
    assert ttft == {"r0": 5.0, "r1": 5.0}  # each worker was idle: both pay it, in parallel


def test_the_virtual_replay_stays_deterministic(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 2.0, 150, 5) for i in range(10)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    eng = {**ENGINE, "intake_ms": 0.7, "idle_wake_ms": 2.5, "request_overhead_ms": 1.0}
    one, two = (canonical_report(simulate(cfg, engine=eng)) for _ in range(2))
    assert one == two


@pytest.mark.parametrize("name", ["intake_ms", "idle_wake_ms"])
def test_a_negative_value_is_refused(name, tmp_path):
    with pytest.raises(ConfigError, match=f"target.engine.{name}: expected a finite number in"):
        EngineConfig(**{name: -1.0})
    trace = _trace(tmp_path / "t.csv", [("a", 0.0, 8, 1)])
    with pytest.raises(ConfigError, match=f"target.engine.{name}"):
        RunConfig.from_dict({"trace": trace, "target": {"url": "sim", "engine": {name: -2}}})


async def _served(n: int, **knobs) -> tuple[int, list[dict]]:
    """Send ``n`` requests at once to ``sim serve`` with these knobs (steps cost
    nothing): when they were sent (on the server's clock, the same counter) and the
    server's per-request truth."""
    body = {"model": "workbench-sim", "prompt": [5] * 40, "max_tokens": 2, "ignore_eos": True}
    zero = {"prefill_coeffs": [0, 0, 0], "decode_coeffs": [0, 0, 0], "decode_floor_ms": 0.0}
    async with (
        serve_sim(**zero, **knobs) as sim,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s,
    ):
        async def one() -> None:
            async with s.post(sim.base_url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()

        sent = time.perf_counter_ns()
        await asyncio.gather(*(one() for _ in range(n)))
        return sent, sim.debug_requests()


async def test_sim_serve_takes_requests_in_one_after_another():
    sent, entries = await _served(2, intake_ms=150.0)
    first, second = sorted(e["arrival_ns"] for e in entries)
    # a sleep never ends early: these lower bounds are not timing races
    assert first - sent >= 150_000_000
    assert second - sent >= 300_000_000


async def test_sim_serve_pays_the_wake_on_an_idle_engine():
    _, (entry,) = await _served(1, idle_wake_ms=120.0)
    assert entry["first_token_ns"] - entry["arrival_ns"] >= 120_000_000


def test_the_splits_are_every_three_tenths_that_fit():
    every = splits()
    assert len(every) == len(set(every)) == 286  # C(10 + 3, 3): sums of 3 tenths <= 1
    assert all(sum(p) <= 10 for p in every) and (0, 0, 0) in every and (0, 10, 0) in every
    assert PARTS == ("request_overhead_ms", "idle_wake_ms", "intake_ms")


def test_the_search_tries_every_split_once_and_breaks_ties_by_fewer_parts():
    target = (1, 7, 2)  # tenths: overhead 0.1, wake 0.7, intake 0.2
    seen = []

    def error(p):
        seen.append(p)
        return float(sum(abs(x - y) for x, y in zip(p, target, strict=True)))

    tried = search(error)
    assert tried[0] == (0.0, 3, target)
    assert sorted(seen) == sorted(splits()) == sorted(t[2] for t in tried)
    # equal errors: the split with fewer parts, then the smaller overhead
    flat = search(lambda p: 0.0 if p[0] + p[1] == 6 and p[2] == 0 else 1.0)
    assert flat[0][2] == (0, 6, 0)


@pytest.mark.parametrize(
    ("truth", "step_c"),
    [({"idle_wake_ms": 3.0}, 2.0), ({"intake_ms": 1.0}, 4.0),
     ({"idle_wake_ms": 3.0, "intake_ms": 1.0}, 6.0)],  # tenths, not fifths: the fine pass
)  # fmt: skip
def test_the_fit_recovers_a_known_split(truth, step_c, tmp_path):
    rows = [(f"s{i}", i * 2000.0, 64 + 250 * i, 6 + i) for i in range(12)]  # one at a time
    rows += [(f"b{i}", 30000.0, 200 + 90 * i, 10 + 8 * i) for i in range(10)]  # together
    rows += [(f"j{i}", 30100.0 + 23.0 * i, 150 + 60 * i, 5) for i in range(12)]  # joining
    trace = _trace(tmp_path / "t.csv", rows)
    engine = {"prefill_coeffs": [2e-6, 0.02, step_c], "decode_coeffs": [3.0, 20.0, 4.0],
              "decode_floor_ms": 0.5, "block_size": 16, "num_blocks": 512, **truth}  # fmt: skip
    run = simulate({"trace": trace, "out_dir": str(tmp_path / "runs"), "run_id": "t",
                    "arrival": {"mode": "trace-timed"}}, engine=engine)  # fmt: skip
    cal = calibrate([run.run_dir], base={"block_size": 16, "num_blocks": 512}, self_check=True)
    for name in PARTS:
        assert cal.engine[name] == pytest.approx(truth.get(name, 0.0), abs=1e-6), name
    assert cal.engine["prefill_coeffs"] == pytest.approx(engine["prefill_coeffs"], rel=1e-3)
    assert cal.fit["lone_constant"]["median_abs_pct_error"] < 1e-3
    (check,) = cal.fit["replay"]
    assert abs(check["ttft_ms"]["error_pct"]) < 0.1


def test_a_zero_overhead_changes_nothing(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 5.0, 100 + 40 * i, 4) for i in range(8)])
    plain = simulate({"trace": trace}, engine=ENGINE)
    zero = simulate({"trace": trace}, engine={**ENGINE, "request_overhead_ms": 0.0})
    assert [r.token_times_ns for r in plain.records] == [r.token_times_ns for r in zero.records]
    assert EngineConfig().request_overhead_ms == 0.0


def test_a_lone_request_pays_it_once_on_top_of_its_prefill(tmp_path):
    rows = [(f"s{i}", i * 1000.0, 64 * (i + 1), 3) for i in range(4)]  # one at a time
    trace = _trace(tmp_path / "t.csv", rows)
    base = _ttft(simulate({"trace": trace}, engine=ENGINE).records)
    late = simulate({"trace": trace}, engine={**ENGINE, "request_overhead_ms": 7.0}).records
    for rid, ttft in _ttft(late).items():
        assert ttft == pytest.approx(base[rid] + 7.0, abs=1e-6)
    for r in late:  # the decode steps after it are not slowed
        gaps = [b - a for a, b in zip(r.token_times_ns, r.token_times_ns[1:], strict=False)]
        assert gaps == [1_500_000] * len(gaps)


def test_it_delays_no_one_else_and_keeps_the_arrival_order(tmp_path):
    rows = [(f"b{i}", 0.0, 200, 2) for i in range(6)]  # equal arrivals: file order decides
    trace = _trace(tmp_path / "t.csv", rows)
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    base = simulate(cfg, engine={**ENGINE, "max_num_batched_tokens": 256}).records
    late = simulate(cfg, engine={**ENGINE, "max_num_batched_tokens": 256,
                                 "request_overhead_ms": 3.0}).records  # fmt: skip
    order = [r.request_id for r in sorted(base, key=lambda r: r.first_token_ns)]
    assert [r.request_id for r in sorted(late, key=lambda r: r.first_token_ns)] == order
    shifted = {r.request_id: r.first_token_ns - 3_000_000 for r in late}
    assert shifted == {r.request_id: r.first_token_ns for r in base}


def test_the_virtual_replay_with_an_overhead_stays_deterministic(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 2.0, 150, 5) for i in range(10)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    eng = {**ENGINE, "request_overhead_ms": 4.5}
    one, two = (canonical_report(simulate(cfg, engine=eng)) for _ in range(2))
    assert one == two


def test_a_negative_overhead_is_refused():
    with pytest.raises(ConfigError, match=r"target\.engine\.request_overhead_ms: expected a"):
        EngineConfig(request_overhead_ms=-1.0)


async def test_sim_serve_waits_it_before_the_engine_sees_the_request():
    sent, (entry,) = await _served(1, request_overhead_ms=150.0)
    # the engine saw the request (its arrival) only after the overhead; a sleep never
    # ends early, so this lower bound is not a timing race
    assert entry["arrival_ns"] - sent >= 150_000_000


def test_the_fit_splits_a_known_overhead_from_the_step_constant(tmp_path):
    rows = [(f"s{i}", i * 2000.0, 64 + 250 * i, 6 + i) for i in range(12)]
    rows += [(f"b{i}", 30000.0, 200 + 90 * i, 10 + 8 * i) for i in range(10)]
    trace = _trace(tmp_path / "t.csv", rows)
    truth = {"prefill_coeffs": [2e-6, 0.02, 2.0], "decode_coeffs": [3.0, 20.0, 4.0],
             "decode_floor_ms": 0.5, "block_size": 16, "num_blocks": 512,
             "request_overhead_ms": 3.0}  # fmt: skip
    run = simulate({"trace": trace, "out_dir": str(tmp_path / "runs"), "run_id": "t"},
                   engine=truth)  # fmt: skip
    cal = calibrate([run.run_dir], base={"block_size": 16, "num_blocks": 512}, self_check=True)
    assert cal.engine["request_overhead_ms"] == pytest.approx(3.0, rel=1e-3)
    assert cal.engine["prefill_coeffs"] == pytest.approx(truth["prefill_coeffs"], rel=1e-3)
    assert cal.fit["lone_constant"]["median_abs_pct_error"] < 1e-3
    assert cal.engine["idle_wake_ms"] == cal.engine["intake_ms"] == 0.0
    (check,) = cal.fit["replay"]
    assert abs(check["ttft_ms"]["error_pct"]) < 0.1


def test_simulate_cli_takes_it_from_an_engine_config_file(tmp_path):
    trace = _trace(tmp_path / "t.csv", [("a", 0.0, 64, 3)])
    ttfts = []
    for overhead in (0.0, 25.0):
        conf = tmp_path / f"engine-{overhead}.json"
        conf.write_text(json.dumps({"engine": {**ENGINE, "request_overhead_ms": overhead}}))
        out = tmp_path / f"out-{overhead}"
        done = subprocess.run(
            [sys.executable, "-m", "workbench", "simulate", "--trace", trace, "--engine-config",
             str(conf), "--out", str(out), "--run-id", "r"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        ttfts.append(json.loads((out / "r" / "summary.json").read_text())["ttft_ms"]["p50"])
    assert ttfts[1] == pytest.approx(ttfts[0] + 25.0, abs=1e-6)
