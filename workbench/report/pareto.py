"""Throughput–interactivity Pareto of a sweep: per-user against per-instance output tokens/s
(docs/sweeps.md, "Pareto")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.metrics.wording import sig, slo_phrase, spread_phrase, thin_phrase
from workbench.sweeps.store import Sweep

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PER_USER = "output_tps_per_user"
PER_INSTANCE = "output_tps_per_instance"
PER_GPU = "output_tps_per_gpu"


def gpus_of(sweep: Sweep, gpus: int | None = None) -> int | None:
    """The GPU count: given, else the sweep's own (``sweep --gpus``), else unknown."""
    n = gpus if gpus is not None else sweep.manifest.gpus
    return int(n) if n else None


def pareto_frame(sweep: Sweep, gpus: int | None = None) -> pd.DataFrame:
    """One row per finished point: its label, the two throughputs, on the frontier or not,
    and its SLO verdict."""
    df = sweep.frame
    cols = ["point", "label", PER_USER, PER_INSTANCE, PER_GPU, "on_frontier", "slo_held"]
    if df.empty or "tpot_ms_mean" not in df:
        return pd.DataFrame(columns=cols)
    tpot = pd.to_numeric(df["tpot_ms_mean"], errors="coerce")
    out = pd.DataFrame({
        "point": df["point"], "label": df["label"],
        PER_USER: 1000.0 / tpot.where(tpot > 0),
        PER_INSTANCE: pd.to_numeric(df["output_token_throughput_tps"], errors="coerce"),
    })
    n = gpus_of(sweep, gpus)
    out[PER_GPU] = out[PER_INSTANCE] / n if n else np.nan
    out["on_frontier"] = frontier(out[PER_INSTANCE].to_numpy(float), out[PER_USER].to_numpy(float))
    out["slo_held"] = df["slo_held"] if sweep.slo else None
    return out[cols].sort_values(PER_INSTANCE, kind="stable").reset_index(drop=True)


def frontier(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True where no other point has x' >= x and y' >= y with one of them greater (NaN:
    never on it). Both axes: more is better."""
    ok = np.isfinite(x) & np.isfinite(y)
    on = np.zeros(len(x), dtype=bool)
    for i in np.flatnonzero(ok):
        ge = ok & (x >= x[i]) & (y >= y[i])
        gt = (x > x[i]) | (y > y[i])
        on[i] = not (ge & gt).any()
    return on


def best_row(sweep: Sweep, gpus: int | None = None) -> pd.Series | None:
    """The point with the highest per-instance throughput that held the SLO (every point
    when the sweep has no SLO); None when none did."""
    df = pareto_frame(sweep, gpus)
    if sweep.slo:
        df = df[df["slo_held"] == True]  # noqa: E712  (None: not evaluated)
    df = df[np.isfinite(df[PER_INSTANCE].to_numpy(float))]
    if df.empty:
        return None
    return df.loc[df[PER_INSTANCE].idxmax()]


def best_sentence(sweep: Sweep, gpus: int | None = None) -> str:
    """The point with the highest per-instance throughput under the SLO, in a sentence
    (a point, not the best configuration: docs/sweeps.md, "Pareto")."""
    n = gpus_of(sweep, gpus)
    row = best_row(sweep, gpus)
    slo = slo_phrase(sweep.slo) or "the SLO"  # in the headline's words, not the flag's
    if row is None:
        if sweep.slo:
            return f"No point held {slo}."
        return "No point finished."
    per_gpu = f" ({sig(row[PER_GPU])} per GPU of {n})" if n else ""
    under = f"under {slo}" if sweep.slo else "(no SLO given)"
    text = (f"Highest throughput {under}: {row['label']} — {sig(row[PER_INSTANCE])} output "
            f"tokens/s per instance{per_gpu} at {sig(row[PER_USER])} tokens/s per user.")
    # what weakens the verdict the point was chosen on (docs/metrics.md, "Evidence")
    verdict = next((p.get("slo") for p in sweep.points if p.get("index") == row["point"]), None)
    if sweep.slo and (thin := thin_phrase(verdict)):
        text += f" Its verdict rests on {thin}."
    if sweep.slo and (spread := spread_phrase(verdict)):
        text += f" Its verdict is uncertain: {spread}."
    return text


def pareto_plot(sweeps: Mapping[str, Sweep], gpus: int | None = None) -> Figure:
    """Per-user against per-instance (per-GPU) output tokens/s, labelled, frontier drawn."""
    # matplotlib imported here: the sweep command prints the best point's sentence
    # (best_sentence) after a stop, and a sentence needs no plotting library
    from workbench.report.plots import _new

    fig, (ax,) = _new(1, size=(7.5, 4.8))
    notes = []
    xlabel = "output tokens/s per instance"
    for i, (label, sweep) in enumerate(sweeps.items()):
        df = pareto_frame(sweep, gpus)
        if df.empty:
            continue
        n = gpus_of(sweep, gpus)
        xcol = PER_GPU if n else PER_INSTANCE
        if n:
            xlabel = "output tokens/s per GPU"
        color = f"C{i}"
        name = f"{label}: " if len(sweeps) > 1 else ""
        held = df["slo_held"] == True  # noqa: E712
        ax.scatter(df[xcol], df[PER_USER], color=color, s=22, zorder=3,
                   label=f"{name}points")
        if sweep.slo and held.any():
            ax.scatter(df.loc[held, xcol], df.loc[held, PER_USER], facecolor="none",
                       edgecolor="green", s=90, lw=1.2, zorder=2, label=f"{name}SLO held")
        front = df[df["on_frontier"]].sort_values(xcol)
        ax.plot(front[xcol], front[PER_USER], color=color, lw=1.5, ls="-", zorder=1,
                label=f"{name}Pareto frontier")
        for _, row in df.iterrows():
            ax.annotate(str(row["label"]), (row[xcol], row[PER_USER]), xytext=(4, 3),
                        textcoords="offset points", fontsize=6, color="0.25")
        best = best_row(sweep, gpus)
        if best is not None:
            ax.plot([best[xcol]], [best[PER_USER]], marker="*", ms=15, color=color,
                    ls="none", zorder=4, label=f"{name}best under the SLO"
                    if sweep.slo else f"{name}highest throughput")
        notes.append(name + best_sentence(sweep, gpus))
    ax.set(xlabel=xlabel, ylabel="output tokens/s per user (1000 / mean TPOT)",
           title="Throughput per instance against interactivity per user")
    ax.set_xlim(left=0, right=max(ax.get_xlim()[1] * 1.12, 1e-9))  # room for the labels
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1] * 1.08, 1e-9))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if notes:
        fig.text(0.01, -0.02, "\n".join(notes), fontsize=8, va="top", ha="left", wrap=True)
    return fig
