"""Figures of sweeps: ``sweep_plot(sweeps, kind) -> Figure``.

``sweeps`` is a ``Sweep``, a sweep directory, or a mapping ``{label: either}`` /
a list of them to put two sweeps (two engines, two configs) side by side on
the same axes. Kinds:

- ``latency``: achieved request throughput against TTFT, TPOT and E2E
  percentiles (95 % intervals over repeats as error bars), the SLO bound as a
  dashed line and the knee marked;
- ``goodput``: goodput (requests/s within every SLO bound) and throughput
  against the offered load (the swept axis), the capacity marked when the sweep
  searched for it;
- ``cache``: prefix-cache hit rate and preemptions against the offered load.

The knee is the Kneedle point of the curve (docs/sweeps.md): x and y scaled to
[0, 1], the point farthest above the diagonal of a convex increasing curve —
where latency stops growing slowly with throughput and starts growing fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workbench.report.plots import LATENCY_NAMES, _new
from workbench.sweeps.store import Sweep, load_sweep

SWEEP_KINDS = ("latency", "goodput", "cache")
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
             metrics: Sequence[str] = ("ttft_ms", "tpot_ms", "e2e_ms")) -> Figure:
    fig, axes = _new(len(metrics), size=(4.6, 3.6))
    for ax, metric in zip(axes, metrics, strict=True):
        for i, (label, sweep) in enumerate(sweeps.items()):
            df = sweep.frame
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
                        color=color, label=f"{label} ({col.split(':', 1)[-1].replace('_', ' ')})")
            if np.nanmax(y) > 50 * max(np.nanmin(y), 1e-9):
                ax.set_yscale("log")
            k = knee(x, y)
            if k is not None:
                ax.plot([x[k]], [y[k]], marker="*", ms=14, color=color, ls="none",
                        label=f"knee {label}: {x[k]:.3g} req/s")
            if bound:
                ax.axhline(bound[1], color=color, ls="--", lw=1,
                           label=f"SLO {bound[0].split(':', 1)[1]} ≤ {bound[1]:g} ms")
        ax.set_xlabel("achieved throughput (requests/s)")
        ax.set_ylabel(f"{LATENCY_NAMES.get(metric, metric)} (ms)")
        ax.set_title(f"{LATENCY_NAMES.get(metric, metric)} against throughput")
        ax.legend(fontsize=7)
    return fig


def _goodput(sweeps: dict[str, Sweep]) -> Figure:
    fig, (ax,) = _new(1, size=(6.0, 3.8))
    xlabel = "point"
    for i, (label, sweep) in enumerate(sweeps.items()):
        df = sweep.frame
        if df.empty:
            continue
        xlabel, x = load_axis(sweep)
        color = f"C{i}"
        ax.plot(x, df[THROUGHPUT], marker="o", ms=4, color=color, ls=":",
                label=f"{label}: throughput")
        if "goodput_rps" in df:
            ax.errorbar(x, df["goodput_rps"], yerr=_errorbars(df, "goodput_rps"), marker="s",
                        ms=4, capsize=3, color=color, label=f"{label}: goodput (within SLO)")
        cap = sweep.capacity
        if cap and cap.get("value") is not None and cap.get("axis") == xlabel:
            ax.axvline(cap["value"], color=color, ls="--", lw=1,
                       label=f"{label}: capacity {cap['value']:g} ({cap['status']})")
    ax.set_xlabel(f"offered load ({xlabel})")
    ax.set_ylabel("requests/s")
    ax.set_title("Goodput and throughput against offered load")
    ax.legend(fontsize=7)
    return fig


def _cache(sweeps: dict[str, Sweep]) -> Figure:
    fig, (hit_ax, pre_ax) = _new(2, size=(4.8, 3.6))
    xlabel = "point"
    for i, (label, sweep) in enumerate(sweeps.items()):
        df = sweep.frame
        if df.empty:
            continue
        xlabel, x = load_axis(sweep)
        color = f"C{i}"
        hit_ax.plot(x, df["actual_prefix_hit_rate"], marker="o", ms=4, color=color,
                    label=f"{label}: actual (client)")
        if df["server_prefix_hit_rate"].notna().any():
            hit_ax.plot(x, df["server_prefix_hit_rate"], marker="x", ls="--", color=color,
                        label=f"{label}: server")
        if df["planned_prefix_hit_rate"].notna().any():
            hit_ax.plot(x, df["planned_prefix_hit_rate"], ls=":", color=color,
                        label=f"{label}: planned")
        pre = pd.to_numeric(df["preemptions"], errors="coerce")
        pre_ax.plot(x, pre, marker="o", ms=4, color=color, label=label)
    hit_ax.set_xlabel(f"offered load ({xlabel})")
    hit_ax.set_ylabel("hit rate (fraction of prompt tokens)")
    hit_ax.set_ylim(0, 1)
    hit_ax.set_title("Prefix-cache hits against load")
    hit_ax.legend(fontsize=7)
    pre_ax.set_xlabel(f"offered load ({xlabel})")
    pre_ax.set_ylabel("preemptions per run (server counter)")
    pre_ax.set_title("Preemptions against load")
    pre_ax.legend(fontsize=7)
    return fig


def sweep_plot(data: Any, kind: str = "latency", **options: Any) -> Figure:
    """Draw ``kind`` (``latency``, ``goodput``, ``cache``) for one or more sweeps."""
    sweeps = as_sweeps(data)
    if kind == "latency":
        fig = _latency(sweeps, **options)
    elif kind == "goodput":
        fig = _goodput(sweeps)
    elif kind == "cache":
        fig = _cache(sweeps)
    else:
        raise ValueError(f"unknown sweep plot kind {kind!r}; valid: {', '.join(SWEEP_KINDS)}")
    fig.set_label(f"sweep_{kind}")
    return fig
