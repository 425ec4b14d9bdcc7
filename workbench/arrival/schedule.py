"""Arrival schedules (pure): the release offset of every unit, in ms from run start."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.arrival.rate import rescale_to_rate
from workbench.records import Unit

#: an arrival span past this (one day) is warned about: a trace-timed replay would wait it out
ARRIVAL_SPAN_WARN_MS = 86_400_000.0


def release_offsets_ms(units: tuple[Unit, ...], mode: str, rate: float | None) -> list[float]:
    """``trace-timed``: the trace's arrivals rebased to the first unit (rescaled to ``rate``);
    ``saturated`` and ``closed-loop``: every unit eligible at 0 (admission decides)."""
    if mode != "trace-timed" or not units:
        return [0.0] * len(units)
    origin = min(u.arrival_ms for u in units)
    offsets = [u.arrival_ms - origin for u in units]
    return rescale_to_rate(offsets, rate) if rate is not None else offsets


def arrival_span(arrivals_ms: Sequence[float]) -> dict[str, Any]:
    """``arrival_span_ms`` (last arrival - first) and ``arrival_span_warning`` (None unless
    the span exceeds a day)."""
    span = float(max(arrivals_ms) - min(arrivals_ms)) if arrivals_ms else 0.0
    return {"arrival_span_ms": span, "arrival_span_warning": span_warning(span)}


def span_warning(span_ms: float) -> str | None:
    """What to do about arrivals spread over more than a day (docs/arrival.md)."""
    if span_ms <= ARRIVAL_SPAN_WARN_MS:
        return None
    return (
        f"arrivals span {span_ms / ARRIVAL_SPAN_WARN_MS:,.1f} days ({span_ms:,.0f} ms): "
        "trace-timed, the last unit starts that long after the first; rescale the "
        "arrivals with --rate R (arrival.rate, units/s) or replay --arrival saturated"
    )
