"""Rescaling trace arrivals to a target rate (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.durations import DAY_MS
from workbench.errors import ConfigError
from workbench.records import MAX_ARRIVAL_MS

# a rescaled arrival span past a trace's own arrival-offset bound (``MAX_ARRIVAL_MS``) is
# refused, so ``--rate 1e-6`` cannot plan units decades apart (docs/config-bounds.md,
# ``arrival.rate``)


def days_past(ms: float, bound_ms: float) -> str:
    """``ms`` (past ``bound_ms``) in days, to as few decimals as show it past the bound:
    ``424``, ``366.2``, ``366.00004`` (whole days said ``366 days, past the 366-day
    bound`` of a span 0.4 days over it)."""
    days, bound = ms / DAY_MS, bound_ms / DAY_MS
    for decimals in range(10):
        text = f"{days:,.{decimals}f}"
        if float(text.replace(",", "")) > bound:
            return text
    return f"{days:,.10f}"


def measured_rate(arrivals_ms: Sequence[float]) -> float:
    """Units per second over the span of start times: ``(n-1) / span_s``."""
    if len(arrivals_ms) < 2:
        return 0.0
    span_s = (max(arrivals_ms) - min(arrivals_ms)) / 1000.0
    return (len(arrivals_ms) - 1) / span_s if span_s > 0 else float("inf")


def rescale_to_rate(arrivals_ms: Sequence[float], rate: float) -> list[float]:
    """Multiply every arrival by ``r / rate`` so the measured rate becomes ``rate`` (units
    that all start together, or a single one, are returned unchanged)."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    r = measured_rate(arrivals_ms)
    if r == 0.0 or r == float("inf"):
        return [float(a) for a in arrivals_ms]
    factor = r / rate
    span = (max(arrivals_ms) - min(arrivals_ms)) * factor
    if span > MAX_ARRIVAL_MS:
        raise ConfigError(
            f"arrival.rate {rate:g}: the {len(arrivals_ms)} units' arrivals would span "
            f"{days_past(span, MAX_ARRIVAL_MS)} days, past the {MAX_ARRIVAL_MS / DAY_MS:g}-day "
            "bound of an arrival offset (docs/config-bounds.md); raise the rate"
        )
    return [a * factor for a in arrivals_ms]
