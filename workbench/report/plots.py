"""Figures of a run (or several, overlaid) and of a trace: ``plot(data, kind) -> Figure``.

Every figure is a ``ReportFigure`` built without pyplot; what ``data`` may be:
docs/reports.md, "Figures"."""

from __future__ import annotations

import base64
import io
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

import workbench.catalogs.requests as catalog
from workbench.metrics import (
    by_round_index,
    in_flight_timeline,
    run_rows,
    summarize,
    throughput_timeline,
)
from workbench.metrics.distribution import sample
from workbench.metrics.frame import ok_rows
from workbench.metrics.scan import report_source
from workbench.records import RunResult, manifest_of
from workbench.report.headline import engine_note
from workbench.report.tables import HIT_RATES, as_summary, series_title, server_gauges
from workbench.storage.rundir import LIFECYCLE, load, read_jsonl

FIGURE_META = "workbench"
#: a metric's axis and title name (the catalog's ``title``)
LATENCY_NAMES = {m.name: m.title for m in catalog.CATALOG}
HIT_FRACTION = "hit rate (fraction of prompt tokens)"
LEGEND_WIDTH = 26  # characters per legend line (beside the axes, so it stays narrow)
BIN_LADDER = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
SERIES_PANELS_MAX = 6  # further /metrics series drawn in the timeline (the first ones, by name)


class ReportFigure(Figure):
    """A Figure that shows itself as PNG in notebooks, tagged with its kind and alt text."""

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
        return data, {FIGURE_META: {"figure": self.get_label(), "alt": self.alt_text()}}

    def alt_text(self) -> str:
        """The figure's title and, per panel, its title and axes (the HTML's alt text)."""
        sup = self.get_suptitle() if hasattr(self, "get_suptitle") else ""
        parts = [sup] if sup else []
        for a in self.axes:
            bits = [a.get_title(), f"x: {a.get_xlabel()}" if a.get_xlabel() else "",
                    f"y: {a.get_ylabel()}" if a.get_ylabel() else ""]
            empty = [t.get_text() for t in a.texts if t.get_text() and not a.lines
                     and not a.patches and not a.collections]
            parts.append(", ".join(b for b in (*bits, *empty) if b))
        return ". ".join(p for p in parts if p) or f"figure {self.get_label()}"


# -- inputs -------------------------------------------------------------------------------
def _label(src: Any, default: str = "run") -> str:
    if isinstance(src, RunResult):
        return str(src.manifest.label or src.run_id)
    if isinstance(src, pd.DataFrame) and "run_id" in src and len(src):
        return str(src["run_id"].iloc[0])
    return default


def _load(src: Any) -> Any:
    """A run to plot: paths and runs with records on disk read back (``report_source``)."""
    if isinstance(src, RunResult) and src.records_on_disk:
        return report_source(src.run_dir or "")
    if isinstance(src, str | PathLike):
        return load(Path(src))
    return src


def as_runs(data: Any) -> dict[str, Any]:
    """``{label: run}``: a mapping is kept (paths loaded), anything else becomes one run."""
    if isinstance(data, Mapping) and "ttft_ms" not in data:
        return {str(k): _load(v) for k, v in data.items()}
    run = _load(data)
    return {_label(run): run}


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


def _legend(a: Axes, **kw: Any) -> None:
    """A legend beside the axes, never over the data (constrained layout makes room)."""
    handles, labels = a.get_legend_handles_labels()
    if not handles:
        return
    labels = [textwrap.fill(t, LEGEND_WIDTH) for t in labels]  # long run ids wrap
    a.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
             borderaxespad=0.0, framealpha=0.9, **kw)


def _ticks(a: Axes, axis: str = "x", nbins: int = 5) -> None:
    """At most ``nbins`` ticks with compact labels (12k, 1.5M): long axes never overlap."""
    target = a.xaxis if axis == "x" else a.yaxis
    if (a.get_xscale() if axis == "x" else a.get_yscale()) == "linear":
        target.set_major_locator(MaxNLocator(nbins=nbins))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: _compact(v)))


