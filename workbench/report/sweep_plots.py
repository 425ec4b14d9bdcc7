"""Figures of sweeps: ``sweep_plot(sweeps, kind) -> Figure``, kinds ``SWEEP_KINDS``.

``sweeps`` is a ``Sweep``, a sweep directory, or a mapping or list of them drawn side by
side; one line per configuration, in load order, one colour each. What each kind draws,
the knee and the capacity marks: docs/sweeps.md, "Plots and tables" and "Knee"."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

import workbench.sweeps.groups as groups_mod
from workbench.catalogs.requests import SCALAR_LATENCY
from workbench.metrics.wording import sig
from workbench.report.headline import capacity_lines, sweep_rounds_per_unit
from workbench.report.pareto import pareto_plot
from workbench.report.plots import LATENCY_NAMES, _new
from workbench.sweeps.groups import Curve, curves
from workbench.sweeps.store import Sweep, load_sweep

SWEEP_KINDS = ("latency", "goodput", "cache", "pareto")
THROUGHPUT = groups_mod.THROUGHPUT
RATE_AXIS = groups_mod.RATE_AXIS


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


def load_axis(sweep: Sweep) -> str:
    """The offered-load axis (``groups.load_axis``); ``point`` when no load varies."""
    return groups_mod.load_axis(sweep) or "point"


def _names(sweeps: dict[str, Sweep], label: str, curve: Curve) -> str:
    """A curve's legend prefix: the sweep's and configuration's labels when several."""
    parts = [label] if len(sweeps) > 1 else []
    parts += [curve.label] if curve.label else []
    return ": ".join(parts)


def _colored(sweeps: dict[str, Sweep]) -> Iterator[tuple[str, Sweep, list[tuple[Curve, str]]]]:
    """Each sweep with its curves that have points and their colours (one per curve in
    order, an empty one keeping its place)."""
    k = 0
    for label, sweep in sweeps.items():
        drawn = []
        for curve in curves(sweep):
            if not curve.frame.empty:
                drawn.append((curve, f"C{k}"))
            k += 1
        yield label, sweep, drawn


def _cap_row(curve: Curve) -> pd.Series | None:
    """The row of ``curve`` at its capacity (none when it broke at the lowest load)."""
    cap = curve.capacity
    if cap is None or cap.point is None:
        return None
    rows = curve.frame[curve.frame["point"] == cap.point["index"]]
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
        for label, sweep, colored in _colored(sweeps):
            bound = _slo_bound(sweep, metric)
            # stat None: the SLO's own percentile for a bounded metric, p90 otherwise
            col = bound[0] if bound and stat is None else f"{metric}_{stat or 'p90'}"
            drawn = None
            many = len(curves(sweep)) > 1
            for curve, color in colored:
                df = curve.frame
                if col not in df:
                    continue
                drawn = drawn or color
                name = _names(sweeps, label, curve)
                x = df[THROUGHPUT].to_numpy(dtype=float)
                y = df[col].to_numpy(dtype=float)
                ax.errorbar(x, y, yerr=_errorbars(df, col), marker="o", ms=4, capsize=3,
                            color=color,
                            label=f"{name}: {_short(col)}" if name else _short(col))
                if np.nanmax(y) > 50 * max(np.nanmin(y), 1e-9):
                    ax.set_yscale("log")
                kn = knee(x, y)
                if kn is not None:
                    ax.plot([x[kn]], [y[kn]], marker="*", ms=14, color=color, ls="none",
                            label=f"knee: {sig(x[kn])} req/s")
                cap = _cap_row(curve)
                if cap is not None and col in cap:
                    ax.plot([cap[THROUGHPUT]], [cap[col]], marker="D", ms=9, mfc="none",
                            mew=2, color=color, ls="none",
                            label=f"capacity: {sig(cap[THROUGHPUT])} req/s sustained")
            if bound and drawn:
                ax.axhline(bound[1], color="0.35" if many else drawn, ls="--", lw=1,
                           label=f"SLO {_short(bound[0])} ≤ {bound[1]:g} ms")
        name = LATENCY_NAMES.get(metric, metric)
        ax.set(xlabel="delivered throughput (requests/s)", ylabel=f"{name} (ms)",
               title=f"{name} against throughput")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.legend(fontsize=7)
    return fig


def _rate_unit(axis: str, rounds: float | None) -> str:
    """``", sessions/s"`` for a rate of units of several rounds, ``", req/s"`` for one
    request each: the swept rate's unit, beside the requests/s of the y axis."""
    if axis != RATE_AXIS or not rounds:
        return ""
    return ", sessions/s" if rounds > 1 else ", req/s"


