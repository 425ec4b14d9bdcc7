"""Report tables: DataFrame in, DataFrame out, plus ``show`` to display and export them.

Every builder returns a plain numeric DataFrame (full precision, metric names
of SPEC §5 verbatim) with ``attrs["name"]`` set. ``show`` wraps one for a
notebook: it renders as an HTML table with a fixed number of decimals (3 by
default, so a reader and a test see ``12.346`` for a p50 of 12.3456 ms), and it
carries the raw numbers in a private MIME type that ``render_report`` writes
out as CSV and JSON next to the HTML report.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

TABLE_MIME = "application/vnd.workbench.table+json"
LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
LATENCY_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99", "count")
HIT_RATES: tuple[tuple[str, str], ...] = (
    ("planned", "planned_prefix_hit_rate"),
    ("actual (client)", "actual_prefix_hit_rate"),
    ("server window", "server_prefix_hit_rate"),
    ("ideal (infinite cache)", "ideal_prefix_hit_rate"),
)
COUNT_KEYS = frozenset(("requests", "ok", "errors", "skipped"))
RUN_FIELDS: tuple[tuple[str, str], ...] = (
    ("requests", "requests"),
    ("ok", "ok"),
    ("errors", "errors"),
    ("skipped", "skipped"),
    ("duration (s)", "duration_s"),
    ("requests/s", "request_throughput_rps"),
    ("output tokens/s", "output_token_throughput_tps"),
    ("total tokens/s", "total_token_throughput_tps"),
)


def as_summary(data: Any) -> Mapping[str, Any]:
    """A ``summarize`` dict: passed through if it already is one, else computed."""
    if isinstance(data, Mapping) and "ttft_ms" in data:
        return data
    from workbench.metrics import summarize

    return summarize(data)


def _named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    df.attrs["name"] = name
    return df


def summary_table(data: Any) -> pd.DataFrame:
    """Latency percentiles in ms: one row per metric (ttft_ms, tpot_ms, itl_ms, e2e_ms)."""
    s = as_summary(data)
    rows = {m: {k: _float(s.get(m, {}).get(k)) for k in LATENCY_STATS} for m in LATENCY_METRICS}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(LATENCY_STATS))
    df["count"] = df["count"].fillna(0).astype(int)
    df.index.name = "metric (ms)"
    return _named(df, "latency")


def prefix_table(data: Any) -> pd.DataFrame:
    """Prefix-cache hit rates (fraction of prompt tokens, 0–1): planned, actual, server, ideal."""
    s = as_summary(data)
    rows = {label: {"key": key, "hit rate": _float(s.get(key))} for label, key in HIT_RATES}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=["key", "hit rate"])
    df.index.name = "prefix hit rate"
    return _named(df, "prefix_hits")


#: what the report says of a run by its manifest status (anything but "completed" is
#: incomplete: "running" in a stored run means its process was killed mid-run)
RUN_STATUS_NOTES: dict[str, str] = {
    "completed": "completed",
    "cancelled": "INCOMPLETE: cancelled (stopped before the plan finished)",
    "running": "INCOMPLETE: the run was killed (its manifest still says 'running')",
    "failed": "INCOMPLETE: the run failed before the plan finished",
}


def run_status_note(status: Any) -> str | None:
    """The report's line for a manifest status (None when there is no manifest status)."""
    if status is None:
        return None
    return RUN_STATUS_NOTES.get(str(status), f"INCOMPLETE: status {status!r}")


def run_table(data: Any) -> pd.DataFrame:
    """Counts and throughput of the run (success numerators over the all-attempts window);
    first, when the summary knows it, the run's status (incomplete runs say so)."""
    s = as_summary(data)
    values: list[Any] = [_count(s.get(key)) if key in COUNT_KEYS else _float(s.get(key))
                         for _, key in RUN_FIELDS]
    labels = [label for label, _ in RUN_FIELDS]
    note = run_status_note(s.get("run_status"))
    if note is not None:
        values, labels = [note, *values], ["status", *labels]
    df = pd.DataFrame({"value": pd.Series(values, dtype=object)})
    df.index = pd.Index(labels)
    df.index.name = "run"
    return _named(df, "run")


def round_table(data: Any) -> pd.DataFrame:
    """Per round index: requests, TTFT p50/p90 (ms), planned vs actual hit rate.

    ``data`` is a run, or an already computed ``by_round_index`` frame (e.g. from
    ``workbench.metrics.scan`` for a run too large to load).
    """
    from workbench.metrics import by_round_index

    is_table = isinstance(data, pd.DataFrame) and "group" in data.columns
    full = data if is_table else by_round_index(data)
    cols = [
        "group", "requests", "ok", "ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50",
        "planned_prefix_hit_rate", "actual_prefix_hit_rate",
    ]
    df = full[cols].set_index("group")
    df.index.name = "round"
    return _named(df, "by_round")


CLIENT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("requested concurrency", ("requested_concurrency",)),
    ("in flight, mean", ("in_flight", "mean")),
    ("in flight, peak", ("in_flight", "peak")),
    ("release lag p50 (ms)", ("release_lag_ms", "p50")),
    ("release lag p99 (ms)", ("release_lag_ms", "p99")),
    ("release lag max (ms)", ("release_lag_ms", "max")),
    ("steady release lag p99 (ms)", ("steady_release_lag_ms", "p99")),
    ("client CPU (s)", ("cpu_s",)),
    ("client CPU, share of one core", ("cpu_util",)),
    ("client processes", ("processes",)),
    ("turns that waited (pacing)", ("paced_turns",)),
)


CLIENT_COUNTS = frozenset(
    ("requested concurrency", "in flight, peak", "client processes", "turns that waited (pacing)")
)


