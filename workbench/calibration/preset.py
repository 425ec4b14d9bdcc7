"""Calibrate a hardware preset's factors to one deployment, from runs against it.

``calibrate_preset`` takes the clean samples ``calibration.fit`` takes and refits the
preset's efficiency factors (``FITTED``) by a deterministic pattern search on the mean
absolute log error of the prefills plus that of the decodes, predicted by the preset's
own step time. The result is a calibrated preset file for ``--engine preset=FILE.json``
(docs/calibration.md, "Calibrating a preset").
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from workbench import safe_write as safe
from workbench.calibration.fit import MIN_SAMPLES, _decode_gaps
from workbench.calibration.samples import Sample, overlapped, read_samples
from workbench.errors import ConfigError
from workbench.sim import presets
from workbench.sim.config import EngineConfig

#: the factors a calibration moves (the others only shift every step alike, which
#: ``step_overhead_ms`` already does for one deployment)
FITTED = ("mfu", "mbu", "step_overhead_ms", "request_overhead_ms", "gemm_half_tokens")
STEPS = (1.5, 1.2, 1.07, 1.02, 1.005)
MAX_EVALS = 4000


@dataclass(frozen=True, slots=True)
class Observations:
    """What the runs measured, in the preset's terms: lone prefills (uncached and cached
    tokens, TTFT ms) and per-request decode means (batch, KV tokens, gap ms)."""

    prefills: list[tuple[int, int, float]]
    decodes: list[tuple[float, float, float]]


def observe(samples: Sequence[Sample]) -> Observations:
    """The clean prefills and decode gaps of ``samples`` (ConfigError: fewer than
    ``MIN_SAMPLES`` of either)."""
    prefills = [(s.prompt - s.cached, s.cached, s.ttft_ms)
                for s, busy in zip(samples, overlapped(samples), strict=True)
                if not busy and not s.first_delivered_late and s.prompt > s.cached]
    gap, batch, kv, owner = _decode_gaps(list(samples))
    decodes = []
    for i in np.unique(owner):
        mine = owner == i
        decodes.append((float(batch[mine].mean()), float(kv[mine].mean()),
                        float(gap[mine].mean())))
    if len(prefills) < MIN_SAMPLES or len(decodes) < MIN_SAMPLES:
        raise ConfigError(
            f"preset calibration needs >= {MIN_SAMPLES} requests whose prefill ran alone "
            f"and >= {MIN_SAMPLES} with clean decode gaps; found {len(prefills)} and "
            f"{len(decodes)}: add a sweep point at concurrency 1 and outputs of several tokens")
    return Observations(prefills, decodes)


def prefill_ms(p: presets.Preset, budget: int, new: int, cached: int) -> float:
    """A lone prompt's TTFT on the preset: the request overhead it charges, then its ``new`` tokens
    after ``cached`` ones in chunks of the engine's token ``budget``, one step each."""
    total, done = p.factors.request_ms, 0
    while done < new:
        n = min(budget, new - done)
        c = cached + done
        total += p.step_ms(n, 0, 0, int(n * (c + (n + 1) / 2)))
        done += n
    return total


def errors(p: presets.Preset, obs: Observations, budget: int) -> dict[str, list[float]]:
    """Log errors (predicted / measured) of every prefill and decode observation."""
    pre = [math.log(prefill_ms(p, budget, t, c) / y) for t, c, y in obs.prefills if y > 0]
    dec = [math.log(p.step_ms(0, max(1, round(b)), round(kv)) / y)
           for b, kv, y in obs.decodes if y > 0]
    return {"prefill": pre, "decode": dec}


def _loss(errs: dict[str, list[float]]) -> float:
    """Mean absolute log error of the prefills plus that of the decodes."""
    return sum(sum(abs(e) for e in v) / len(v) for v in errs.values() if v)


def _report(errs: dict[str, list[float]]) -> dict[str, Any]:
    return {k: {"samples": len(v),
                "median_abs_pct_error": round(median(abs(math.expm1(e)) for e in v) * 100, 3)}
            for k, v in errs.items() if v}  # fmt: skip


