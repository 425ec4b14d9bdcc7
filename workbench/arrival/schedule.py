"""Arrival schedules (pure): the release offset of every unit, in ms from run start."""

from __future__ import annotations

from workbench.arrival.rate import rescale_to_rate
from workbench.records import Unit


def release_offsets_ms(units: tuple[Unit, ...], mode: str, rate: float | None) -> list[float]:
    """``trace-timed``: the trace's arrivals rebased to the first unit (rescaled to ``rate``);
    ``saturated`` and ``closed-loop``: every unit eligible at 0 (admission decides)."""
    if mode != "trace-timed" or not units:
        return [0.0] * len(units)
    origin = min(u.arrival_ms for u in units)
    offsets = [u.arrival_ms - origin for u in units]
    return rescale_to_rate(offsets, rate) if rate is not None else offsets