def _compact(v: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def _y_from_zero(a: Axes, at_least: float = 1.0) -> None:
    """y from 0 up to the data, at least to ``at_least`` (an all-zero series gets 0..1)."""
    hi = a.dataLim.y1 if a.has_data() and math.isfinite(a.dataLim.y1) else 0.0
    a.set_ylim(0.0, max(hi * 1.08, at_least))


def _vs(runs: Mapping[str, Any]) -> str:
    """The runs a title compares, with their ``headline.engine_note`` (once when shared)."""
    notes = {label: engine_note(manifest_of(run)) for label, run in runs.items()}
    if len(set(notes.values())) == 1:
        note = next(iter(notes.values()), None)
        return " vs ".join(notes) + (f" · {note}" if note else "")
    return " vs ".join(f"{label} ({note})" if note else label for label, note in notes.items())


def _name(runs: Mapping[str, Any], label: str) -> str:
    """A legend entry's run prefix: none for one run (the title names it)."""
    return "" if len(runs) == 1 else f"{label}: "


def _color(k: int) -> str:
    return f"C{k % 10}"


# -- run kinds ----------------------------------------------------------------------------
def _cdf(runs: Mapping[str, Any], ax: Axes | None, metrics: Any = None) -> Figure:
    metrics = list(metrics or catalog.SCALAR_LATENCY)
    fig, axes = _target(ax, len(metrics) if ax is None else 1, size=(4.0, 3.4))
    for a, metric in zip(axes, metrics, strict=False):
        name = LATENCY_NAMES.get(metric, metric)
        for k, (label, run) in enumerate(runs.items()):
            vals = np.sort(sample(ok_rows(run), metric))
            if vals.size:
                y = np.arange(1, vals.size + 1) / vals.size
                a.step(vals, y, where="post", color=_color(k),
                       label=f"{label} (n={vals.size})")
        if not a.lines:
            _no_data(a)
        a.set(xlabel=f"{name} ({metric}, ms)", ylabel="fraction of ok requests ≤ x",
              title=f"{name} CDF", ylim=(0, 1.02))
        _ticks(a, "x", nbins=4)
        a.grid(alpha=0.3)
    if axes[0].lines and ax is None:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
                   fontsize="small")
    elif axes[0].lines:
        axes[0].legend(fontsize="small", loc="lower right")
    if ax is None:
        fig.suptitle(f"Latency CDFs of ok requests: {_vs(runs)}")
    return fig


def _prefix_hits(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    fig, (a,) = _target(ax, 1, size=(7.5, 4.0))
    # two-line tick labels: four categories side by side never overlap
    cats = [label.replace(" (", "\n(").replace("server window", "server\nwindow")
            for label, _ in HIT_RATES]
    width = 0.8 / max(len(runs), 1)
    x = np.arange(len(cats))
    for k, (label, run) in enumerate(runs.items()):
        s = as_summary(run)
        vals = [s.get(key) for _, key in HIT_RATES]
        pos = x - 0.4 + width * (k + 0.5)
        bars = a.bar(pos, [v if v is not None else 0.0 for v in vals], width, label=label,
                     color=_color(k))
        for bar, v in zip(bars, vals, strict=True):
            text = "n/a" if v is None else f"{v:.3f}"
            a.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize="small", xytext=(0, 2),
                       textcoords="offset points")
    a.set_xticks(x, cats)
    a.set(xlabel="hit rate (token-weighted over the run)", ylabel=HIT_FRACTION, ylim=(0, 1.12),
          title=f"Prefix-cache hits: {_vs(runs)}")
    a.grid(axis="y", alpha=0.3)
    if len(runs) > 1:
        _legend(a)
    return fig


def _per_round(run: Any) -> pd.DataFrame:
    df = by_round_index(run)
    df = df[~df["group"].isin(["first", "later"])].copy()
    df["round"] = df["group"].astype(int)
    return df.sort_values("round")


ONE_ROUND = "every unit is one request (no later rounds): nothing to compare by round"


def _round_axes(a: Axes, frames: list[pd.DataFrame]) -> bool:
    """x over the rounds that exist; False (and a note) when no run has a round > 0."""
    top = max((int(df["round"].max()) for df in frames if len(df)), default=0)
    if top == 0:
        for line in list(a.lines):
            line.remove()
        _no_data(a, ONE_ROUND)
        a.set_xlim(-0.5, 0.5)
        return False
    a.set_xlim(-0.5, top + 0.5)
    return True


