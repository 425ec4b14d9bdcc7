"""Breakdowns of one run, each a DataFrame (docs/metrics.md, "Breakdowns").

Bands are prompt lengths with K = 1024 tokens, lower bound inclusive, every band listed.
``per_session`` divides output tokens of ok rounds by the e2e time of every attempted
round, and leaves out a unit its time budget truncated unless ``truncated=True``.
``steady_window``'s cap is the argument, else the manifest's, else the most units ever
active together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

import workbench.catalogs.requests as catalog
from workbench.metrics.columns import Columns
from workbench.metrics.distribution import QS, describe, quantiles, sample
from workbench.metrics.frame import Data, run_rows
from workbench.metrics.summary import prefix_hit_rates
from workbench.metrics.timeline import active_units_at
from workbench.records import RunManifest, RunResult

K = 1024
BAND_EDGES: tuple[float, ...] = (0, 2 * K, 8 * K, 16 * K, 32 * K, math.inf)
BAND_LABELS: tuple[str, ...] = ("0-2K", "2-8K", "8-16K", "16-32K", "32K+")
BREAKDOWN_METRICS: tuple[str, ...] = catalog.SCALAR_LATENCY


def percentiles(
    df: pd.DataFrame, col: str, qs: Sequence[float] = QS, *, by: str | None = None
) -> pd.DataFrame:
    """Linear-interpolated percentiles of ``col`` (columns ``p50``…), one row per ``by`` group."""
    groups = df.groupby(by, sort=True, observed=False) if by else [("all", df)]
    rows = {}
    for key, part in groups:
        vals = sample(part, col)
        pcts = quantiles(vals, qs) if vals.size else [math.nan] * len(qs)
        rows[key] = {f"p{q:g}": float(p) for q, p in zip(qs, pcts, strict=True)}
    return pd.DataFrame.from_dict(rows, orient="index", columns=[f"p{q:g}" for q in qs])


def _nan(x: float | int | None) -> float:
    return math.nan if x is None else float(x)


def group_row(part: Columns) -> dict[str, Any]:
    """Counts, latency mean and percentiles over ok rows, and token-weighted hit rates."""
    ok = part.equals("status", "ok")
    row: dict[str, Any] = {
        "requests": len(part),
        "ok": int(ok.sum()),
        "errors": int(part.equals("status", "error").sum()),
        "output_tokens": int(part.ints("output_tokens")[0][ok].sum()),
    }
    good = part.where(ok)
    for col in BREAKDOWN_METRICS:
        s = describe(good.floats(col))
        row[f"{col}_mean"] = _nan(s["mean"])
        for q in QS:
            row[f"{col}_p{q:g}"] = _nan(s[f"p{q:g}"])
    rates = prefix_hit_rates(part)
    for key in ("actual_prefix_hit_rate", "planned_prefix_hit_rate"):
        row[key] = _nan(rates[key])
    return row


def _rows(cols: Columns, warmup: bool) -> Columns:
    return cols if warmup else cols.where(~cols.bools("warmup"))


def round_table(cols: Columns, *, warmup: bool = False) -> pd.DataFrame:
    """``by_round_index`` of a run's columns (warm-up rows included in ``cols``)."""
    df = _rows(cols, warmup)
    rnd = df.ints("round_idx")[0]
    parts = [("first", rnd == 0), ("later", rnd >= 1)]
    parts += [(str(i), rnd == i) for i in np.unique(rnd).tolist()]
    return pd.DataFrame([{"group": name, **group_row(df.where(m))} for name, m in parts])


def band_table(cols: Columns, *, warmup: bool = False) -> pd.DataFrame:
    """``by_input_band`` of a run's columns (warm-up rows included in ``cols``)."""
    df = _rows(cols, warmup)
    length = df.ints("prompt_len")[0]
    rows = []
    for label, lo, hi in zip(BAND_LABELS, BAND_EDGES, BAND_EDGES[1:], strict=False):
        rows.append({"band": label, **group_row(df.where((length >= lo) & (length < hi)))})
    return pd.DataFrame(rows)


def by_round_index(data: Data, *, warmup: bool = False) -> pd.DataFrame:
    """Rows ``first`` (round 0), ``later`` (rounds ≥ 1), then ``0``, ``1``, … per index."""
    return round_table(Columns.of(data), warmup=warmup)


def by_input_band(data: Data, *, warmup: bool = False) -> pd.DataFrame:
    """One row per prompt-length band (``prompt_len``: server count, else as sent/planned)."""
    return band_table(Columns.of(data), warmup=warmup)


def per_session(data: Data, *, warmup: bool = False, truncated: bool = False) -> pd.DataFrame:
    """Per unit: rounds, errors, output tokens, busy time, output tokens/s without tool waits."""
    df = run_rows(data, warmup=warmup)
    cut = budget_truncated(data)
    rows = []
    for ordinal, part in df.groupby("unit_ordinal", sort=True):
        if ordinal in cut and not truncated:
            continue
        ok = part[part["status"] == "ok"]
        busy_s = float(part["e2e_ms"].sum(skipna=True)) / 1000
        out = int(ok["output_tokens"].sum())
        rows.append(
            {
                "unit_ordinal": ordinal,
                "session_id": part["session_id"].iloc[0],
                "rounds": len(part),
                "ok": len(ok),
                "errors": int((part["status"] == "error").sum()),
                "output_tokens": out,
                "busy_s": busy_s,
                "output_tps": out / busy_s if busy_s > 0 else math.nan,
                "budget_truncated": ordinal in cut,
            }
        )
    cols = [
        "unit_ordinal",
        "session_id",
        "rounds",
        "ok",
        "errors",
        "output_tokens",
        "busy_s",
        "output_tps",
        "budget_truncated",
    ]
    return pd.DataFrame(rows, columns=cols)


def budget_truncated(data: Data) -> set[int]:
    """Unit ordinals a per-session time budget truncated (lifecycle reason ``budget``)."""
    rows = data.lifecycle if isinstance(data, RunResult) else []
    return {int(r["unit_ordinal"]) for r in rows
            if r.get("reason") == "budget" and not r.get("warmup")}


def cap_from_manifest(manifest: RunManifest) -> int | None:
    """The admission cap a run was configured with, when its manifest records one."""
    for src in (manifest.section("arrival"), manifest.config):
        for key in ("max_concurrency", "concurrency"):
            if isinstance(src.get(key), int) and src[key] > 0:
                return int(src[key])
    return None


def steady_window(
    data: Data, cap: int | None = None, *, frac: float = 0.9, warmup: bool = False
) -> pd.DataFrame:
    """Requests dispatched while active units ≥ ceil(frac·cap), with an ``active_units`` column."""
    df = run_rows(data, warmup=warmup)
    sent = df[df["dispatch_ns"].notna()].copy()
    sent["active_units"] = active_units_at(df, sent["dispatch_ns"].astype("int64").to_numpy())
    if cap is None and isinstance(data, RunResult):
        cap = cap_from_manifest(data.manifest)
    if cap is None:
        cap = int(sent["active_units"].max()) if len(sent) else 0
    return sent[sent["active_units"] >= math.ceil(frac * cap)]
