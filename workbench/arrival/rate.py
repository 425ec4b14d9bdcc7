"""Rescaling trace arrivals to a target rate (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def measured_rate(arrivals_ms: Sequence[float]) -> float:
    """Units per second over the span of start times: ``(n-1) / span_s``."""
    if len(arrivals_ms) < 2:
        return 0.0
    span_s = (max(arrivals_ms) - min(arrivals_ms)) / 1000.0
    return (len(arrivals_ms) - 1) / span_s if span_s > 0 else float("inf")


def rescale_to_rate(arrivals_ms: Sequence[float], rate: float) -> list[float]:
    """Multiply every arrival by ``r / rate`` so the measured rate becomes ``rate``.

    A trace whose units all start together (or a single unit) has no rate to
    rescale and is returned unchanged.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    r = measured_rate(arrivals_ms)
    if r == 0.0 or r == float("inf"):
        return [float(a) for a in arrivals_ms]
    factor = r / rate
    return [a * factor for a in arrivals_ms]
