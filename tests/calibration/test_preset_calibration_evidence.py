"""A calibrated preset states no error smaller than its held-out one (docs/calibration.md,
"Calibrating a preset"): fitted on three lone requests, five factors reproduce them to a
fraction of a percent, which says nothing of a fourth; the error a plan's band takes is
the larger of the fit's in-sample and held-out (k-fold) errors, as a shipped preset's is
(docs/hardware.md, "Fit")."""

from __future__ import annotations

from pathlib import Path

from workbench.calibration.preset import calibrate_preset
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.sim.presets.stated import metric_error

BASE = "llama-3.1-8b/h100/tp1"
MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def _runs(tmp: Path, items: int) -> list[str]:
    """``items`` Mooncake requests one at a time on the embedded engine (its polynomial
    cost model: not the preset's form, so no factors fit it exactly)."""
    run = simulate({"trace": {"path": MOONCAKE, "max_items": items},
                    "arrival": {"mode": "saturated", "max_concurrency": 1},
                    "out_dir": str(tmp), "run_id": f"lone{items}"})
    return [str(run.run_dir)]


def test_three_samples_state_their_held_out_error(tmp_path: Path) -> None:
    cal = calibrate_preset(_runs(tmp_path, 3), BASE)
    fit = cal.fit
    for cls in ("prefill", "decode"):
        inside = fit["in_sample"][cls]["median_abs_pct_error"]
        held = fit["held_out"][cls]["median_abs_pct_error"]
        assert fit["after"][cls]["median_abs_pct_error"] == max(inside, held)
        assert fit["held_out"][cls]["samples"] == 3
    # in sample, five factors fit three prefills almost exactly; held out, they do not
    assert fit["in_sample"]["prefill"]["median_abs_pct_error"] < 1
    assert fit["held_out"]["prefill"]["median_abs_pct_error"] > 1
    path = cal.write(tmp_path / "box.json")
    # the plan's band (stated.metric_error) is the stated, larger error
    assert metric_error(str(path), "ttft_ms") == \
        fit["after"]["prefill"]["median_abs_pct_error"] / 100
