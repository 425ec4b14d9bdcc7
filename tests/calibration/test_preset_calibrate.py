"""A preset calibrated to one deployment, round trip: runs against the embedded engine
set to a known "true" preset (factors unlike the shipped ones), a preset calibrated from
them, and its predictions of held-back runs within 10 % (docs/calibration.md,
"Calibrating a preset")."""

import dataclasses
import json

import pytest

from workbench.calibration.predict import predict
from workbench.calibration.preset import calibrate_preset
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.safe_write import LinkRefused
from workbench.sim import presets
from workbench.sim.config import EngineConfig

BASE = "llama-3.1-8b/h100/tp1"
#: the deployment's truth: slower matmuls, less bandwidth, more fixed time than shipped
TRUTH = dataclasses.replace(presets.FACTORS, mfu=0.42, mbu=0.55, step_overhead_ms=4.1,
                            request_overhead_ms=9.0)


def _trace(path, rows):
    path.write_text("id,arrival_time,input_len,output_len\n"
                    + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]}\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preset-cal")
    truth = tmp / "truth.json"
    truth.write_text(json.dumps({"preset": BASE, "factors": dataclasses.asdict(TRUTH)}))
    engine = {"preset": str(truth)}
    # the sweep the user runs: one request at a time (lone prefills), then bursts
    lone = [(f"s{i}", i * 3000.0, 100 + 700 * i, 40) for i in range(10)]
    burst = [(f"b{i}", 0.0, 300 + 50 * i, 60 + 10 * i) for i in range(24)]
    runs = [simulate({"trace": _trace(tmp / f"{name}.csv", rows), "out_dir": str(tmp / "r"),
                      "run_id": name}, engine=engine).run_dir
            for name, rows in (("lone", lone), ("burst", burst))]
    held = [(f"h{i}", i * 150.0, 200 + 137 * (i % 9), 30 + 7 * (i % 5)) for i in range(40)]
    held_run = simulate({"trace": _trace(tmp / "held.csv", held), "out_dir": str(tmp / "r"),
                         "run_id": "held"}, engine=engine).run_dir
    return tmp, runs, held_run


def test_a_calibrated_preset_recovers_the_deployment_and_predicts_held_back_runs(deployment):
    tmp, runs, held_run = deployment
    cal = calibrate_preset(runs, BASE)
    path = cal.write(tmp / "mybox.json")
    before, after = cal.fit["before"], cal.fit["after"]
    print(json.dumps(cal.fit, indent=1))
    # the shipped factors miss this deployment; the calibrated ones fit its samples
    assert before["prefill"]["median_abs_pct_error"] > 20
    assert before["decode"]["median_abs_pct_error"] > 20
    assert after["prefill"]["median_abs_pct_error"] < 3
    assert after["decode"]["median_abs_pct_error"] < 3
    got = predict(held_run, {"preset": str(path)})
    shipped = predict(held_run, {"preset": BASE})
    print(json.dumps({"calibrated": got, "shipped": shipped}, indent=1))
    for metric in ("ttft_ms", "tpot_ms"):
        assert abs(got[metric]["error_pct"]) < 10, got
        assert abs(shipped[metric]["error_pct"]) > abs(got[metric]["error_pct"])


def test_the_calibrated_preset_is_usable_by_name(deployment):
    tmp, runs, _ = deployment
    path = calibrate_preset(runs, BASE).write(tmp / "named.json")
    p = presets.resolve(str(path))
    assert p.name == BASE and p.factors != presets.FACTORS
    assert presets.is_calibrated(str(path)) and not presets.is_calibrated(BASE)
    cfg = EngineConfig.from_knobs(preset=str(path))
    assert cfg.request_overhead_ms == p.factors.request_overhead_ms
    assert cfg.num_blocks == presets.resolve(BASE).num_blocks(16)