def search(base: presets.Preset, loss: Callable[[presets.Preset], float],
           names: Sequence[str]) -> presets.Preset:
    """Pattern search on a log scale over the factors ``names`` (each × and ÷ a step,
    kept when the loss falls; the step shrinking through ``STEPS``)."""
    best, best_loss, evals = base, loss(base), 1
    for step in STEPS:
        moved = True
        while moved and evals < MAX_EVALS:
            moved = False
            for name in names:
                for mult in (step, 1 / step):
                    f = best.factors
                    value = getattr(f, name) * mult
                    if name in ("mfu", "mbu", "mfu_fp8"):
                        value = min(value, 1.0)
                    trial = dataclasses.replace(
                        best, factors=dataclasses.replace(f, **{name: value}))
                    got, evals = loss(trial), evals + 1
                    if got < best_loss - 1e-12:
                        best, best_loss, moved = trial, got, True
                        break
    return best


@dataclass
class PresetCalibration:
    """A preset refitted to one deployment: its name, factors and fit report."""

    preset: str
    factors: presets.Factors
    fit: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "factors": dataclasses.asdict(self.factors),
                "fit": self.fit}

    def write(self, path: str | Path) -> Path:
        """The calibrated preset file ``--engine preset=PATH`` takes."""
        p = Path(path)
        if p.suffix != ".json":
            raise ConfigError(f"{p}: a calibrated preset is written as a .json file")
        return safe.write_file(p, json.dumps(self.to_dict(), indent=2) + "\n")


def calibrate_preset(run_dirs: Sequence[str | Path], preset: str, *,
                     base: dict[str, Any] | None = None) -> PresetCalibration:
    """Refit ``preset``'s factors (``FITTED``) to the runs in ``run_dirs``; ``base``: the
    server's scheduling knobs (its token budget)."""
    from workbench.storage.rundir import load

    if not run_dirs:
        raise ConfigError("calibrate needs at least one run directory")
    try:
        start = presets.resolve(preset)
        cfg = EngineConfig.from_knobs(preset=preset, **(base or {}))
    except ValueError as exc:
        raise ConfigError(f"calibrate --preset: {exc}") from None
    samples = [s for d in run_dirs for s in read_samples(load(d).records)]
    obs = observe(samples)
    budget = cfg.max_num_batched_tokens
    names = [("mfu_fp8" if n == "mfu" and start.fp8 and start.factors.mfu_fp8 else n)
             for n in FITTED]
    if not start.factors.gemm_half_tokens:
        names.remove("gemm_half_tokens")  # a zero stays zero under × and ÷
    before = errors(start, obs, budget)
    got = search(start, lambda p: _loss(errors(p, obs, budget)), names)
    inside = _report(errors(got, obs, budget))
    held = _report(held_out(start, obs, budget, names))
    fit = {"runs": [str(d) for d in run_dirs], "base": dict(base or {}),
           "fitted": names, "budget_tokens": budget, "folds": folds(obs),
           "before": _report(before), "after": _stated(inside, held),
           "in_sample": inside, "held_out": held}
    return PresetCalibration(start.name, got.factors, fit)


#: at most this many folds for the held-out error (each one more search)
MAX_FOLDS = 5


def folds(obs: Observations) -> int:
    """Folds of the held-out error: as many as the fewer samples of either class, at most
    ``MAX_FOLDS`` (three samples: leave one out)."""
    return min(MAX_FOLDS, len(obs.prefills), len(obs.decodes))


def held_out(start: presets.Preset, obs: Observations, budget: int,
             names: Sequence[str]) -> dict[str, list[float]]:
    """Each sample's log error when the factors are fitted without it: k-fold (sample i in
    fold i mod k, both classes at once), deterministic."""
    k = folds(obs)
    out: dict[str, list[float]] = {"prefill": [], "decode": []}
    for f in range(k):
        train = Observations([x for i, x in enumerate(obs.prefills) if i % k != f],
                             [x for i, x in enumerate(obs.decodes) if i % k != f])
        test = Observations([x for i, x in enumerate(obs.prefills) if i % k == f],
                            [x for i, x in enumerate(obs.decodes) if i % k == f])
        def loss(p: presets.Preset, t: Observations = train) -> float:
            return _loss(errors(p, t, budget))

        got = search(start, loss, names)
        for cls, errs in errors(got, test, budget).items():
            out[cls] += errs
    return out


def _stated(inside: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """The error a calibrated preset states per class: the larger of its in-sample and
    held-out median absolute errors (as a shipped preset's: docs/hardware.md, "Fit")."""
    return {cls: {"samples": r["samples"],
                  "median_abs_pct_error": max(r["median_abs_pct_error"],
                                              held.get(cls, r)["median_abs_pct_error"])}
            for cls, r in inside.items()}
