"""The error each preset states: the fit's median absolute error on published tables.

The numbers are the fit's own record (``sim/presets/fitted_factors.json``, written
by ``python -m workbench.sim.presets.fit --write``): the median absolute error per
metric class **leave-one-source-out** (each source's rows predicted by a fit that never
saw that source), for the preset's own GPU and TP where some source measured
``MIN_ROWS`` numbers of the class, else the larger of every source's and the worst its
own GPU and TP's cell shows; and in sample (docs/hardware.md, "Fit"); a test re-derives
them from the tables. ``stated``, the larger of the two per class, is the one figure a
plan's band and a run's headline give. A (model, GPU) pair no table covers says it is
extrapolated. A calibrated preset file states its own calibration's errors.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from workbench.sim.presets import FACTORS_FILE, calibrated, is_calibrated, parse
from workbench.sim.presets.tables import load_tables

MIN_ROWS = 3  # numbers of a class a (GPU, TP) cell needs to state its own error


def error_pct(e: float | None) -> str:
    """A stated error as every text prints it (a plan's band and closing note, a report's
    headline, a table's label): one decimal, ``"37.1%"``; one rule, so one error never
    reads two ways in one sentence (docs/plan.md, "Error band")."""
    if e is None or math.isnan(e):  # NaN: a class the record lacks
        return "not recorded"
    return f"{e:.1%}"


@functools.cache
def fit_record() -> dict[str, dict[str, float]]:
    """``in_sample`` and ``held_out_error`` (leave-one-source-out, every source):
    metric class -> median absolute error."""
    record = json.loads(FACTORS_FILE.read_text(encoding="utf-8"))
    return {k: record.get(k, {}) for k in ("in_sample", "held_out_error")}


@functools.cache
def _cells() -> dict[str, dict[str, float]]:
    record = json.loads(FACTORS_FILE.read_text(encoding="utf-8"))
    cells: dict[str, dict[str, float]] = record.get("leave_one_source_out", {}).get(
        "by_gpu_tp", {})
    return cells


def held_out(engine: str) -> dict[str, float]:
    """The leave-one-source-out median absolute error per metric class that ``engine``
    (a catalog preset) states: its (GPU, TP) cell's where that cell has ``MIN_ROWS``
    numbers of the class; else the larger of every source's and the worst figure the
    cell shows, of any class and however few numbers — never less than the table's row
    for its GPU and TP shows (8 × MI300X measured no ITL, but its batch latencies, 128
    decode steps each, miss by 29.8 %: docs/hardware.md, "Fit")."""
    out = dict(fit_record()["held_out_error"])
    try:
        _model, gpu, tp, _fp8 = parse(engine)
    except ValueError:
        return out
    cell = _cells().get(f"{gpu} tp{tp}", {})
    worst = max((v for k, v in cell.items() if not k.endswith("_n")), default=0.0)
    for key in out:
        if key == "all":  # every row, no class: not a figure any text states
            continue
        if cell.get(f"{key}_n", 0) >= MIN_ROWS:
            out[key] = cell[key]
        else:
            out[key] = max(out[key], worst)
    return out


def stated(engine: str) -> dict[str, float]:
    """The error ``engine`` (a catalog preset) states per metric class: the larger of
    its leave-one-source-out figure (``held_out``) and the fit's in-sample one, so that
    no text states less than either (a plan's band, a run's headline: docs/plan.md,
    "Error band")."""
    held, fitted = held_out(engine), fit_record()["in_sample"]
    return {k: max(v, fitted.get(k, v)) for k, v in held.items() if k != "all"}


@functools.cache
def measured() -> frozenset[tuple[str, str]]:
    """(model, GPU) pairs some published table covers."""
    return frozenset(parse(p)[:2] for t in load_tables() for p in t.presets)


def calibration_errors(engine: str) -> dict[str, float]:
    """A calibrated preset file's own errors after its fit (``calibration.preset``):
    ``{"prefill": 0.01, "decode": 0.004}`` as shares; empty when it records none."""
    try:
        data = json.loads(Path(engine).read_text(encoding="utf-8"))
        after = data["fit"]["after"]
        return {k: float(v["median_abs_pct_error"]) / 100 for k, v in after.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}


def stated_error(engine: str) -> str:
    """What a figure simulated with ``engine`` must say about its error."""
    if is_calibrated(engine):
        errs = calibration_errors(engine)
        told = ", ".join(f"{k} {error_pct(v)}" for k, v in errs.items()) or "not recorded"
        return (f"calibrated preset ({parse_base(engine)}): its error is its calibration's "
                f"on the deployment's runs, median abs {told}")
    if engine.endswith(".json"):
        return "calibrated engine: its error is its calibration's (sim calibrate)"
    model, gpu, _tp, _fp8 = parse(engine)
    held, fitted = held_out(engine), fit_record()["in_sample"]

    def both(key: str) -> str:
        return f"{error_pct(held.get(key))} / {error_pct(fitted.get(key))}"

    text = (f"preset error on published tables, median abs held out / fitted: ITL "
            f"{both('itl')}, throughput {both('throughput')}, TTFT {both('ttft')}")
    if unmeasured(engine):
        text += f"; no published table for {model} on {gpu}: extrapolated"
    return text


def stated_error_brief(engine: str) -> str:
    """``stated_error`` in a headline's few words: the stated median errors (``stated``:
    the figures a plan's band applies), and "extrapolated" where no published table
    covers the preset's model on its GPU; a calibrated preset file, its calibration's."""
    if is_calibrated(engine):
        errs = calibration_errors(engine)
        told = ", ".join(f"{k} {error_pct(v)}" for k, v in errs.items()) or "not recorded"
        return (f"calibrated preset ({parse_base(engine)}): its calibration's median error "
                f"{told}")
    errs = stated(engine)
    parts = [f"{name} {error_pct(errs[key])}" for key, name in
             (("itl", "ITL"), ("throughput", "throughput"), ("ttft", "TTFT")) if key in errs]
    text = "stated median error " + ", ".join(parts)
    try:
        pair = unmeasured(engine)
    except ValueError:  # not a preset name: the errors alone
        return text
    return f"{text}; extrapolated ({pair[0]} on {pair[1]})" if pair else text


def parse_base(engine: str) -> str:
    """The catalog preset a calibrated preset file was calibrated from."""
    return calibrated(engine)[0]


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
    """The error a preset states for an SLO metric: the larger of the fit's
    leave-one-source-out (``held_out``: the preset's GPU and TP where measured) and
    in-sample median absolute errors of the metric's class (``METRIC_CLASS``), so a
    plan's band is never narrower than either; a calibrated preset file's own
    calibration error (prefill for TTFT, decode for ITL, the larger for latency); None
    for a calibrated engine (its error is its calibration's) or a metric with no class."""
    if is_calibrated(engine) and metric in METRIC_CLASS:
        errs = calibration_errors(engine)
        part = {"ttft": ["prefill"], "itl": ["decode"]}.get(METRIC_CLASS[metric],
                                                            ["prefill", "decode"])
        found_cal = [errs[p] for p in part if p in errs]
        return max(found_cal) if found_cal else None
    if engine.endswith(".json") or metric not in METRIC_CLASS:
        return None
    return stated(engine).get(METRIC_CLASS[metric])
