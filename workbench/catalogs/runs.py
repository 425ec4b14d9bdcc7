"""The run-level figures of ``summary.json``: one ``RunFigure`` row each (its key, its
report label and table, whether a sweep point keeps it). Adding one is its computation
(``metrics.summary`` or ``metrics.server_side``) plus one row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Section = Literal["run", "hit", "server"]


@dataclass(frozen=True)
class RunFigure:
    name: str
    label: str
    section: Section | None = None
    swept: bool = False


FIGURES: tuple[RunFigure, ...] = (
    RunFigure("requests", "requests", "run", swept=True),
    RunFigure("ok", "ok", "run", swept=True),
    RunFigure("errors", "errors", "run", swept=True),
    RunFigure("skipped", "skipped", "run"),
    RunFigure("cancelled", "cancelled", swept=True),
    RunFigure("duration_s", "duration (s)", "run", swept=True),
    RunFigure("request_throughput_rps", "requests/s", "run", swept=True),
    RunFigure("output_token_throughput_tps", "output tokens/s", "run", swept=True),
    RunFigure("total_token_throughput_tps", "total tokens/s", "run", swept=True),
    RunFigure("planned_prefix_hit_rate", "planned", "hit", swept=True),
    RunFigure("actual_prefix_hit_rate", "actual (client)", "hit", swept=True),
    RunFigure("server_prefix_hit_rate", "server window", "hit", swept=True),
    RunFigure("ideal_prefix_hit_rate", "ideal (infinite cache)", "hit"),
    # summary["server"] (metrics.server_side); a sweep point takes its preemptions from
    # the timeline itself (sweeps.points)
    RunFigure("engine", "engine (metric names)", "server"),
    RunFigure("preemptions", "preemptions", "server"),
    RunFigure("peak_kv_cache_usage", "peak KV-cache usage (0-1)", "server"),
    RunFigure("peak_running_requests", "peak running requests", "server"),
    RunFigure("peak_waiting_requests", "peak waiting requests", "server"),
    RunFigure("samples", "/metrics samples", "server"),
    RunFigure("scrape_errors", "failed scrapes", "server"),
)
#: what a sweep point keeps of its runs' summaries, in table order
SWEPT: tuple[str, ...] = tuple(f.name for f in FIGURES if f.swept)


def fields(section: Section) -> tuple[tuple[str, str], ...]:
    """``(label, key)`` of a report table's rows, in table order."""
    return tuple((f.label, f.name) for f in FIGURES if f.section == section)
