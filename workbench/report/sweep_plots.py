"""Figures of sweeps: ``sweep_plot(sweeps, kind) -> Figure``.

``sweeps`` is a ``Sweep``, a sweep directory, or a mapping ``{label: either}`` /
a list of them to put two sweeps (two engines, two configs) side by side on
the same axes. Kinds:

- ``latency``: achieved request throughput against TTFT, TPOT and E2E
  percentiles (95 % intervals over repeats as error bars), the SLO bound as a
  dashed line, the knee (★) and the capacity point (◆) marked;
- ``goodput``: delivered throughput and goodput (requests/s within every SLO
  bound) against the offered load (the swept axis), with the offered request rate
  as a grey line when the axis is ``arrival.rate`` — so delivered below offered is
  seen, not hidden — and the capacity as a dashed vertical line, stated in the
  title (``headline.capacity_sentence``);
- ``cache``: prefix-cache hit rate and preemptions against the offered load;
- ``pareto``: output tokens/s per user against per instance (per GPU with
  ``gpus=``), points labelled by configuration, the frontier drawn
  (``workbench.report.pareto``).

Every line is drawn in load order (sorted by the swept value, not in the order the
points ran: a capacity search probes 1, 40, 20, 30, 25, 27), and each sweep keeps one
colour across every panel.

The knee is the Kneedle point of the curve (docs/sweeps.md): x and y scaled to
[0, 1], the point farthest above the diagonal of a convex increasing curve —
where latency stops growing slowly with throughput and starts growing fast.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from workbench.metrics.catalog import SCALAR_LATENCY
from workbench.report.plots import LATENCY_NAMES, _new
from workbench.sweeps.store import Sweep, load_sweep

SWEEP_KINDS = ("latency", "goodput", "cache", "pareto")
THROUGHPUT = "request_throughput_rps"


def as_sweeps(data: Any) -> dict[str, Sweep]:
    """``{label: Sweep}`` from one sweep, a directory, or a mapping/list of them."""
    if isinstance(data, Sweep | str | PathLike):
        data = [data]
    items = data.items() if isinstance(data, Mapping) else ((None, d) for d in data)
    out: dict[str, Sweep] = {}
    for label, src in items:
        sweep = src if isinstance(src, Sweep) else load_sweep(src)
        name = str(label or sweep.label)
        while name in out:
            name += "'"
        out[name] = sweep
    return out


def knee(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> int | None:
    """Index of the knee of a convex increasing curve (Kneedle), None under 3 points."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(xs) & np.isfinite(ys)
    if ok.sum() < 3:
        return None
    idx = np.flatnonzero(ok)
    xs, ys = xs[ok], ys[ok]
    order = np.argsort(xs, kind="stable")
    xs, ys, idx = xs[order], ys[order], idx[order]
    span_x, span_y = np.ptp(xs), np.ptp(ys)
    if span_x == 0 or span_y == 0:
        return None
    diff = (xs - xs.min()) / span_x - (ys - ys.min()) / span_y
    best = int(np.argmax(diff))
    return int(idx[best]) if diff[best] > 0 else None


def load_axis(sweep: Sweep) -> tuple[str, pd.Series]:
    """The offered-load axis: the swept field's values when there is one numeric axis."""
    df = sweep.frame
    axes = [a for a in sweep.axes if a in df and pd.api.types.is_numeric_dtype(df[a])]
    if len(axes) == 1:
        return axes[0], df[axes[0]]
    return "point", df["point"]


def in_load_order(sweep: Sweep) -> pd.DataFrame:
    """``sweep.frame`` sorted by the offered-load axis (ties: point order)."""
    df = sweep.frame
    if df.empty:
        return df
    axis, _ = load_axis(sweep)
    return df.sort_values([axis, "point"] if axis != "point" else ["point"], kind="stable")


def capacity_row(sweep: Sweep, df: pd.DataFrame) -> pd.Series | None:
    """The row of ``df`` (in load order) at the sweep's capacity: the search's found
    value, or the highest point that held before the first broken one (none when the
    first point broke or the sweep has no SLO)."""
    from workbench.report.headline import capacity_point

    if df.empty or not sweep.slo:
        return None
    axis, _ = load_axis(sweep)
    point, how = capacity_point(sweep, axis) if axis != "point" else (None, "")
    if point is None or how == "below":
        return None
    rows = df[df["point"] == point["index"]]
    return rows.iloc[0] if len(rows) else None


