"""Arrival schedules (pure): the release offset of every unit, in ms from run start."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.arrival.modes import MODES, register_mode
from workbench.arrival.processes import GAP_LAWS, PROCESSES, ArrivalProcess
from workbench.arrival.rate import rescale_to_rate
from workbench.durations import DAY_MS, duration_text
from workbench.records import Unit

#: an arrival span past this (one day) is warned about: a trace-timed replay would wait it out
ARRIVAL_SPAN_WARN_MS = DAY_MS


def release_offsets_ms(units: Sequence[Unit], mode: str, rate: float | None,
                       process: ArrivalProcess | None = None, seed: int = 0) -> list[float]:
    """Every unit's release offset under ``mode`` (a process mode: ``process``, ``seed``)."""
    if MODES.get(mode).process and process is not None:
        return process.offsets_ms(len(units), seed)
    return MODES.get(mode).release(units, rate)


@register_mode("trace-timed", takes_rate=True,
               description="each unit at its trace arrival (rescaled to arrival.rate)")
def trace_timed(units: Sequence[Unit], rate: float | None) -> list[float]:
    """The trace's arrivals rebased to the first unit (rescaled to ``rate``)."""
    if not units:
        return []
    origin = min(u.arrival_ms for u in units)
    offsets = [u.arrival_ms - origin for u in units]
    return rescale_to_rate(offsets, rate) if rate is not None else offsets


def at_once(units: Sequence[Unit], rate: float | None) -> list[float]:
    """Every unit eligible at 0: admission (``max_concurrency``) decides."""
    return [0.0] * len(units)


register_mode("saturated", description="every unit at once, up to max_concurrency")(at_once)
register_mode(
    "closed-loop", closed_loop=True,
    description="max_concurrency units active; a finishing unit admits the next",
)(at_once)


def _process_release(kind: str) -> None:
    def release(units: Sequence[Unit], rate: float | None) -> list[float]:
        """The process at ``rate`` with its defaults (burstiness 1, no ramp), seed 0."""
        return ArrivalProcess(kind, rate).check().offsets_ms(len(units), 0)

    law = GAP_LAWS.get(kind)
    register_mode(kind, takes_rate=True, process=True, description=law.description,
                  params=law.params)(release)


for _kind in PROCESSES:
    _process_release(_kind)


def arrival_span(arrivals_ms: Sequence[float]) -> dict[str, Any]:
    """``arrival_span_ms`` (last arrival - first) and ``arrival_span_warning``."""
    span = float(max(arrivals_ms) - min(arrivals_ms)) if arrivals_ms else 0.0
    return {"arrival_span_ms": span, "arrival_span_warning": span_warning(span)}


#: what to do about a long span, in the flags of the commands that replay (replay,
#: simulate, sweep)
SPAN_REMEDY = ("rescale the arrivals with --rate R (arrival.rate, units/s) or replay "
               "--arrival saturated")


def span_warning(span_ms: float, remedy: str = SPAN_REMEDY) -> str | None:
    """What to do about arrivals spread over more than a day (docs/arrival.md); ``remedy``:
    in the flags of the command that says it (``plan``'s are not ``replay``'s)."""
    if span_ms <= ARRIVAL_SPAN_WARN_MS:
        return None
    return span_sentence(span_words(span_ms), remedy)


def span_sentence(spans: str, remedy: str) -> str:
    """Every command's warning of a span past a day: ``arrivals span SPANS: what that
    means; REMEDY`` (``spans``: ``span_words``, or a sweep's spans with their points)."""
    return f"arrivals span {spans}: the last unit is released that long after the first; {remedy}"


def span_words(span_ms: float) -> str:
    """A span in words and ms: ``1.2 days (100,000,000 ms)`` (``durations``' units, as
    the run's floor states it)."""
    return f"{duration_text(span_ms)} ({span_ms:,.0f} ms)"