def client_table(data: Any) -> pd.DataFrame:
    """The client's self-measurement (``summary["client"]``): in flight vs requested,
    release lag (all requests, and *steady*: after the run first held its cap), CPU.
    Empty for a run without one (``simulate``)."""
    s = as_summary(data)
    client = s.get("client") or {}
    values: list[Any] = []
    for label, path in CLIENT_FIELDS:
        v: Any = client
        for key in path:
            v = v.get(key) if isinstance(v, Mapping) else None
        values.append(int(v) if label in CLIENT_COUNTS and v is not None else _float(v))
    labels = pd.Index([k for k, _ in CLIENT_FIELDS])
    df = pd.DataFrame({"value": pd.Series(values, index=labels, dtype=object)})
    if not client:
        df = df.iloc[0:0]
    df.index.name = "client"
    return _named(df, "client")


def client_caption(data: Any) -> str:
    """Caption of ``client_table``, with the warning when the client limited the run."""
    client = as_summary(data).get("client") or {}
    if not client:
        return "No client self-measurement (a virtual-time run)"
    if client.get("client_bottleneck"):
        why = "; ".join(client.get("client_bottleneck_reasons") or [])
        return (
            "Client self-measurement. WARNING: the client, not the server, was the "
            f"bottleneck of this run ({why}): its latencies include the client's own "
            "queueing; use more executor.workers or a lower max_concurrency"
        )
    return "Client self-measurement (the client kept up: not the bottleneck)"


def mapping_table(d: Mapping[str, Any], name: str, *, key: str = "name") -> pd.DataFrame:
    """A two-column view of a flat mapping (e.g. ``trace_stats(...).summary``)."""
    df = pd.DataFrame({"value": pd.Series(list(d.values()), dtype=object)})
    df.index = pd.Index([str(k) for k in d], name=key)
    return _named(df, name)


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not math.isnan(v) else 0


def _float(v: Any) -> float:
    if v is None or isinstance(v, Mapping):
        return math.nan
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


# -- gauges from the server's /metrics samples ---------------------------------------------
GAUGES: dict[str, tuple[str, ...]] = {
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}
_TIME_KEYS = ("t_ns", "time_ns", "ts_ns")


def _gauge(sample: Mapping[str, Any], names: Sequence[str]) -> float:
    """A gauge in one sample (wide ``{name: v}``, labelled ``name{..}`` keys summed,
    or nested under ``"metrics"``); NaN when the sample lacks it."""
    src = sample["metrics"] if isinstance(sample.get("metrics"), Mapping) else sample
    for name in names:
        vals = [float(v) for k, v in src.items() if k == name or k.startswith(name + "{")]
        if vals:
            return sum(vals)
    return math.nan


def server_gauges(timeline: Sequence[Mapping[str, Any]], t0_ns: int | None) -> pd.DataFrame:
    """Columns ``t_s`` (seconds since ``t0_ns``), ``waiting``, ``running``, ``kv_usage`` (0–1)."""
    rows = []
    for sample in timeline:
        t = next((sample[k] for k in _TIME_KEYS if k in sample), None)
        if t is None:
            continue
        row = {"t_s": (int(t) - (t0_ns or 0)) / 1e9}
        row.update({g: _gauge(sample, names) for g, names in GAUGES.items()})
        rows.append(row)
    return pd.DataFrame(rows, columns=["t_s", *GAUGES])


# -- display --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Table:
    """A DataFrame shown with fixed decimals; ``render_report`` exports ``frame`` as CSV/JSON."""

    frame: pd.DataFrame
    name: str
    digits: int = 3
    caption: str | None = None

    def cell(self, v: Any) -> str:
        """Floats with ``digits`` decimals, integers as they are, missing as a dash."""
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if isinstance(v, bool | np.bool_):
            return str(bool(v))
        if isinstance(v, int | np.integer):
            return str(int(v))
        if isinstance(v, float | np.floating):
            return f"{float(v):.{self.digits}f}"
        return str(v)

    def html(self) -> str:
        """Every cell, label and the caption HTML-escaped: they can hold trace ids, run ids,
        server text (a run id ``<img onerror=...>`` must stay text)."""
        styler = self.frame.style.format(lambda v: html.escape(self.cell(v)))
        styler = styler.format_index(escape="html", axis=0).format_index(escape="html", axis=1)
        if isinstance(self.frame.index, pd.RangeIndex):
            styler = styler.hide(axis="index")
        else:  # the index name would take a header row of its own
            styler = styler.hide(axis="index", names=True)
        if self.caption:
            styler = styler.set_caption(html.escape(self.caption))
        styler = styler.set_table_attributes('class="wb-table"')
        return styler.to_html()

    def payload(self) -> dict[str, Any]:
        """JSON-safe (NaN → null) split orientation, with the index name kept."""
        data = json.loads(self.frame.to_json(orient="split", double_precision=15))
        return {"name": self.name, "index_name": self.frame.index.name, **data}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/html": self.html(),
            "text/plain": self.frame.to_string(),
            TABLE_MIME: self.payload(),
        }


def show(df: pd.DataFrame, name: str | None = None, *, digits: int = 3,
         caption: str | None = None) -> Table:
    """Wrap ``df`` for display (``name`` defaults to ``df.attrs["name"]``)."""
    return Table(df, name or str(df.attrs.get("name", "table")), digits, caption)


def frame_from_payload(payload: Mapping[str, Any]) -> pd.DataFrame:
    """Inverse of ``Table.payload`` (what ``render_report`` turns into CSV)."""
    df = pd.DataFrame(payload["data"], index=payload["index"], columns=payload["columns"])
    df.index.name = payload.get("index_name")
    return df