#: a by-round line: the per-round column, its marker and style, the legend's word, alpha
RoundLine = tuple[str, str, str, float | None]


def _by_round(runs: Mapping[str, Any], ax: Axes | None, lines: Sequence[RoundLine],
              ylabel: str, title: str, *, hit: bool) -> Figure:
    """One line per run and ``lines`` entry over a session's rounds (hit rates on [0, 1])."""
    fig, (a,) = _target(ax, 1, size=(7.0, 4.0))
    frames = []
    for k, (label, run) in enumerate(runs.items()):
        df = _per_round(run)
        frames.append(df)
        for column, style, word, alpha in lines:
            a.plot(df["round"], df[column], style, color=_color(k), alpha=alpha,
                   label=f"{_name(runs, label)}{word}")
    if not a.lines:
        _no_data(a)
    elif _round_axes(a, frames):
        _legend(a)
        if not hit:
            _y_from_zero(a)
    a.set(xlabel="round index within a session (0 = first round)", ylabel=ylabel,
          title=f"{title}: {_vs(runs)}", **({"ylim": (-0.02, 1.05)} if hit else {}))
    a.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=8))
    a.grid(alpha=0.3)
    return fig


def _auto_bin(run: Any) -> float:
    duration = summarize(run).get("duration_s") or 1.0
    gaps, _ = _idle_gaps({"run": run})
    if gaps:  # bins sized to the time that is drawn, not to the idle gaps skipped
        duration = max(1.0, duration - sum(b - a for a, b in gaps))
    return next((b for b in BIN_LADDER if b >= duration / 40), BIN_LADDER[-1])


#: an idle stretch (no request in flight in any run) is skipped on time axes when it is
#: longer than this share of the drawn span, and than ``GAP_MIN_S``
GAP_MIN_SHARE = 0.1
GAP_MIN_S = 60.0
#: a skipped gap is drawn this wide, as a share of the time that is drawn
GAP_WIDTH_SHARE = 0.04


def _idle_gaps(runs: Mapping[str, Any]) -> tuple[list[tuple[float, float]], float]:
    """The idle stretches (s since each run's first request) a time axis skips, and the
    end of the last request (docs/reports.md, "Figures")."""
    spans = []
    for run in runs.values():
        df = run_rows(run)
        df = df[df["dispatch_ns"].notna()]
        if not len(df):
            continue
        t0 = int(df["dispatch_ns"].min())
        end = df["end_ns"].fillna(df["dispatch_ns"])
        spans += list(zip(((df["dispatch_ns"] - t0) / 1e9).tolist(),
                          ((end - t0) / 1e9).tolist(), strict=True))
    if len(spans) < 2:
        return [], max((b for _, b in spans), default=0.0)
    spans.sort()
    total = max(b for _, b in spans) - spans[0][0]
    gaps, reach = [], spans[0][1]
    for a, b in spans[1:]:
        if a - reach > max(GAP_MIN_S, GAP_MIN_SHARE * total):
            gaps.append((reach, a))
        reach = max(reach, b)
    return gaps, reach


def _skip_gaps(axes: list[Axes], runs: Mapping[str, Any]) -> None:
    """Squeeze each idle gap of ``axes``' time axis to a labelled band (a piecewise-linear
    ``function`` scale, ticks in the stretches with traffic)."""
    gaps, end = _idle_gaps(runs)
    if not gaps:
        return
    stretches = _between(gaps, end)
    xs, ys, shift = [-1e18], [-1e18], 0.0
    drawn = sum(b - a for a, b in stretches) or 1.0
    width = max(GAP_WIDTH_SHARE * drawn, 1e-3)
    for a, b in gaps:
        xs += [a, b]
        ys += [a - shift, a - shift + width]
        shift += (b - a) - width
    xs.append(1e18)
    ys.append(1e18 - shift)
    fx, fy = np.asarray(xs), np.asarray(ys)

    def forward(x: Any) -> Any:
        return np.interp(x, fx, fy)

    def inverse(y: Any) -> Any:
        return np.interp(y, fy, fx)

    # per stretch, ticks by its share of the axis, none within 1/8 axis of the last
    full = float(forward(stretches[-1][1]) - forward(0.0)) or 1.0
    ticks: list[float] = []
    for a, b in stretches:
        share = float(forward(b) - forward(a)) / full
        for t in MaxNLocator(nbins=max(1, int(8 * share))).tick_values(a, b):
            if a <= t <= b and (not ticks or (forward(t) - forward(ticks[-1])) / full > 0.12):
                ticks.append(float(t))
    for ax in axes:
        ax.set_xscale("function", functions=(forward, inverse))
        for a, b in gaps:
            ax.axvspan(a, b, color="0.85", lw=0)
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}")
    top = axes[0]
    for a, b in gaps:
        top.text(a + (b - a) / 2, 1.0, f"idle {_duration(b - a)}", fontsize="x-small",
                 ha="center", va="bottom", transform=top.get_xaxis_transform())


