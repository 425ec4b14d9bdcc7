"""Arrival processes (pure): start times drawn for units, replacing a trace's timeline.

vLLM's ``vllm bench serve`` definitions, ramped over the units or over a duration (time
rescaling: ``cumulative``, ``inverse_cumulative``); the formulas and the two differences
from vLLM: docs/arrival.md, "Arrival processes". A seed gives the same timeline.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from workbench.errors import ConfigError
from workbench.ranges import RANGES, check_value, hints_of
from workbench.registry import Registry


@dataclass(frozen=True)
class GapLaw:
    """One arrival process: ``draw(n, rng, process)``, its ``n`` gaps at rate 1, and the
    ``ArrivalProcess`` fields it reads beyond rate and ramp. A new process is one
    ``GAP_LAWS.add`` (and a new parameter a field with its range)."""

    draw: Callable[[int, np.random.Generator, ArrivalProcess], np.ndarray]
    description: str
    params: tuple[str, ...] = ()


def _gamma(n: int, rng: np.random.Generator, b: float) -> np.ndarray:
    return rng.gamma(shape=b, scale=1.0 / b, size=n)  # Gamma(b, 1/b): mean 1, CV 1/sqrt(b)


GAP_LAWS: Registry[GapLaw] = Registry("arrival process")
GAP_LAWS.add("poisson", GapLaw(lambda n, rng, _p: _gamma(n, rng, 1.0),
                               "exponential gaps at arrival.rate (replaces the trace's timeline)"))
GAP_LAWS.add("gamma", GapLaw(lambda n, rng, p: _gamma(n, rng, p.burstiness),
                             "gamma gaps at arrival.rate, shape arrival.burstiness (CV 1/sqrt(b))",
                             ("burstiness",)))
GAP_LAWS.add("constant", GapLaw(lambda n, _rng, _p: np.ones(n), "one unit every 1/arrival.rate s"))
PROCESSES = tuple(GAP_LAWS.names())
#: the fields of a process beyond its kind and rate, ``ArrivalSpec``'s under the same names
SHAPE_FIELDS = ("burstiness", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
                "ramp_up_duration_s")
RampStrategy = Literal["linear", "exponential"]
RAMP_STRATEGIES: tuple[str, ...] = typing.get_args(RampStrategy)
DOC = "docs/arrival.md, 'Arrival processes'"


@dataclass(frozen=True)
class ArrivalProcess:
    """A process (``kind``) at ``rate`` units/s or ramped (docs/arrival.md)."""

    kind: str = "poisson"
    rate: float | None = None
    burstiness: float = 1.0
    ramp_up_strategy: RampStrategy | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    ramp_up_duration_s: float | None = None

    def check(self, where: str = "arrival") -> ArrivalProcess:
        """Every rule of the definition; the message names ``where``'s field."""
        if self.kind not in PROCESSES:
            raise ConfigError(f"{where}.mode {self.kind!r}: not an arrival process "
                              f"({', '.join(PROCESSES)})")
        hints = hints_of(ArrivalProcess)
        for name in ("rate", *SHAPE_FIELDS):  # the config's ranges (docs/config-bounds.md)
            check_value(f"{where}.{name}", getattr(self, name), hints[name],
                        RANGES.get(f"arrival.{name}"))
        b = self.burstiness
        if b != 1.0 and "burstiness" not in GAP_LAWS.get(self.kind).params:
            takes = " or ".join(repr(k) for k in PROCESSES if "burstiness" in
                                GAP_LAWS.get(k).params)
            raise ConfigError(f"{where}.burstiness {b:g} shapes gamma gaps: use mode {takes} "
                              f"(mode {self.kind!r} is burstiness 1 or none; {DOC})")
        if self.ramp_up_strategy is None:
            if (self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None
                    or self.ramp_up_duration_s is not None):
                raise ConfigError(f"{where}.ramp_up_start_rps/ramp_up_end_rps/"
                                  f"ramp_up_duration_s need {where}.ramp_up_strategy "
                                  "(linear or exponential)")
            if self.rate is None:
                raise ConfigError(f"{where}.mode {self.kind!r} draws arrivals at a rate: give "
                                  f"{where}.rate (units/s), or a ramp-up ({DOC})")
            return self
        if self.rate is not None:
            raise ConfigError(f"{where}.rate and a ramp-up both set the rate: drop rate "
                              "(the ramp goes from ramp_up_start_rps to ramp_up_end_rps)")
        lo, hi = self.ramp_up_start_rps, self.ramp_up_end_rps
        if lo is None or hi is None:
            raise ConfigError(f"{where}.ramp_up_strategy needs both ramp_up_start_rps and "
                              "ramp_up_end_rps")
        if not lo <= hi:
            raise ConfigError(f"{where}.ramp_up_start_rps must be in [0, ramp_up_end_rps], "
                              f"got {lo!r}")
        if self.ramp_up_strategy == "exponential" and lo == 0:
            raise ConfigError(f"{where}.ramp_up_start_rps: an exponential ramp cannot start "
                              "at 0 units/s")
        return self

    def rates(self, n: int) -> np.ndarray:
        """``λ_i`` for ``i = 0..n-1`` (units/s), the ramp over the units."""
        if self.ramp_up_strategy is None:
            return np.full(n, float(self.rate or 0.0))
        lo, hi = float(self.ramp_up_start_rps or 0.0), float(self.ramp_up_end_rps or 0.0)
        progress = np.arange(n, dtype=float) / max(n - 1, 1)
        if self.ramp_up_strategy == "linear":
            return lo + (hi - lo) * progress
        return np.asarray(lo * (hi / lo) ** progress)

    def offsets_ms(self, n: int, seed: int) -> list[float]:
        """Start offsets (ms from 0) of ``n`` units; the first is 0."""
        if n <= 0:
            return []
        rng = np.random.default_rng(seed)
        if self.ramp_up_duration_s is not None:
            starts = self.inverse_cumulative(np.cumsum(self.unit_gaps(n - 1, rng)))
        else:
            rates = self.rates(n)[1:]
            if not (rates > 0).all():  # a linear ramp from 0: unit 0 alone at 0
                raise ConfigError("a ramp's rate is 0 at a unit after the first; start above 0")
            # Gamma(b, 1/b)/λ_i is Gamma(b, 1/(λ_i·b)); the constant gap is 1/λ_i
            starts = np.cumsum(self.unit_gaps(n - 1, rng) / rates)
        return np.concatenate(([0.0], starts * 1000.0)).tolist()

    def unit_gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` gaps of the process at rate 1 (``GAP_LAWS``)."""
        return GAP_LAWS.get(self.kind).draw(n, rng, self)

    def _ramp(self) -> tuple[float, float, float]:
        """``(r0, r1, S)`` of a ramp over a duration."""
        return (float(self.ramp_up_start_rps or 0.0), float(self.ramp_up_end_rps or 0.0),
                float(self.ramp_up_duration_s or 0.0))

    def cumulative(self, t_s: np.ndarray) -> np.ndarray:
        """``Λ(t) = ∫₀ᵗ r(s) ds``: the expected number of units after unit 0 by ``t``."""
        r0, r1, span = self._ramp()
        t = np.asarray(t_s, dtype=float)
        x = np.minimum(t, span)
        if self.ramp_up_strategy == "linear":
            ramp = r0 * x + (r1 - r0) * x * x / (2 * span)
        elif r0 == r1:
            ramp = r0 * x
        else:
            ln_k = math.log(r1 / r0)
            ramp = r0 * span / ln_k * np.expm1(x / span * ln_k)
        return np.asarray(ramp + r1 * np.maximum(t - span, 0.0))

    def inverse_cumulative(self, u: np.ndarray) -> np.ndarray:
        """``Λ⁻¹(u)``: the time (s) by which ``u`` units are expected, in closed form."""
        r0, r1, span = self._ramp()
        u = np.asarray(u, dtype=float)
        total = float(self.cumulative(np.asarray(span)))  # Λ(S)
        v = np.minimum(u, total)
        if self.ramp_up_strategy == "linear":
            # the root of (r1-r0)/(2S)·t² + r0·t = v, in the form that is exact at r0 = r1
            # and at r0 = 0
            root = np.sqrt(r0 * r0 + 2.0 * (r1 - r0) * v / span)
            with np.errstate(invalid="ignore", divide="ignore"):
                ramp = np.where(v > 0, 2.0 * v / (r0 + root), 0.0)
        elif r0 == r1:
            ramp = v / r0
        else:
            ln_k = math.log(r1 / r0)
            ramp = span / ln_k * np.log1p(v * ln_k / (r0 * span))
        return np.asarray(ramp + np.maximum(u - total, 0.0) / r1)

    def describe(self) -> dict[str, object]:
        """What a manifest records of the process."""
        return {"process": self.kind, "rate": self.rate,
                **{name: getattr(self, name) for name in SHAPE_FIELDS}}