def _short(col: str) -> str:
    """A legend's name of an SLO or stat column: ``slo:ttft_ms:p90`` → ``p90``."""
    return col.rsplit(":", 1)[-1].rsplit("_", 1)[-1]


def _slo_bound(sweep: Sweep, metric: str) -> tuple[str, float] | None:
    """(column, limit) of the SLO's bound on ``metric``, if any."""
    for key, limit in (sweep.slo or {}).items():
        name, _, pct = key.partition(":")
        if name == metric and pct:
            return f"slo:{key}", float(limit)
    return None


def _errorbars(df: pd.DataFrame, col: str) -> np.ndarray | None:
    lo, hi = f"{col}_lo", f"{col}_hi"
    if lo not in df or hi not in df:
        return None
    y = df[col].to_numpy(dtype=float)
    return np.vstack([y - df[lo].to_numpy(dtype=float), df[hi].to_numpy(dtype=float) - y])


def _latency(sweeps: dict[str, Sweep], stat: str | None = None,
             metrics: Sequence[str] = SCALAR_LATENCY) -> Figure:
    fig, axes = _new(len(metrics), size=(4.6, 3.6))
    for ax, metric in zip(axes, metrics, strict=True):
        for i, (label, sweep) in enumerate(sweeps.items()):
            df = in_load_order(sweep)
            if df.empty:
                continue
            bound = _slo_bound(sweep, metric)
            # stat None: the SLO's own percentile for a bounded metric, p90 otherwise
            col = bound[0] if bound and stat is None else f"{metric}_{stat or 'p90'}"
            if col not in df:
                continue
            color = f"C{i}"
            x = df[THROUGHPUT].to_numpy(dtype=float)
            y = df[col].to_numpy(dtype=float)
            ax.errorbar(x, y, yerr=_errorbars(df, col), marker="o", ms=4, capsize=3,
                        color=color,
                        label=f"{label}: {_short(col)}" if len(sweeps) > 1 else _short(col))
            if np.nanmax(y) > 50 * max(np.nanmin(y), 1e-9):
                ax.set_yscale("log")
            k = knee(x, y)
            if k is not None:
                ax.plot([x[k]], [y[k]], marker="*", ms=14, color=color, ls="none",
                        label=f"knee: {x[k]:.3g} req/s")
            cap = capacity_row(sweep, df)
            if cap is not None and col in cap:
                ax.plot([cap[THROUGHPUT]], [cap[col]], marker="D", ms=9, mfc="none", mew=2,
                        color=color, ls="none", label=f"capacity: {cap[THROUGHPUT]:.3g} req/s")
            if bound:
                ax.axhline(bound[1], color=color, ls="--", lw=1,
                           label=f"SLO {_short(bound[0])} ≤ {bound[1]:g} ms")
        ax.set_xlabel("delivered throughput (requests/s)")
        ax.set_ylabel(f"{LATENCY_NAMES.get(metric, metric)} (ms)")
        ax.set_title(f"{LATENCY_NAMES.get(metric, metric)} against throughput")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.legend(fontsize=7)
    return fig