def test_bad_calibrated_presets_name_the_file_and_field(tmp_path, deployment):
    _, runs, _ = deployment
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"preset": BASE, "factors": {"mfu": "fast"}}))
    with pytest.raises(ValueError, match=r"bad\.json: 'factors'"):
        presets.resolve(str(bad))
    with pytest.raises(ConfigError, match="unknown model"):
        calibrate_preset(runs, "nope/h100/tp1")
    with pytest.raises(ConfigError, match=r"\.json"):
        calibrate_preset(runs, BASE).write(tmp_path / "x.yaml")


def test_a_calibrated_preset_is_written_whole_and_never_through_a_link(tmp_path, deployment):
    _, runs, _ = deployment
    cal = calibrate_preset(runs, BASE)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("keep me")
    link = tmp_path / "link.json"
    link.symlink_to(elsewhere)
    with pytest.raises(LinkRefused, match=r"link\.json"):
        cal.write(link)
    assert elsewhere.read_text() == "keep me"
    out = cal.write(tmp_path / "mine.json")  # renamed into place: no temporary left beside it
    assert json.loads(out.read_text())["preset"] == BASE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "link.json",
                                                          "mine.json"]


def test_cli_calibrates_a_preset_that_simulate_sweep_and_plan_take(deployment, tmp_path):
    import subprocess
    import sys

    from workbench.plan import _options, plan

    _, runs, _ = deployment
    out = tmp_path / "mybox.json"
    cmd = [sys.executable, "-m", "workbench", "sim", "calibrate", *runs, "--preset", BASE,
           "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\"before\"" in done.stdout and "\"after\"" in done.stdout
    assert f"--engine preset={out}" in done.stdout
    trace = str(tmp_path / "t.csv")
    _trace(tmp_path / "t.csv", [(f"q{i}", i * 100.0, 300, 20) for i in range(8)])
    sim = subprocess.run([sys.executable, "-m", "workbench", "simulate", "--trace", trace,
                          "--engine", f"preset={out}"], capture_output=True, text=True,
                         timeout=300)
    assert sim.returncode == 0, sim.stderr
    sweep = subprocess.run([sys.executable, "-m", "workbench", "sweep", "--trace", trace,
                            "--target", "sim", "--virtual", "--engine", f"preset={out}",
                            "--engine", "scheduler=trtllm", "--over", "max_concurrency=1,2",
                            "-o", str(tmp_path / "sweeps")], capture_output=True, text=True,
                           timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    assert "max_concurrency=2" in sweep.stdout
    (option,) = _options([str(out)], ["round-robin"], [0.0])
    assert option.is_preset and option.gpu == "h100" and option.gpus_per_replica == 1
    assert option.knobs(2)["preset"] == str(out)
    result = plan(trace, [str(out)], "ttft_ms:p90<=5000", scales=[1.0], max_items=8,
                  max_replicas=2, parallel=1)
    assert "calibrated preset (llama-3.1-8b/h100/tp1)" in json.dumps(result.to_dict())


def test_a_static_loops_prefill_is_predicted_without_the_request_overhead():
    """Calibration predicts a lone prefill as the engine config charges it: a compiled
    static loop pays no request overhead (``Factors.request_ms``), a serving engine its
    ``request_overhead_ms`` (the static loop's fixed step set to the serving one here, so
    the steps cost the same)."""
    from workbench.calibration.preset import prefill_ms

    serving = presets.resolve("llama-3.1-8b/h100/tp1")
    static = dataclasses.replace(
        serving, factors=dataclasses.replace(serving.factors, static_loop=1.0,
                                             static_step_ms=serving.factors.step_overhead_ms))
    overhead = serving.factors.request_overhead_ms
    assert overhead > 0
    for new, cached in ((128, 0), (3000, 512)):
        a, b = prefill_ms(serving, 2048, new, cached), prefill_ms(static, 2048, new, cached)
        assert a - b == pytest.approx(overhead, abs=1e-9)
    knobs = presets.engine_knobs("llama-3.1-8b/h100/tp1", {})
    assert knobs["request_overhead_ms"] == overhead
