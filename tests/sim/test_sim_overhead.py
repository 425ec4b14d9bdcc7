"""``request_overhead_ms``: a fixed per-request latency beside the engine's steps.

It is waited before the engine sees a request (``sim.admission``), in virtual time
(``simulate``) and behind HTTP (``sim serve``); 0, the default, changes nothing
(docs/calibration.md).
"""

import json
import subprocess
import sys
import time

import aiohttp
import pytest

from workbench.calibration.fit import calibrate
from workbench.executors.virtual import canonical_report, simulate
from workbench.sim.config import EngineConfig
from workbench.sim.server import serve_sim

ENGINE = {"prefill_coeffs": [0.0, 0.01, 2.0], "decode_coeffs": [0.0, 0.0, 1.5],
          "decode_floor_ms": 0.5, "block_size": 16, "num_blocks": 4096}  # fmt: skip


def _trace(path, rows):
    path.write_text("id,arrival_time,input_len,output_len\n"
                    + "".join(f"{i},{t},{n},{o}\n" for i, t, n, o in rows))  # fmt: skip
    return str(path)


def _ttft(records):
    return {r.request_id: (r.first_token_ns - r.dispatch_ns) / 1e6 for r in records}


def test_default_zero_changes_nothing(tmp_path):
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


def test_the_virtual_replay_stays_deterministic(tmp_path):
    trace = _trace(tmp_path / "t.csv", [(f"r{i}", i * 2.0, 150, 5) for i in range(10)])
    cfg = {"trace": trace, "arrival": {"mode": "trace-timed"}}
    eng = {**ENGINE, "request_overhead_ms": 4.5}
    one, two = (canonical_report(simulate(cfg, engine=eng)) for _ in range(2))
    assert one == two


def test_a_negative_overhead_is_refused():
    with pytest.raises(ValueError, match="request_overhead_ms must be >= 0"):
        EngineConfig(request_overhead_ms=-1.0)


async def test_sim_serve_waits_it_before_the_engine_sees_the_request():
    body = {"model": "workbench-sim", "prompt": [5] * 40, "max_tokens": 2, "ignore_eos": True}
    async with (
        serve_sim(request_overhead_ms=150.0, prefill_coeffs=[0, 0, 0], decode_coeffs=[0, 0, 0],
                  decode_floor_ms=0.0) as sim,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s,
    ):  # fmt: skip
        sent = time.perf_counter_ns()  # the server's WallClock reads the same counter
        async with s.post(sim.base_url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
        (entry,) = sim.debug_requests()
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
