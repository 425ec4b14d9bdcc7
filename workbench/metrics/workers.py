"""Per-worker breakdown of a run against a simulated cluster.

Records of a cluster run carry the serving worker in ``extra["worker"]`` (from
the ``x-workbench-worker`` response header, or set directly in virtual time),
the decode worker under disaggregation in ``extra["decode_worker"]`` and the
worker's waiting queue when the request arrived in ``extra["worker_waiting"]``
(docs/cluster.md). ``worker_breakdown`` turns them into one row per worker:
load (requests, share of prompt tokens), hit rate and queueing (waiting queue
at arrival, TTFT). Runs whose records name no worker have no breakdown.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def _extra(df: pd.DataFrame, key: str) -> pd.Series:
    return df["extra"].map(lambda e: e.get(key) if isinstance(e, dict) else None)


def worker_breakdown(df: pd.DataFrame) -> list[dict[str, Any]] | None:
    """One dict per worker (sorted by index) of the run's rows, or None without workers."""
    if df.empty or "extra" not in df.columns:
        return None
    workers = _extra(df, "worker")
    if workers.isna().all():
        return None
    from workbench.metrics.summary import describe, metric_values

    df = df.assign(_worker=workers, _waiting=_extra(df, "worker_waiting"))
    ok = df[df["status"] == "ok"]
    total_prompt = float(ok["prompt_tokens"].fillna(0).sum())
    rows: list[dict[str, Any]] = []
    for _, part in df[df["_worker"].notna()].groupby("_worker", sort=True):
        good = part[part["status"] == "ok"]
        meas = good[good["cached_tokens"].notna() & (good["prompt_tokens"].fillna(0) > 0)]
        prompt = float(meas["prompt_tokens"].sum())
        ttft = describe(metric_values(good, "ttft_ms"))
        waiting = [float(w) for w in part["_waiting"] if w is not None and not pd.isna(w)]
        rows.append({
            "worker": int(part["_worker"].iloc[0]),
            "requests": len(part),
            "ok": len(good),
            "prompt_tokens": int(prompt),
            "prompt_share": float(good["prompt_tokens"].fillna(0).sum()) / total_prompt
            if total_prompt else None,
            "cached_tokens": int(meas["cached_tokens"].sum()),
            "hit_rate": float(meas["cached_tokens"].sum()) / prompt if prompt else None,
            "ttft_ms_p50": ttft["p50"],
            "ttft_ms_p90": ttft["p90"],
            "waiting_at_arrival_mean": sum(waiting) / len(waiting) if waiting else None,
            "waiting_at_arrival_max": max(waiting) if waiting else None,
        })  # fmt: skip
    return rows