def _goodput(sweeps: dict[str, Sweep]) -> Figure:
    from workbench.report.headline import RATE_AXIS, capacity_sentence, sweep_rounds_per_unit

    fig, (ax,) = _new(1, size=(7.0, 4.2))
    xlabel = "point"
    notes: list[str] = []
    for i, (label, sweep) in enumerate(sweeps.items()):
        df = in_load_order(sweep)
        if df.empty:
            continue
        xlabel, x = load_axis(sweep)
        x = df[xlabel]
        color = f"C{i}"
        name = f"{label}: " if len(sweeps) > 1 else ""
        ax.plot(x, df[THROUGHPUT], marker="o", ms=4, color=color, ls=":",
                label=f"{name}delivered")
        if "goodput_rps" in df:
            ax.errorbar(x, df["goodput_rps"], yerr=_errorbars(df, "goodput_rps"), marker="s",
                        ms=4, capsize=3, color=color, label=f"{name}goodput (within SLO)")
        rounds = sweep_rounds_per_unit(sweep) if xlabel == RATE_AXIS else None
        if rounds:
            ax.plot(x, x * rounds, color="0.55", lw=1, ls="-", zorder=0,
                    label=f"{name}offered" if len(sweeps) > 1 or not notes else None)
        cap = capacity_row(sweep, df)
        if cap is not None:
            ax.axvline(cap[xlabel], color=color, ls="--", lw=1,
                       label=f"{name}capacity (SLO held)")
            ax.annotate(f"{cap[THROUGHPUT]:.3g} req/s delivered",
                        (cap[xlabel], cap[THROUGHPUT]), xytext=(6, -14),
                        textcoords="offset points", fontsize=8, color=color)
        notes.append(f"{name}{capacity_sentence(sweep, rounds)}" if sweep.slo else "")
    ax.set_xlabel(f"offered load ({xlabel})")
    ax.set_ylabel("requests/s")
    ax.set_title("Delivered throughput and goodput against offered load")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    text = "\n".join(textwrap.fill(n, 120) for n in notes if n)
    if text:
        fig.text(0.01, -0.02, text, fontsize=8, va="top", ha="left", wrap=True)
    return fig


def _cache(sweeps: dict[str, Sweep]) -> Figure:
    fig, (hit_ax, pre_ax) = _new(2, size=(4.8, 3.6))
    xlabel = "point"
    for i, (label, sweep) in enumerate(sweeps.items()):
        df = in_load_order(sweep)
        if df.empty:
            continue
        xlabel, _ = load_axis(sweep)
        x = df[xlabel]
        color = f"C{i}"
        name = f"{label}: " if len(sweeps) > 1 else ""
        hit_ax.plot(x, df["actual_prefix_hit_rate"], marker="o", ms=4, color=color,
                    label=f"{name}actual")
        if df["server_prefix_hit_rate"].notna().any():
            hit_ax.plot(x, df["server_prefix_hit_rate"], marker="x", ls="--", color=color,
                        label=f"{name}server")
        if df["planned_prefix_hit_rate"].notna().any():
            hit_ax.plot(x, df["planned_prefix_hit_rate"], ls=":", color=color,
                        label=f"{name}planned")
        pre = pd.to_numeric(df["preemptions"], errors="coerce")
        pre_ax.plot(x, pre, marker="o", ms=4, color=color, label=label if len(sweeps) > 1 else None)
    hit_ax.set_xlabel(f"offered load ({xlabel})")
    hit_ax.set_ylabel("hit rate (fraction of prompt tokens)")
    hit_ax.set_ylim(0, 1)
    hit_ax.set_title("Prefix-cache hits against load")
    hit_ax.legend(fontsize=7)
    pre_ax.set_xlabel(f"offered load ({xlabel})")
    pre_ax.set_ylabel("preemptions per run (server counter)")
    pre_ax.set_title("Preemptions against load")
    top = float(np.nanmax(pre_ax.get_lines()[0].get_ydata())) if pre_ax.get_lines() else 0.0
    pre_ax.set_ylim(0, max(1.0, (top if np.isfinite(top) else 0.0) * 1.1))  # counts, from 0
    pre_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if len(sweeps) > 1:
        pre_ax.legend(fontsize=7)
    return fig


def sweep_plot(data: Any, kind: str = "latency", **options: Any) -> Figure:
    """Draw ``kind`` (``latency``, ``goodput``, ``cache``, ``pareto``) for one or more
    sweeps; ``options``: ``stat`` (latency), ``gpus`` (pareto)."""
    sweeps = as_sweeps(data)
    if kind == "latency":
        fig = _latency(sweeps, **options)
    elif kind == "goodput":
        fig = _goodput(sweeps)
    elif kind == "cache":
        fig = _cache(sweeps)
    elif kind == "pareto":
        from workbench.report.pareto import pareto_plot

        fig = pareto_plot(sweeps, **options)
    else:
        raise ValueError(f"unknown sweep plot kind {kind!r}; valid: {', '.join(SWEEP_KINDS)}")
    fig.set_label(f"sweep_{kind}")
    return fig