def _time_axes(axes: list[Axes], runs: Mapping[str, Any]) -> None:
    """Grid, legend and y from 0 on every panel over the shared time axis (gaps skipped)."""
    for a in axes:
        a.grid(alpha=0.3)
        if a.lines:
            _legend(a)
            _y_from_zero(a)
    axes[-1].set_xlabel("time since the first request (s)")
    _skip_gaps(axes, runs)


def _between(gaps: list[tuple[float, float]], end: float) -> list[tuple[float, float]]:
    """The stretches with traffic around ``gaps``, from 0 to ``end``."""
    out, start = [], 0.0
    for a, b in gaps:
        out.append((start, a))
        start = b
    out.append((start, max(end, start)))
    return out


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _timeline(runs: Mapping[str, Any], ax: Axes | None, bin_s: float | None = None) -> Figure:
    further = _further_series(runs)
    fig, axes = _target(ax, 3 + len(further), ncols=1, size=(10.0, 2.6), sharex=True)
    b = bin_s or max(_auto_bin(run) for run in runs.values())
    for k, (label, run) in enumerate(runs.items()):
        tp = throughput_timeline(run, b)
        axes[0].step(tp["t_s"], tp["output_tps"], where="post", color=_color(k),
                     label=f"{_name(runs, label)}{b:g} s bins")
        if len(axes) == 1:
            continue
        fl = in_flight_timeline(run)
        axes[1].step(fl["t_s"], fl["in_flight"], where="post", color=_color(k),
                     label=f"{_name(runs, label)}in flight (client)")
        _server_panels(axes[1], axes[2], run, _name(runs, label), _color(k))
        _series_panels(axes[3:], further, run, _name(runs, label), _color(k))
    axes[0].set(ylabel="output tokens/s", title="Output token throughput")
    _time_axes(axes, runs)
    if len(axes) >= 3:
        axes[1].set(ylabel="requests", title="Requests in flight (client) and at the server")
        axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
        axes[2].set(ylabel="KV cache usage (fraction, 0-1)", title="Server KV cache usage")
        fig.suptitle(f"Run timeline: {_vs(runs)}")
    return fig


def _server_panels(queue_ax: Axes, kv_ax: Axes, run: Any, name: str, color: str) -> None:
    g = server_gauges(getattr(run, "metrics_timeline", None) or [], _t0_ns(run_rows(run)))
    # markers show where the scrapes were: between two samples the value is unknown
    for col, style in (("running", "o-"), ("waiting", "x--")):
        if g[col].notna().any():
            queue_ax.step(g["t_s"], g[col], style, where="post", ms=4, color=color,
                          alpha=0.6, label=f"{name}server {col} ({len(g)} scrapes)")
    if g["kv_usage"].notna().any():  # a fraction, as the server table shows it
        kv_ax.step(g["t_s"], g["kv_usage"], "o-", where="post", ms=4, color=color,
                   label=f"{name}{len(g)} scrapes")
    elif not kv_ax.lines:
        _no_data(kv_ax, "no KV usage samples (server /metrics not scraped)")


