"""Calibration: the cost model fitted back from records whose truth is known.

Records of a virtual-time run carry exact engine step times, so fitting them must
give back the coefficients that produced them; then the fitted engine predicts the
run it came from. The same fit on a real vLLM is in tests/real_engine.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from workbench.calibration.fit import calibrate
from workbench.calibration.predict import predict, predict_repeats
from workbench.config.engine_file import read_engine_file
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate

TRUE = {"prefill_coeffs": [2e-6, 0.02, 5.0], "decode_coeffs": [3.0, 20.0, 4.0],
        "decode_floor_ms": 0.5, "block_size": 16, "num_blocks": 512}  # fmt: skip
BASE = {"block_size": 16, "num_blocks": 512}


def _trace(path):
    rows = ["id,arrival_time,input_len,output_len"]
    for i in range(12):  # one at a time: every prefill alone
        rows.append(f"s{i},{i * 2000.0},{64 + 250 * i},{6 + i}")
    for i in range(10):  # then a burst: decode batches of 1..10, KV up to ~0.9 of capacity
        rows.append(f"b{i},30000,{200 + 90 * i},{10 + 8 * i}")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    cfg = {"trace": _trace(tmp / "t.csv"), "out_dir": str(tmp / "runs"), "run_id": "truth"}
    return simulate(cfg, engine=TRUE).run_dir


def test_fit_gives_back_the_coefficients_that_made_the_records(run_dir):
    cal = calibrate([run_dir], base=BASE, self_check=False)
    assert cal.engine["prefill_coeffs"] == pytest.approx(TRUE["prefill_coeffs"], rel=1e-3)
    assert cal.engine["decode_coeffs"] == pytest.approx(TRUE["decode_coeffs"], rel=1e-3)
    assert cal.fit["prefill"]["samples"] == 12  # the burst's prefills did not run alone
    assert cal.fit["prefill"]["median_abs_pct_error"] < 1e-3
    assert cal.fit["decode"]["median_abs_pct_error"] < 1e-3
    assert cal.fit["decode"]["batch_range"] == [1.0, 10.0]
    assert TRUE["decode_floor_ms"] < cal.engine["decode_floor_ms"] < 25.0
    # nothing was cached, so the reported cached-token term has nothing to say
    assert cal.fit["prefill"]["cached_tokens_range"] == [0.0, 0.0]


def test_the_fitted_engine_predicts_its_own_run(run_dir):
    cal = calibrate([run_dir], base=BASE)
    (check,) = cal.fit["replay"]
    assert abs(check["ttft_ms"]["error_pct"]) < 0.1
    assert abs(check["tpot_ms"]["error_pct"]) < 0.1
    assert predict(run_dir, cal.engine) == check


def test_repeats_are_pooled_over_their_measured_ok_rows(tmp_path):
    """``predict_repeats``: the p50s are over the runs' ok rows, the warm-up's left out
    (``metrics.frame.ok_rows``); the truth engine predicts exactly the run it made."""
    from workbench.metrics import summarize

    cfg = {"trace": _trace(tmp_path / "t.csv"), "out_dir": str(tmp_path / "runs"),
           "arrival": {"warmup": 3}}
    dirs = [simulate({**cfg, "run_id": f"seed{s}", "seed": s}, engine=TRUE).run_dir
            for s in (1, 2)]
    out = predict_repeats(dirs, TRUE)
    for metric in ("ttft_ms", "tpot_ms"):
        per_run = [summarize(simulate({**cfg, "out_dir": None, "seed": s}, engine=TRUE))
                   [metric]["p50"] for s in (1, 2)]
        assert out[metric]["measured_p50_per_run"] == pytest.approx(per_run)
        assert out[metric]["predicted_p50"] == pytest.approx(per_run[0])


def test_cli_writes_an_engine_config_simulate_and_serve_take(run_dir, tmp_path):
    out = tmp_path / "engine.json"
    cmd = [sys.executable, "-m", "workbench", "sim", "calibrate", run_dir, "-o", str(out),
           "--engine", "num_blocks=512", "--no-replay"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "engine config:" in done.stdout
    written = json.loads(out.read_text())
    assert written["engine"]["num_blocks"] == 512
    assert set(written["fit"]) >= {"prefill", "decode", "requests", "lone_constant"}
    assert set(written["engine"]) >= {"idle_wake_ms", "intake_ms", "request_overhead_ms"}
    assert "\"lone_constant\"" in done.stdout  # the chosen split is printed
    printed, _ = json.JSONDecoder().raw_decode(done.stdout)
    # figures at the precision they carry (they were 16 digits: 3.000000203846893)
    assert printed["decode"]["coeffs"] == [3.0, 20.0, 4.0]
    assert printed["prefill"]["stated_error"]["in_sample"] == 0.0  # was 6.48e-15 %
    assert written["fit"]["decode"]["coeffs"] != [3.0, 20.0, 4.0]  # the file keeps them whole
    knobs = read_engine_file(out)
    assert knobs["prefill_coeffs"] == pytest.approx(TRUE["prefill_coeffs"], rel=1e-3)
    trace = str(tmp_path / "t.csv")
    _trace(tmp_path / "t.csv")
    sim = subprocess.run([sys.executable, "-m", "workbench", "simulate", "--trace", trace,
                          "--engine-config", str(out)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert sim.returncode == 0, sim.stderr


def test_bad_inputs_name_the_problem(tmp_path, run_dir):
    with pytest.raises(ConfigError, match="at least one run directory"):
        calibrate([])
    bad = tmp_path / "e.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping of engine knobs"):
        read_engine_file(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        read_engine_file(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="unknown engine knob"):
        calibrate([run_dir], base={"num_blockz": 3}, self_check=False)


def _three_lone(path):
    """Three requests one at a time then a burst of four: 3 lone prefills (3 samples for
    a quadratic's 3 parameters) and decodes of 7 requests."""
    rows = ["id,arrival_time,input_len,output_len"]
    rows += [f"s{i},{i * 2000.0},{64 + 700 * i},{8 + i}" for i in range(3)]
    rows += [f"b{i},10000,{200 + 90 * i},{10 + 8 * i}" for i in range(4)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_the_stated_error_is_held_out_leave_one_out(run_dir):
    """12 lone prefills: each predicted by the fit of the other 11 (leave-one-out); the
    stated error is the larger of that and the in-sample one, never the in-sample alone."""
    cal = calibrate([run_dir], base=BASE, self_check=False)
    for part in ("prefill", "decode"):
        rep = cal.fit[part]
        held = rep["held_out"]
        assert held["method"] == "leave-one-out" and held["samples"] == rep["samples"]
        assert held["median_abs_pct_error"] >= 0
        assert rep["stated_error"]["median_abs_pct_error"] == max(
            rep["median_abs_pct_error"], held["median_abs_pct_error"])


def test_three_samples_for_three_parameters_state_no_error_not_zero(tmp_path):
    """What the user saw: a quadratic fitted to 3 lone prefills stated ~0 % error. There is
    none to state: the file and the console say why, and print no 0 %."""
    cfg = {"trace": _three_lone(tmp_path / "t.csv"), "out_dir": str(tmp_path / "runs"),
           "run_id": "three"}
    run = simulate(cfg, engine=TRUE).run_dir
    cal = calibrate([run], base=BASE, self_check=False)
    pre = cal.fit["prefill"]
    assert pre["samples"] == 3 and pre["form"] == "a*T^2 + b*T + c"
    assert pre["median_abs_pct_error"] < 1e-3  # the exact fit, in sample
    note = "no held-out error: 3 samples fit 3 parameters"
    assert pre["held_out"] == {"method": "leave-one-out", "samples": 3, "note": note}
    assert pre["stated_error"] == {"median_abs_pct_error": None, "note": note}
    out = tmp_path / "engine.json"
    done = subprocess.run([sys.executable, "-m", "workbench", "sim", "calibrate", run, "-o",
                           str(out), "--engine", "num_blocks=512", "--no-replay"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"prefill: {note}" in done.stdout
    brief = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    assert brief["prefill"]["stated_error"] == note
    assert "median_abs_pct_error" not in brief["prefill"]  # no bare in-sample 0 %
    written = json.loads(out.read_text())
    assert written["fit"]["prefill"]["stated_error"]["note"] == note
    # a plan applies no band for a calibrated engine: its error is its calibration's
    from workbench.sim.presets.stated import metric_error
    assert metric_error(str(out), "ttft_ms") is None


def _sample(rid, dispatch, times):
    from workbench.calibration.samples import Sample

    t = np.asarray(times, dtype=np.int64)
    return Sample(dispatch, int(t[0]), int(t[-1]), t, np.ones_like(t), 100, 0, rid)


def test_a_request_joined_when_another_was_decoding_at_its_dispatch():
    from workbench.calibration.samples import joined

    ss = [
        _sample("a", 0, [10, 20, 30]),  # first wave: nothing decoded yet
        _sample("b", 0, [25, 35]),  # queued with a: still first wave
        _sample("c", 15, [20, 38]),  # a was decoding (10 <= 15 < 30)
        _sample("d", 30, [45, 50]),  # a had just ended, b was decoding (25 <= 30 < 35)
        _sample("e", 60, [70, 80]),  # all had ended: alone
    ]
    assert joined(ss) == [False, False, True, True, False]


def test_repeats_split_ttft_by_admission_and_the_truth_predicts_both(tmp_path):
    """``by_admission``: with four requests at a time the first wave is the first four of
    each run and every later one joins a running batch; the engine that made the runs
    predicts both classes' p50 exactly."""
    rows = ["id,arrival_time,input_len,output_len"]
    rows += [f"r{i},0,{100 + 40 * i},{12 + i % 5}" for i in range(14)]
    (tmp_path / "c4.csv").write_text("\n".join(rows) + "\n")
    cfg = {"trace": str(tmp_path / "c4.csv"), "out_dir": str(tmp_path / "runs"),
           "arrival": {"mode": "saturated", "max_concurrency": 4}}  # fmt: skip
    dirs = [simulate({**cfg, "run_id": f"seed{s}", "seed": s}, engine=TRUE).run_dir
            for s in (1, 2)]
    got = predict_repeats(dirs, TRUE)["ttft_ms"]["by_admission"]
    assert got["first_wave"]["measured_requests"] == 2 * 4
    assert got["joined"]["measured_requests"] == 2 * 10
    assert (got["first_wave"]["predicted_requests"], got["joined"]["predicted_requests"]) == (4, 10)
    for part in got.values():
        assert part["predicted_p50"] == pytest.approx(part["measured_p50"])
        assert part["error_pct"] == pytest.approx(0.0, abs=1e-9)


def test_the_console_states_figures_at_their_precision():
    from workbench.commands.sim import console_figures

    brief = {"coeffs": [2.0000000000000067e-06, 19.99999974170156], "floor_ms": 4.810727572619048,
             "samples": 22, "form": "a*T^2 + b*T + c",
             "stated_error": {"median_abs_pct_error": 1.1781044512635079e-07,
                              "in_sample": 12.34567, "held_out": -1e-9},
             "replay": [{"ttft_ms": {"measured_p50": 10.911010045833333,
                                     "error_pct": -2.8640794747535775e-07}}]}
    assert console_figures(brief) == {
        "coeffs": [2e-06, 20.0], "floor_ms": 4.811, "samples": 22, "form": "a*T^2 + b*T + c",
        "stated_error": {"median_abs_pct_error": 0.0, "in_sample": 12.346, "held_out": 0.0},
        "replay": [{"ttft_ms": {"measured_p50": 10.91, "error_pct": 0.0}}]}
    assert str(console_figures({"error_pct": -1e-9})["error_pct"]) == "0.0"  # no -0.0
