"""Metrics: pure functions from request records to DataFrames and summaries.

Each metric of docs/metrics.md is defined once: per request in ``derive``, per run over
``columns.Columns`` (``summary``, ``isolation``, ``breakdown``, ``workers``), fed by an
in-memory frame or a stored run's ``records.parquet`` (``scan``). Nothing here writes but
``columns.convert``.
"""

from __future__ import annotations

from workbench.metrics.breakdown import (
    BAND_LABELS,
    by_input_band,
    by_round_index,
    cap_from_manifest,
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
    LATENCY_METRICS,
    SLO_METRICS,
    describe,
    prefix_hit_rates,
    server_window_hit_rate,
    slo_attainment,
    summarize,
    summary_of,
    throughput,
)
from workbench.metrics.timeline import (
    in_flight_timeline,
    throughput_timeline,
)

__all__ = [
    "BAND_LABELS",
    "COLUMNS",
    "DERIVED_COLUMNS",
    "LATENCY_METRICS",
    "SLO_METRICS",
    "as_records",
    "by_input_band",
    "by_round_index",
    "cap_from_manifest",
    "describe",
    "in_flight_timeline",
    "per_session",
    "percentiles",
    "prefix_hit_rates",
    "run_rows",
    "server_window_hit_rate",
    "slo_attainment",
    "steady_window",
    "summarize",
    "summary_of",
    "throughput",
    "throughput_timeline",
    "to_frame",
]