def _further_series(runs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The first ``SERIES_PANELS_MAX`` series the runs scraped beyond the engine's own."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs.values():
        scrape = manifest_of(run).metrics_scrape or {}
        for name, info in (scrape.get("series") or {}).items():
            out.setdefault(name, dict(info))
    return dict(list(out.items())[:SERIES_PANELS_MAX])


def _series_panels(
    axes: Sequence[Axes], further: Mapping[str, Mapping[str, Any]], run: Any, name: str,
    color: str,
) -> None:
    """One panel per further series over the run, on the same time axis as the others."""
    t0 = _t0_ns(run_rows(run))
    rows = getattr(run, "metrics_timeline", None) or []
    for a, (series, info) in zip(axes, further.items(), strict=True):
        pts = [((int(r["t_ns"]) - t0) / 1e9, float(r[series])) for r in rows
               if series in r and "t_ns" in r]  # fmt: skip
        if pts:
            t, v = zip(*pts, strict=True)
            a.step(t, v, "o-", where="post", ms=3, color=color,
                   label=f"{name}{len(pts)} scrapes")
        unit = info.get("unit")
        a.set(ylabel=str(unit or "value"), title=f"{series_title(series, info)} [{series}]")


def _t0_ns(df: pd.DataFrame) -> int:
    sent = df["dispatch_ns"].dropna()
    return int(sent.min()) if len(sent) else 0


def _over_time(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    """Requests in flight and each request's TTFT at its send time (errors marked)."""
    fig, axes = _target(ax, 2, ncols=1, size=(10.0, 2.8), sharex=True)
    for k, (label, run) in enumerate(runs.items()):
        color = _color(k)
        df = run_rows(run)
        t0 = _t0_ns(df)
        fl = in_flight_timeline(run)
        axes[0].step(fl["t_s"], fl["in_flight"], where="post", color=color,
                     label=f"{_name(runs, label)}in flight")
        if len(axes) == 1:
            continue
        ok = df[(df["status"] == "ok") & df["ttft_ms"].notna()]
        axes[1].plot((ok["dispatch_ns"] - t0) / 1e9, ok["ttft_ms"], ".", ms=3, color=color,
                     alpha=0.6, label=f"{_name(runs, label)}ok (n={len(ok)})")
        bad = df[(df["status"] == "error") & df["dispatch_ns"].notna()]
        if len(bad):
            axes[1].plot((bad["dispatch_ns"] - t0) / 1e9, np.zeros(len(bad)), "x", color="red",
                         label=f"{_name(runs, label)}errors (n={len(bad)})")
    axes[0].set(ylabel="requests in flight", title="Requests in flight (client: sent, not ended)")
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    if len(axes) > 1:
        axes[1].set(ylabel="TTFT (ms)", title="TTFT of each request, at the time it was sent")
        if not axes[1].lines:
            _no_data(axes[1], "no request got a first token")
    _ticks(axes[-1], "y")
    _time_axes(axes, runs)
    if ax is None:
        fig.suptitle(f"Load and TTFT over the run: {_vs(runs)}")
    return fig


def _ttft_vs_uncached(runs: Mapping[str, Any], ax: Axes | None) -> Figure:
    """TTFT against the uncached prompt tokens (prompt − cached): a hit moves a point left."""
    fig, (a,) = _target(ax, 1, size=(7.0, 4.2))
    for k, (label, run) in enumerate(runs.items()):
        df = ok_rows(run)
        df = df[df["ttft_ms"].notna() & df["prompt_tokens"].notna()]
        cached = df["cached_tokens"].fillna(0)
        x = (df["prompt_tokens"] - cached).clip(lower=0)
        a.plot(x, df["ttft_ms"], ".", ms=4, alpha=0.6, color=_color(k),
               label=f"{_name(runs, label)}n={len(df)}")
    if not a.lines:
        _no_data(a, "no ok request with a first token")
    else:
        _y_from_zero(a)
        _legend(a)
    a.set(xlabel="uncached prompt tokens (prompt − cached, as the server reported)",
          ylabel="TTFT (ms)", title=f"TTFT vs uncached prompt tokens: {_vs(runs)}")
    _ticks(a, "x")
    _ticks(a, "y")
    a.grid(alpha=0.3)
    return fig


SWIM_MAX = 40  # sessions drawn in a swimlane (the first ones, by unit order)


def _graph_lanes(run: Any, units: list[Any]
                 ) -> tuple[list[Any], dict[Any, str], dict[Any, Any], dict[Any, int]]:  # fmt: skip
    """Lanes in tree order (roots, sub-agents depth first), their labels indented by depth,
    each child's parent lane and each lane's depth; plain order without a graph."""
    rows = getattr(run, "lifecycle", None) or []
    if not rows and isinstance(run, RunResult) and run.run_dir:
        path = Path(run.run_dir) / LIFECYCLE
        rows = read_jsonl(path) if path.exists() else []
    rows = [r for r in rows if not r.get("warmup") and r.get("unit_ordinal") in set(units)]
    if not any(r.get("task_id") is not None for r in rows):
        return units, {u: str(u) for u in units}, {}, {}
    ordinal = {(r["unit_id"], r.get("loop", 0)): r["unit_ordinal"] for r in rows}
    parent = {r["unit_ordinal"]: ordinal.get((r.get("parent_unit_id"), r.get("loop", 0)))
              for r in rows}
    kids: dict[Any, list[Any]] = {}
    for u in units:
        kids.setdefault(parent.get(u), []).append(u)
    names = {r["unit_ordinal"]: (r["unit_id"], int(r.get("depth") or 0)) for r in rows}
    order: list[Any] = []

    def walk(u: Any) -> None:
        order.append(u)
        for c in kids.get(u, []):
            walk(c)

    for root in kids.get(None, []):
        walk(root)
    order += [u for u in units if u not in set(order)]
    labels = {u: ("  " * names[u][1] + ("└ " if names[u][1] else "") + names[u][0])
              if u in names else str(u) for u in order}
    depth = {u: names[u][1] for u in order if u in names}
    return order, labels, {u: p for u, p in parent.items() if p is not None}, depth


#: a lane's round bars by depth (0: a root; 1: its sub-agents; ...), cycling past the end
DEPTH_COLORS = ("C0", "C9", "C4", "C8")


def _joins(df: pd.DataFrame, parents: Mapping[Any, Any]) -> set[tuple[Any, int]]:
    """``(parent lane, round)`` of every round that joins a sub-agent (``extra["spawn"]``)."""
    out: set[tuple[Any, int]] = set()
    if "extra" not in df.columns:
        return out
    first = df[df["round_idx"] == 0]
    for unit, extra in zip(first["unit_ordinal"], first["extra"], strict=True):
        spawn = extra.get("spawn") if isinstance(extra, dict) else None
        if spawn and spawn.get("join_round") is not None and unit in parents:
            out.add((parents[unit], int(spawn["join_round"])))
    return out


def _sessions(runs: Mapping[str, Any], ax: Axes | None, max_sessions: int = SWIM_MAX) -> Figure:
    """One lane per session of the first run: each round a bar from send to end of stream,
    tool waits dotted, errors red; a session graph's sub-agents below their parent,
    coloured by depth, a dashed spawn line and each join's wait solid green."""
    label, run = next(iter(runs.items()))
    df = run_rows(run)
    df = df[df["dispatch_ns"].notna() & df["end_ns"].notna()]
    units, labels, parents, depth = _graph_lanes(run, sorted(df["unit_ordinal"].unique()))
    joins = _joins(df, parents)
    multi = df.groupby("unit_ordinal")["round_idx"].max()
    shown = units[:max_sessions]
    height = max(2.5, min(0.22 * len(shown) + 1.2, 10.0))
    fig, (a,) = _target(ax, 1, size=(10.0, height))
    joined = False
    if not len(df) or int(multi.max() if len(multi) else 0) == 0:
        _no_data(a, "no sessions: every unit is one request (an independent trace)")
    else:
        t0 = _t0_ns(df)
        for lane, unit in enumerate(shown):
            part = df[df["unit_ordinal"] == unit].sort_values("round_idx")
            start = (part["dispatch_ns"].to_numpy() - t0) / 1e9
            end = (part["end_ns"].to_numpy() - t0) / 1e9
            ok = DEPTH_COLORS[depth.get(unit, 0) % len(DEPTH_COLORS)]
            colors = ["C3" if st != "ok" else ok for st in part["status"]]
            a.broken_barh(list(zip(start, end - start, strict=True)), (lane - 0.35, 0.7),
                          facecolors=colors)
            if len(start) > 1:  # tool waits: from a round's end to the next round's send
                waits = _tool_waits_s(part)
                rounds = part["round_idx"].to_numpy()
                stop = start[1:].copy()
                for k in range(len(start) - 1):
                    if (unit, int(rounds[k + 1])) in joins and end[k] + waits[k] < start[k + 1]:
                        stop[k] = end[k] + waits[k]  # the rest waited for sub-agents
                        a.hlines(lane, stop[k], start[k + 1], colors="C2", lw=2.2)
                        joined = True
                a.hlines([lane] * (len(start) - 1), end[:-1], stop, colors="0.6",
                         linestyles=":", lw=1)
            if parents.get(unit) in shown and len(start):  # spawned: parent lane → child
                a.vlines(start[0], shown.index(parents[unit]), lane, colors="C2",
                         linestyles="--", lw=0.8)
        a.set_yticks(range(len(shown)), [labels[u] for u in shown], fontsize="x-small")
        a.set_ylim(len(shown) - 0.5, -0.5)
        depths = sorted({depth.get(u, 0) for u in shown})
        a.legend(handles=[*(Patch(color=DEPTH_COLORS[d % len(DEPTH_COLORS)],
                                  label="round (send → end of stream)" if d == 0 and
                                  len(depths) == 1 else f"round at depth {d}"
                                  + (" (a root)" if d == 0 else " (sub-agent)"))
                            for d in depths),
                          Patch(color="C3", label="round that failed"),
                          Line2D([], [], color="0.6", ls=":", label="tool wait"),
                          *([Line2D([], [], color="C2", lw=2.2,
                                    label="waiting for sub-agents (join)")] if joined else []),
                          *([Line2D([], [], color="C2", ls="--", label="sub-agent spawned")]
                            if parents else [])],
                 fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        _skip_gaps([a], {label: run})
    more = f", first {len(shown)} of {len(units)}" if len(units) > len(shown) else ""
    a.set(xlabel="time since the first request (s)", ylabel=f"session (unit{more})",
          title=f"Sessions: rounds and tool waits ({label})")
    a.grid(axis="x", alpha=0.3)
    return fig


def _tool_waits_s(part: pd.DataFrame) -> np.ndarray:
    """Each round's tool wait as applied (``extra["tool_wait_ms"]``), in s; 0 unknown."""
    if "extra" not in part.columns:
        return np.zeros(len(part))
    return np.array([float((x or {}).get("tool_wait_ms") or 0.0) / 1000.0
                     if isinstance(x, dict) else 0.0 for x in part["extra"]])


# -- trace kinds ---------------------------------------------------------------------------
def as_stats(data: Any) -> Any:
    """A ``TraceStats`` (computed from a Workload or a trace path if needed)."""
    if hasattr(data, "hit_vs_capacity"):
        return data
    from workbench.traces.load import load_trace
    from workbench.workloads.trace_stats import trace_stats

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
    "hit_by_round": partial(
        _by_round, lines=[("actual_prefix_hit_rate", "o-", "actual", None),
                          ("planned_prefix_hit_rate", "s--", "planned", 0.6)],
        ylabel=HIT_FRACTION, title="Prefix hit rate by round, planned vs actual", hit=True),
    "ttft_by_round": partial(
        _by_round, lines=[("ttft_ms_p50", "o-", "p50", None), ("ttft_ms_p90", "^:", "p90", None)],
        ylabel="TTFT (ms)", title="TTFT p50/p90 by round (later rounds reuse the prefix)",
        hit=False),
    "timeline": _timeline,
    "over_time": _over_time,
    "ttft_vs_uncached": _ttft_vs_uncached,
    "sessions": _sessions,
}
TRACE_KINDS: dict[str, KindFn] = {
    "lengths": _lengths,
    "tool_waits": _tool_waits,
    "sessions_over_time": _sessions_over_time,
    "hit_vs_capacity": _hit_vs_capacity,
}
KINDS = (*RUN_KINDS, *TRACE_KINDS)


def plot(data: Any, kind: str, ax: Axes | None = None, **options: Any) -> Figure:
    """Draw ``kind`` (``RUN_KINDS``, ``TRACE_KINDS``) for ``data`` into ``ax`` or a new
    Figure. Options: ``metrics=`` (cdf), ``bin_s=`` (timeline), ``max_sessions=``."""
    if kind in RUN_KINDS:
        fig = RUN_KINDS[kind](as_runs(data), ax, **options)
    elif kind in TRACE_KINDS:
        fig = TRACE_KINDS[kind](as_stats(data), ax, **options)
    else:
        raise ValueError(f"unknown plot kind {kind!r}; valid: {', '.join(KINDS)}")
    if ax is None:
        fig.set_label(kind)
    return fig
