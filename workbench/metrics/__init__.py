"""Metrics: pure functions from request records to DataFrames and summaries.

Each metric of docs/metrics.md is defined once: per request in ``derive``, per run over
``columns.Columns`` (``summary``, ``isolation``, ``breakdown``, ``workers``), fed by an
in-memory frame or a stored run's ``records.parquet`` (``scan``). Nothing here writes but
``columns.convert``.

The names below are imported from their modules on first use: importing one module of
the package (``metrics.slo``, ``metrics.summary``) does not import pandas, which only the
frames need (a virtual run's summary is read from ``records.parquet``; bench/README.md,
"CLI start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.lazy import LazyNames

if TYPE_CHECKING:
    from workbench.metrics.breakdown import (
        by_input_band,
        by_round_index,
        per_session,
        percentiles,
        steady_window,
    )
    from workbench.metrics.frame import (
        COLUMNS,
        DERIVED_COLUMNS,
        as_records,
        run_rows,
        to_frame,
    )
    from workbench.metrics.summary import (
        describe,
        server_window_hit_rate,
        summarize,
        summary_of,
    )
    from workbench.metrics.timeline import (
        in_flight_timeline,
        throughput_timeline,
    )

#: each public name and the module it is imported from on first use
_LAZY = LazyNames(__name__, globals(), (
    ("workbench.metrics.breakdown",
     "by_input_band by_round_index per_session percentiles steady_window"),
    ("workbench.metrics.frame", "COLUMNS DERIVED_COLUMNS as_records run_rows to_frame"),
    ("workbench.metrics.summary", "describe server_window_hit_rate summarize summary_of"),
    ("workbench.metrics.timeline", "in_flight_timeline throughput_timeline"),
))

__all__ = [
    "COLUMNS",
    "DERIVED_COLUMNS",
    "as_records",
    "by_input_band",
    "by_round_index",
    "describe",
    "in_flight_timeline",
    "per_session",
    "percentiles",
    "run_rows",
    "server_window_hit_rate",
    "steady_window",
    "summarize",
    "summary_of",
    "throughput_timeline",
    "to_frame",
]


def __getattr__(name: str) -> Any:
    return _LAZY.get(name)


def __dir__() -> list[str]:
    return _LAZY.dir()
