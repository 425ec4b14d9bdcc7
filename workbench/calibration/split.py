"""Where a lone request's constant goes: engine step, idle wake, intake or overhead.

``fit_split`` replays the runs whose requests overlapped under every split of the
prefill constant ``c`` into those four, in tenths, and keeps the split whose overlapped
TTFTs are nearest the measured ones (median absolute relative error; ties: fewer parts,
then smaller overhead, idle wake, intake). Why all 286: docs/calibration.md, "What is
fitted, from what".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.calibration.predict import replay_config
from workbench.calibration.samples import overlapped_ttft_ms, read_samples
from workbench.records import RunResult

SPLIT_STEPS = 10  # c is split in tenths
PARTS = ("request_overhead_ms", "idle_wake_ms", "intake_ms")  # the rest stays in the step


def splits(steps: int = SPLIT_STEPS) -> list[tuple[int, ...]]:
    """Every (overhead, wake, intake) in tenths (of ``steps``) whose sum is <= ``steps``."""
    return [p for p in itertools.product(range(steps + 1), repeat=len(PARTS)) if sum(p) <= steps]


def search(error: Callable[[tuple[int, ...]], float]) -> list[tuple[float, int, tuple[int, ...]]]:
    """``(error, parts used, split)`` of every split, best first (ties: module doc)."""
    return sorted((error(p), sum(x > 0 for x in p), p) for p in splits())


def knobs_of_split(a: float, b: float, c: float, parts: Sequence[int]) -> dict[str, Any]:
    """The engine knobs of a split of ``c`` (``parts``: overhead, wake, intake in tenths):
    its parts of ``c``, the rest left in the prefill step's constant."""
    rest = 1 - sum(parts) / SPLIT_STEPS
    return {"prefill_coeffs": [a, b, c * rest],
            **{k: c * p / SPLIT_STEPS for k, p in zip(PARTS, parts, strict=True)}}  # fmt: skip


def fit_split(results: Sequence[RunResult], knobs: dict[str, Any]) -> dict[str, Any]:
    """Set ``knobs`` to the chosen split; the report has every split tried and its error."""
    from workbench.executors.virtual import simulate
    from workbench.replay.prepare import load_workload

    a, b, c = knobs["prefill_coeffs"]
    overlapping = []
    for r in results:
        measured = overlapped_ttft_ms(read_samples(r.records))
        if measured:
            cfg = replay_config(r)
            overlapping.append((cfg, load_workload(cfg), measured))  # loaded once
    if not overlapping or c <= 0:
        knobs.update({k: 0.0 for k in PARTS})
        note = "no run with overlapping requests (or no constant) to split c by"
        return {"c_ms": c, "split": dict.fromkeys(PARTS, 0.0), "note": note}

    def error(parts: tuple[int, ...]) -> float:
        engine = {**knobs, **knobs_of_split(a, b, c, parts)}
        pct = []
        for cfg, workload, measured in overlapping:
            sim = simulate(cfg, engine=dict(engine), workload=workload).records
            got = {x.request_id: x.ttft_ms for x in read_samples(sim)}
            pct += [abs(got[k] - m) / m * 100 for k, m in measured.items() if k in got and m > 0]
        return float(np.median(pct)) if pct else float("inf")

    tried = search(error)
    err, _, best = tried[0]
    chosen = knobs_of_split(a, b, c, best)
    knobs.update(chosen)
    return {
        "c_ms": c,
        "split": {k: chosen[k] for k in PARTS},
        "shares_of_c": {k: p / SPLIT_STEPS for k, p in zip(PARTS, best, strict=True)},
        "prefill_c_ms": chosen["prefill_coeffs"][2],
        "runs": len(overlapping),
        "median_abs_pct_error": err,
        "tried": [_tried_row(e, parts) for e, _, parts in tried],
    }


def _tried_row(err: float, parts: Sequence[int]) -> dict[str, float]:
    shares = {k.removesuffix("_ms"): p / SPLIT_STEPS for k, p in zip(PARTS, parts, strict=True)}
    return {**shares, "median_abs_pct_error": err}
