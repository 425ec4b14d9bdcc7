"""Arrival processes (pure): start times drawn for units, replacing a trace's timeline.

``poisson``, ``gamma`` (with a burstiness factor) and ``constant`` draw the gap
before each unit from the rate in force at that unit; a ramp-up makes that rate
move from ``ramp_up_start_rps`` to ``ramp_up_end_rps`` over the units, linearly
or exponentially. The definitions are vLLM's ``vllm bench serve`` ones
(``--request-rate``, ``--burstiness``, ``--ramp-up-strategy``), stated with
their formulas in docs/arrival.md ("Arrival processes"):

- unit ``i`` of ``n`` has progress ``p_i = i / max(n - 1, 1)`` and rate
  ``λ_i = λ`` (no ramp), ``λ_s + (λ_e - λ_s)·p_i`` (linear) or
  ``λ_s·(λ_e/λ_s)^p_i`` (exponential);
- the gap before unit ``i ≥ 1`` is ``Gamma(shape=b, scale=1/(λ_i·b))``: mean
  ``1/λ_i``, coefficient of variation ``1/√b``; ``b = 1`` (``poisson``) is the
  exponential gap, ``constant`` the gap ``1/λ_i`` exactly;
- the first unit starts at 0 (vLLM also waits a gap before its first request
  and, without a ramp, rescales the sum of gaps to ``n/λ``; workbench does
  neither, so a unit's start is a plain sum of independent gaps).

One ``numpy.random.default_rng(seed)`` draws the gaps, so a seed gives the same
timeline every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workbench.errors import ConfigError

PROCESSES = ("poisson", "gamma", "constant")
RAMP_STRATEGIES = ("linear", "exponential")
DOC = "docs/arrival.md, 'Arrival processes'"


@dataclass(frozen=True)
class ArrivalProcess:
    """A process (``kind``) at ``rate`` units/s, or ramping from ``ramp_up_start_rps`` to
    ``ramp_up_end_rps`` (``ramp_up_strategy``); ``burstiness`` is gamma's shape."""

    kind: str = "poisson"
    rate: float | None = None
    burstiness: float = 1.0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None

    def check(self, where: str = "arrival") -> ArrivalProcess:
        """Every rule of the definition; the message names ``where``'s field."""
        if self.kind not in PROCESSES:
            raise ConfigError(f"{where}.mode {self.kind!r}: not an arrival process "
                              f"({', '.join(PROCESSES)})")
        b = self.burstiness
        if not (isinstance(b, int | float) and math.isfinite(b) and b > 0):
            raise ConfigError(f"{where}.burstiness must be a finite number > 0, got {b!r}")
        if b != 1.0 and self.kind != "gamma":
            raise ConfigError(f"{where}.burstiness {b:g} shapes gamma gaps: use mode 'gamma' "
                              f"(mode {self.kind!r} is burstiness 1 or none; {DOC})")
        if self.ramp_up_strategy is None:
            if self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None:
                raise ConfigError(f"{where}.ramp_up_start_rps/ramp_up_end_rps need "
                                  f"{where}.ramp_up_strategy (linear or exponential)")
            if self.rate is None:
                raise ConfigError(f"{where}.mode {self.kind!r} draws arrivals at a rate: give "
                                  f"{where}.rate (units/s), or a ramp-up ({DOC})")
            _positive(f"{where}.rate", self.rate)
            return self
        if self.ramp_up_strategy not in RAMP_STRATEGIES:
            raise ConfigError(f"{where}.ramp_up_strategy {self.ramp_up_strategy!r}: "
                              f"one of {', '.join(RAMP_STRATEGIES)}")
        if self.rate is not None:
            raise ConfigError(f"{where}.rate and a ramp-up both set the rate: drop rate "
                              "(the ramp goes from ramp_up_start_rps to ramp_up_end_rps)")
        lo, hi = self.ramp_up_start_rps, self.ramp_up_end_rps
        if lo is None or hi is None:
            raise ConfigError(f"{where}.ramp_up_strategy needs both ramp_up_start_rps and "
                              "ramp_up_end_rps")
        _positive(f"{where}.ramp_up_end_rps", hi)
        if not (math.isfinite(lo) and 0 <= lo <= hi):
            raise ConfigError(f"{where}.ramp_up_start_rps must be in [0, ramp_up_end_rps], "
                              f"got {lo!r}")
        if self.ramp_up_strategy == "exponential" and lo == 0:
            raise ConfigError(f"{where}.ramp_up_start_rps: an exponential ramp cannot start "
                              "at 0 units/s")
        return self

    def rates(self, n: int) -> np.ndarray:
        """``λ_i`` for ``i = 0..n-1`` (units/s)."""
        if self.ramp_up_strategy is None:
            return np.full(n, float(self.rate or 0.0))
        lo, hi = float(self.ramp_up_start_rps or 0.0), float(self.ramp_up_end_rps or 0.0)
        progress = np.arange(n, dtype=float) / max(n - 1, 1)
        if self.ramp_up_strategy == "linear":
            return lo + (hi - lo) * progress
        return np.asarray(lo * (hi / lo) ** progress)

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The ``n - 1`` gaps (s) before units ``1..n-1``."""
        rates = self.rates(n)[1:]
        if rates.size and not (rates > 0).all():  # a linear ramp from 0: unit 0 alone at 0
            raise ConfigError("a ramp's rate is 0 at a unit after the first; start above 0")
        if self.kind == "constant":
            return 1.0 / rates
        b = self.burstiness if self.kind == "gamma" else 1.0
        return rng.gamma(shape=b, scale=1.0 / (rates * b))

    def offsets_ms(self, n: int, seed: int) -> list[float]:
        """Start offsets (ms from 0) of ``n`` units; the first is 0."""
        if n <= 0:
            return []
        gaps = self.gaps_s(n, np.random.default_rng(seed))
        return np.concatenate(([0.0], np.cumsum(gaps) * 1000.0)).tolist()

    def describe(self) -> dict[str, object]:
        """What a manifest records of the process."""
        return {"process": self.kind, "rate": self.rate, "burstiness": self.burstiness,
                "ramp_up_strategy": self.ramp_up_strategy,
                "ramp_up_start_rps": self.ramp_up_start_rps,
                "ramp_up_end_rps": self.ramp_up_end_rps}


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
