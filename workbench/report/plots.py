"""Figures of a run (or several, overlaid) and of a trace: ``plot(data, kind) -> Figure``.

No pyplot: every figure is a ``ReportFigure`` built directly, so nothing
lingers in a global figure registry, nothing pops up twice in a notebook, and
tests need no backend switch (Agg renders the PNG). A ``ReportFigure`` displays
itself as an embedded PNG in Jupyter and tags the output with its kind, which
``render_report`` uses to name the exported PNG file.

``data`` is a RunResult, a per-request DataFrame, a record list, a run
directory path, or a mapping ``{label: any of those}`` to overlay runs. The
trace kinds take a ``TraceStats`` (or a Workload). Every axis says its unit;
every title says what is compared.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from workbench.records import RunResult

FIGURE_META = "workbench"
LATENCY_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E latency", "itl_ms": "ITL"}
HIT_FRACTION = "hit rate (fraction of prompt tokens)"
BIN_LADDER = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class ReportFigure(Figure):
    """A matplotlib Figure that shows itself as PNG in notebooks (``_repr_mimebundle_``)."""

    def png(self, dpi: int = 100) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        return buf.getvalue()

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        data = {
            "image/png": base64.b64encode(self.png()).decode("ascii"),
            "text/plain": f"<Figure: {self.get_label() or 'workbench'}>",
        }
        return data, {FIGURE_META: {"figure": self.get_label()}}


# -- inputs -------------------------------------------------------------------------------
def _label(src: Any, default: str = "run") -> str:
    if isinstance(src, RunResult):
        return str(src.manifest.get("label") or src.run_id)
    if isinstance(src, pd.DataFrame) and "run_id" in src and len(src):
        return str(src["run_id"].iloc[0])
    return default


def _load(src: Any) -> Any:
    """A run to plot: paths and runs whose records stayed on disk are read back
    (sampled beyond ``scan.MAX_REPORT_RECORDS``, as the report notebook does)."""
    if isinstance(src, RunResult) and src.records_on_disk:
        from workbench.metrics.scan import report_source

        return report_source(src.run_dir or "")
    if isinstance(src, str | PathLike):
        from workbench.report.store import load

        return load(Path(src))
    return src


def as_runs(data: Any) -> dict[str, Any]:
    """``{label: run}``: a mapping is kept (paths loaded), anything else becomes one run."""
    if isinstance(data, Mapping) and "ttft_ms" not in data:
        return {str(k): _load(v) for k, v in data.items()}
    run = _load(data)
    return {_label(run): run}


def _ok_frame(run: Any) -> pd.DataFrame:
    from workbench.metrics import run_rows

    df = run_rows(run)
    return df[df["status"] == "ok"]


def _new(n: int = 1, *, ncols: int | None = None, size: tuple[float, float] = (5.0, 3.6),
         sharex: bool = False) -> tuple[ReportFigure, list[Axes]]:
    ncols = ncols or n
    nrows = math.ceil(n / ncols)
    fig = ReportFigure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex).ravel().tolist()
    return fig, axes[:n]


def _target(ax: Axes | None, n: int, **kw: Any) -> tuple[Figure, list[Axes]]:
    if ax is None:
        return _new(n, **kw)
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    return fig, [ax]


def _no_data(ax: Axes, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _vs(runs: Mapping[str, Any]) -> str:
    names = list(runs)
    return names[0] if len(names) == 1 else " vs ".join(names)


# -- run kinds ----------------------------------------------------------------------------
def _cdf(runs: Mapping[str, Any], ax: Axes | None, metrics: Any = None) -> Figure:
    metrics = list(metrics or ("ttft_ms", "tpot_ms", "e2e_ms"))
    fig, axes = _target(ax, len(metrics) if ax is None else 1, size=(4.0, 3.4))
    for a, metric in zip(axes, metrics, strict=False):
        name = LATENCY_NAMES.get(metric, metric)
        for label, run in runs.items():
            vals = np.sort(_values(_ok_frame(run), metric))
            if vals.size:
                y = np.arange(1, vals.size + 1) / vals.size
                a.step(vals, y, where="post", label=f"{label} (n={vals.size})")
        if not a.lines:
            _no_data(a)
        a.set(xlabel=f"{name} ({metric}, ms)", ylabel="fraction of ok requests ≤ x",
              title=f"{name} CDF", ylim=(0, 1.02))
        a.grid(alpha=0.3)
    if axes[0].lines:
        axes[0].legend(fontsize="small", loc="lower right")
    if ax is None:
        fig.suptitle(f"Latency CDFs of ok requests: {_vs(runs)}")
    return fig


def _values(df: pd.DataFrame, metric: str) -> np.ndarray:
    col = df[metric]
    flat = [g for gaps in col for g in gaps] if metric == "itl_ms" else col.tolist()
    arr = np.asarray(flat, dtype=float)
    return arr[np.isfinite(arr)]


def _prefix_hits(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    from workbench.report.tables import HIT_RATES, as_summary

    fig, (a,) = _target(ax, 1, size=(7.5, 4.0))
    cats = [label for label, _ in HIT_RATES]
    width = 0.8 / len(runs)
    x = np.arange(len(cats))
    for k, (label, run) in enumerate(runs.items()):
        s = as_summary(run)
        vals = [s.get(key) for _, key in HIT_RATES]
        pos = x - 0.4 + width * (k + 0.5)
        bars = a.bar(pos, [v if v is not None else 0.0 for v in vals], width, label=label)
        for bar, v in zip(bars, vals, strict=True):
            text = "n/a" if v is None else f"{v:.3f}"
            a.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize="small", xytext=(0, 2),
                       textcoords="offset points")
    a.set_xticks(x, cats)
    a.set(xlabel="hit rate (token-weighted over the run)", ylabel=HIT_FRACTION, ylim=(0, 1.12),
          title=f"Prefix-cache hits, planned vs actual vs server vs ideal: {_vs(runs)}")
    a.grid(axis="y", alpha=0.3)
    if len(runs) > 1:
        a.legend(fontsize="small")
    return fig


def _per_round(run: Any) -> pd.DataFrame:
    from workbench.metrics import by_round_index

    df = by_round_index(run)
    df = df[~df["group"].isin(["first", "later"])].copy()
    df["round"] = df["group"].astype(int)
    return df.sort_values("round")


def _hit_by_round(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(7.0, 4.0))
    for label, run in runs.items():
        df = _per_round(run)
        line = a.plot(df["round"], df["actual_prefix_hit_rate"], "o-", label=f"{label}: actual")
        a.plot(df["round"], df["planned_prefix_hit_rate"], "s--", color=line[0].get_color(),
               alpha=0.6, label=f"{label}: planned")
    if not a.lines:
        _no_data(a)
    a.set(xlabel="round index within a session (0 = first round)", ylabel=HIT_FRACTION,
          ylim=(-0.02, 1.05), title=f"Prefix hit rate by round, planned vs actual: {_vs(runs)}")
    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.grid(alpha=0.3)
    a.legend(fontsize="small")
    return fig


def _ttft_by_round(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(7.0, 4.0))
    for label, run in runs.items():
        df = _per_round(run)
        line = a.plot(df["round"], df["ttft_ms_p50"], "o-", label=f"{label}: p50")
        a.plot(df["round"], df["ttft_ms_p90"], "^:", color=line[0].get_color(),
               label=f"{label}: p90")
    if not a.lines:
        _no_data(a)
    a.set(xlabel="round index within a session (0 = first round)", ylabel="TTFT (ms)",
          title=f"TTFT p50/p90 by round (later rounds reuse the prefix): {_vs(runs)}")
    a.set_ylim(0, a.get_ylim()[1] * 1.08)
    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.grid(alpha=0.3)
    a.legend(fontsize="small")
    return fig


def _auto_bin(run: Any) -> float:
    from workbench.metrics import summarize

    duration = summarize(run).get("duration_s") or 1.0
    return next((b for b in BIN_LADDER if b >= duration / 40), BIN_LADDER[-1])


def _timeline(runs: Mapping[str, Any], ax: Axes | None, bin_s: float | None = None) -> Figure:
    from workbench.metrics import in_flight_timeline, throughput_timeline

    fig, axes = _target(ax, 3, ncols=1, size=(10.0, 2.6), sharex=True)
    b = bin_s or max(_auto_bin(run) for run in runs.values())
    for label, run in runs.items():
        tp = throughput_timeline(run, b)
        axes[0].step(tp["t_s"], tp["output_tps"], where="post", label=f"{label} ({b:g} s bins)")
        if len(axes) == 1:
            continue
        fl = in_flight_timeline(run)
        axes[1].step(fl["t_s"], fl["in_flight"], where="post", label=f"{label}: in flight")
        _server_panels(axes[1], axes[2], run, label)
    axes[0].set(ylabel="output tokens/s", title="Output token throughput")
    for a in axes:
        a.grid(alpha=0.3)
        if a.lines:
            a.legend(fontsize="small", loc="best", framealpha=0.8)
    axes[-1].set_xlabel("time since the first request (s)")
    if len(axes) == 3:
        axes[1].set(ylabel="requests", title="Requests in flight (client) and at the server")
        axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
        axes[2].set(ylabel="KV cache usage (%)", title="Server KV cache usage")
        fig.suptitle(f"Run timeline: {_vs(runs)}")
    return fig


def _server_panels(queue_ax: Axes, kv_ax: Axes, run: Any, label: str) -> None:
    from workbench.metrics import run_rows
    from workbench.report.tables import server_gauges

    df = run_rows(run)
    sent = df["dispatch_ns"].dropna()
    t0 = int(sent.min()) if len(sent) else None
    g = server_gauges(getattr(run, "metrics_timeline", None) or [], t0)
    # markers show where the scrapes were: between two samples the value is unknown
    for col, style in (("running", "o-"), ("waiting", "x--")):
        if g[col].notna().any():
            queue_ax.step(g["t_s"], g[col], style, where="post", ms=4,
                          label=f"{label}: server {col} ({len(g)} scrapes)")
    if g["kv_usage"].notna().any():
        kv_ax.step(g["t_s"], 100 * g["kv_usage"], "o-", where="post", ms=4,
                   label=f"{label} ({len(g)} scrapes)")
    elif not kv_ax.lines:
        _no_data(kv_ax, "no KV usage samples (server /metrics not scraped)")


# -- trace kinds ---------------------------------------------------------------------------
def as_stats(data: Any) -> Any:
    """A ``TraceStats`` (computed from a Workload or a trace path if needed)."""
    if hasattr(data, "hit_vs_capacity"):
        return data
    from workbench.traces.base import load_trace
    from workbench.traces.stats import trace_stats

    return trace_stats(load_trace(Path(data)) if isinstance(data, str | PathLike) else data)


def _hist(a: Axes, values: pd.Series, label: str) -> None:
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size:
        lo, hi = v.min(), v.max()
        bins = np.geomspace(lo, hi * 1.001, 30) if hi / lo > 50 else np.linspace(lo, hi, 30)
        a.hist(v, bins=bins.tolist(), alpha=0.55, label=f"{label} (n={v.size})")
        if hi / lo > 50:
            a.set_xscale("log")


def _legend_or_empty(a: Axes, empty_text: str) -> None:
    if a.patches:
        a.legend(fontsize="small")
    else:
        _no_data(a, empty_text)


def _lengths(stats: Any, ax: Axes | None) -> Figure:
    fig, axes = _target(ax, 2 if ax is None else 1)
    r = stats.rounds
    _hist(axes[0], r["prompt_len"], "prompt (prefix + input)")
    _hist(axes[0], r["input_len"], "fresh input")
    axes[0].set(xlabel="tokens per round", ylabel="rounds", title="Prompt vs fresh-input length")
    if len(axes) > 1:
        _hist(axes[1], r["output_len"], "output")
        axes[1].set(xlabel="tokens per round", ylabel="rounds", title="Output length")
    for a in axes:
        _legend_or_empty(a, "no data")
    if ax is None:
        fig.suptitle(f"Token lengths per round ({stats.fmt}, policy {stats.policy})")
    return fig


def _tool_waits(stats: Any, ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(7.0, 3.6))
    r = stats.rounds
    waits = r.loc[~r["last_round"] & (r["kind"] == "session"), "tool_wait_after_ms"]
    _hist(a, waits, "tool wait between rounds")
    _legend_or_empty(a, "no tool waits in this trace")
    a.set(xlabel="tool wait after a round (ms)", ylabel="rounds",
          title="Tool-wait distribution (between rounds of a session)")
    return fig


def _sessions_over_time(stats: Any, ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(8.0, 3.6))
    r = stats.rounds
    spans = r.groupby("unit_idx").agg(start=("arrival_ms", "first"), end=("est_start_ms", "max"))
    times = np.unique(np.concatenate([spans["start"], spans["end"]]))
    active = np.searchsorted(np.sort(spans["start"]), times, "right") - np.searchsorted(
        np.sort(spans["end"]), times, "right"
    )
    origin = times.min() if times.size else 0.0
    a.step((times - origin) / 1000, active, where="post", label="units active")
    started = np.searchsorted(np.sort(spans["start"]), times, "right")
    a.step((times - origin) / 1000, started, where="post", ls="--", label="units started")
    a.set(xlabel="trace time since the first arrival (s)", ylabel="units (sessions)",
          title="Sessions over time (arrival → start of last round; service time ignored)")
    a.grid(alpha=0.3)
    a.legend(fontsize="small")
    return fig


def _hit_vs_capacity(stats: Any, ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(7.0, 4.0))
    c = stats.hit_vs_capacity
    c = c[c["capacity_tokens"] > 0]
    a.plot(c["capacity_tokens"], c["hit_rate"], "o-", label="LRU cache")
    s = stats.summary
    a.axhline(s["ideal_prefix_hit_rate"], color="C2", ls="--", label="ideal (infinite cache)")
    a.axhline(s["planned_prefix_hit_rate"], color="C1", ls=":", label="planned prefix")
    a.set_xscale("log")
    a.set(xlabel=f"cache capacity (tokens; block = {stats.block_size} tokens)",
          ylabel=HIT_FRACTION, ylim=(0, 1.05),
          title="Ideal prefix hit rate vs LRU cache capacity")
    a.grid(alpha=0.3, which="both")
    a.legend(fontsize="small")
    return fig


KindFn = Callable[..., Figure]
RUN_KINDS: dict[str, KindFn] = {
    "cdf": _cdf,
    "prefix_hits": _prefix_hits,
    "hit_by_round": _hit_by_round,
    "ttft_by_round": _ttft_by_round,
    "timeline": _timeline,
}
TRACE_KINDS: dict[str, KindFn] = {
    "lengths": _lengths,
    "tool_waits": _tool_waits,
    "sessions_over_time": _sessions_over_time,
    "hit_vs_capacity": _hit_vs_capacity,
}
KINDS = (*RUN_KINDS, *TRACE_KINDS)


def plot(data: Any, kind: str, ax: Axes | None = None, **options: Any) -> Figure:
    """Draw ``kind`` for ``data`` and return the Figure (into ``ax`` when given).

    Run kinds: ``cdf`` (TTFT/TPOT/E2E; ``metrics=[...]``), ``prefix_hits``,
    ``hit_by_round``, ``ttft_by_round``, ``timeline`` (``bin_s=``). Trace kinds:
    ``lengths``, ``tool_waits``, ``sessions_over_time``, ``hit_vs_capacity``.
    """
    if kind in RUN_KINDS:
        fig = RUN_KINDS[kind](as_runs(data), ax, **options)
    elif kind in TRACE_KINDS:
        fig = TRACE_KINDS[kind](as_stats(data), ax, **options)
    else:
        raise ValueError(f"unknown plot kind {kind!r}; valid: {', '.join(KINDS)}")
    if ax is None:
        fig.set_label(kind)
    return fig
