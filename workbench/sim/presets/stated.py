"""The error each preset states: the fit's median absolute error on published tables.

The numbers are the fit's own record (``sim/presets/fitted_factors.json``, written
by ``python -m workbench.sim.presets.fit --write``): the median absolute error per
metric class on the tables the factors were fitted on (in sample) and on the tables
held out of the fit (docs/hardware.md, "Fit"); a test re-derives them from the tables.
A (model, GPU) pair no table covers says it is extrapolated.
"""

from __future__ import annotations

import functools
import json

from workbench.sim.presets import FACTORS_FILE, parse
from workbench.sim.presets.tables import load_tables


@functools.cache
def fit_record() -> dict[str, dict[str, float]]:
    """``in_sample`` and ``held_out_error``: metric class -> median absolute error."""
    record = json.loads(FACTORS_FILE.read_text(encoding="utf-8"))
    return {k: record.get(k, {}) for k in ("in_sample", "held_out_error")}


@functools.cache
def measured() -> frozenset[tuple[str, str]]:
    """(model, GPU) pairs some published table covers."""
    return frozenset(parse(p)[:2] for t in load_tables() for p in t.presets)


def stated_error(engine: str) -> str:
    """What a figure simulated with ``engine`` must say about its error."""
    if engine.endswith(".json"):
        return "calibrated engine: its error is its calibration's (sim calibrate)"
    model, gpu, _tp, _fp8 = parse(engine)
    rec = fit_record()
    held, fitted = rec["held_out_error"], rec["in_sample"]

    def both(key: str) -> str:
        return f"{held.get(key, float('nan')):.0%} / {fitted.get(key, float('nan')):.0%}"

    text = (f"preset error on published tables, median abs held out / fitted: ITL "
            f"{both('itl')}, throughput {both('throughput')}, TTFT {both('ttft')}")
    if unmeasured(engine):
        text += f"; no published table for {model} on {gpu}: extrapolated"
    return text


def stated_error_brief(engine: str) -> str:
    """``stated_error`` in a headline's few words: the held-out median errors, and
    "extrapolated" where no published table covers the preset's model on its GPU."""
    held = fit_record()["held_out_error"]
    parts = [f"{name} {held[key]:.0%}" for key, name in
             (("itl", "ITL"), ("throughput", "throughput"), ("ttft", "TTFT")) if key in held]
    text = "held-out median error " + ", ".join(parts)
    try:
        pair = unmeasured(engine)
    except ValueError:  # not a preset name: the errors alone
        return text
    return f"{text}; extrapolated ({pair[0]} on {pair[1]})" if pair else text


def unmeasured(engine: str) -> tuple[str, str] | None:
    """The preset's (model, GPU) when no published table covers them, else None."""
    model, gpu = parse(engine)[:2]
    return None if (model, gpu) in measured() else (model, gpu)


#: the fit's metric class an SLO metric's error is stated in (docs/plan.md, "Error band");
#: a metric not listed has no stated error
METRIC_CLASS = {"ttft_ms": "ttft", "tpot_ms": "itl", "itl_ms": "itl",
                "completion_amortized_tpot_ms": "itl", "e2e_ms": "latency"}
#: the class's name in a sentence
CLASS_NAME = {"ttft": "TTFT", "itl": "ITL/TPOT", "latency": "latency"}


def metric_error(engine: str, metric: str) -> float | None:
    """The error a preset states for an SLO metric: the larger of the fit's held-out and
    in-sample median absolute errors of the metric's class (``METRIC_CLASS``; e.g. TTFT
    0.371), so a plan's band is never narrower than either; None for a calibrated engine
    (its error is its calibration's) or a metric with no class."""
    if engine.endswith(".json") or metric not in METRIC_CLASS:
        return None
    key = METRIC_CLASS[metric]
    rec = fit_record()
    found = [rec[part][key] for part in ("held_out_error", "in_sample") if key in rec[part]]
    return max(found) if found else None