def _goodput(sweeps: dict[str, Sweep], **_ignored: Any) -> Figure:
    fig, (ax,) = _new(1, size=(7.0, 4.2))
    xlabel = "point"
    rounds: float | None = None
    notes: list[str] = []
    for label, sweep, colored in _colored(sweeps):
        xlabel = load_axis(sweep)
        rounds = sweep_rounds_per_unit(sweep) if xlabel == RATE_AXIS else None
        offered: set[float] = set()
        for curve, color in colored:
            df = curve.frame
            x = df[xlabel]
            offered.update(float(v) for v in x)
            name = _names(sweeps, label, curve)
            name = f"{name}: " if name else ""
            ax.plot(x, df[THROUGHPUT], marker="o", ms=4, color=color, ls=":",
                    label=f"{name}delivered")
            if "goodput_rps" in df:
                ax.errorbar(x, df["goodput_rps"], yerr=_errorbars(df, "goodput_rps"),
                            marker="s", ms=4, capsize=3, color=color,
                            label=f"{name}goodput (within SLO)")
            cap = _cap_row(curve)
            if cap is not None:
                ax.axvline(cap[xlabel], color=color, ls="--", lw=1,
                           label=f"{name}capacity (SLO held)")
                ax.annotate(f"{sig(cap[THROUGHPUT])} req/s sustained",
                            (cap[xlabel], cap[THROUGHPUT]), xytext=(6, -14),
                            textcoords="offset points", fontsize=8, color=color)
        if rounds and offered:
            xs = np.array(sorted(offered))
            ax.plot(xs, xs * rounds, color="0.55", lw=1, ls="-", zorder=0,
                    label=f"{label}: offered" if len(sweeps) > 1 else "offered")
        if sweep.slo:
            lines = capacity_lines(sweep, rounds)
            lines[0] = (f"{label}: " if len(sweeps) > 1 else "") + lines[0]
            notes += lines
    ax.set(xlabel=f"offered load ({xlabel}{_rate_unit(xlabel, rounds)})", ylabel="requests/s",
           title="Delivered throughput and goodput against offered load")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    text = "\n".join(textwrap.fill(n, 120) for n in notes if n)
    if text:
        fig.text(0.01, -0.02, text, fontsize=8, va="top", ha="left", wrap=True)
    return fig


def _cache(sweeps: dict[str, Sweep], **_ignored: Any) -> Figure:
    fig, (hit_ax, pre_ax) = _new(2, size=(4.8, 3.6))
    xlabel = "point"
    several = len(sweeps) > 1
    for label, sweep, colored in _colored(sweeps):
        xlabel = load_axis(sweep)
        for curve, color in colored:
            df = curve.frame
            several = several or bool(curve.label)
            x = df[xlabel]
            full = _names(sweeps, label, curve)
            name = f"{full}: " if full else ""
            hit_ax.plot(x, df["actual_prefix_hit_rate"], marker="o", ms=4, color=color,
                        label=f"{name}actual")
            if df["server_prefix_hit_rate"].notna().any():
                hit_ax.plot(x, df["server_prefix_hit_rate"], marker="x", ls="--", color=color,
                            label=f"{name}server")
            if df["planned_prefix_hit_rate"].notna().any():
                hit_ax.plot(x, df["planned_prefix_hit_rate"], ls=":", color=color,
                            label=f"{name}planned")
            pre = pd.to_numeric(df["preemptions"], errors="coerce")
            pre_ax.plot(x, pre, marker="o", ms=4, color=color, label=full or None)
    hit_ax.set(xlabel=f"offered load ({xlabel})", ylabel="hit rate (fraction of prompt tokens)",
               ylim=(0, 1), title="Prefix-cache hits against load")
    hit_ax.legend(fontsize=7)
    pre_ax.set(xlabel=f"offered load ({xlabel})", ylabel="preemptions per run (server counter)",
               title="Preemptions against load")
    ys = [np.asarray(ln.get_ydata(), dtype=float) for ln in pre_ax.get_lines()]
    tops = [float(np.nanmax(y)) for y in ys if y.size and np.isfinite(y).any()]
    top = max((t for t in tops if np.isfinite(t)), default=0.0)
    pre_ax.set_ylim(0, max(1.0, top * 1.1))  # counts, from 0
    pre_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if several:
        pre_ax.legend(fontsize=7)
    return fig


def sweep_plot(data: Any, kind: str = "latency", **options: Any) -> Figure:
    """Draw ``kind`` (``latency``, ``goodput``, ``cache``, ``pareto``) for one or more
    sweeps; ``options``: ``stat`` (latency), ``gpus`` (pareto)."""
    if kind not in SWEEP_KINDS:
        raise ValueError(f"unknown sweep plot kind {kind!r}; valid: {', '.join(SWEEP_KINDS)}")
    draw: dict[str, Callable[..., Figure]] = {
        "latency": _latency, "goodput": _goodput, "cache": _cache, "pareto": pareto_plot}
    fig = draw[kind](as_sweeps(data), **options)
    fig.set_label(f"sweep_{kind}")
    return fig
