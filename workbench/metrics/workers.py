"""Per-worker breakdown of a run against a simulated cluster (docs/cluster.md).

Records carry the serving worker in ``extra["worker"]`` (``worker_waiting``,
``decode_worker``, ``dp_rank`` beside it); a run whose records name no worker has no
breakdown.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.metrics.columns import Columns
from workbench.metrics.derive import cache_measured
from workbench.metrics.distribution import describe


def worker_breakdown(data: Any) -> list[dict[str, Any]] | None:
    """One dict per worker (sorted by index) of the run's rows (``Columns``, or anything
    ``to_frame`` takes), or None without workers; the hit rate is token-weighted over the
    worker's ok requests that reported a cached count (``cache_measured``)."""
    cols = Columns.of(data)
    if not len(cols) or not cols.has("worker"):
        return None
    worker, has_worker = cols.ints("worker")
    if not has_worker.any():
        return None
    waiting, has_waiting = cols.ints("worker_waiting")
    ok = cols.equals("status", "ok")
    prompt, has_prompt = cols.ints("prompt_tokens")
    cached, has_cached = cols.ints("cached_tokens")
    meas = cache_measured(cols.bools("cached_tokens_reported"), has_cached, prompt, has_prompt)
    ttft = cols.floats("ttft_ms")
    rank, has_rank = (cols.ints("dp_rank") if cols.has("dp_rank")
                      else (worker, np.zeros_like(has_worker)))
    total_prompt = float(prompt[ok].sum())
    rows: list[dict[str, Any]] = []
    for w in np.unique(worker[has_worker]).tolist():
        part = has_worker & (worker == w)
        good = part & ok
        m = good & meas
        measured_prompt = int(prompt[m].sum())
        t = describe(ttft[good])
        wait = waiting[part & has_waiting]
        rows.append({
            "worker": int(w),
            "requests": int(part.sum()),
            "ok": int(good.sum()),
            "prompt_tokens": measured_prompt,
            "prompt_share": float(prompt[good].sum()) / total_prompt if total_prompt else None,
            "cached_tokens": int(cached[m].sum()),
            "hit_rate": float(cached[m].sum()) / measured_prompt if measured_prompt else None,
            "ttft_ms_p50": t["p50"],
            "ttft_ms_p90": t["p90"],
            "waiting_at_arrival_mean": float(wait.sum()) / len(wait) if len(wait) else None,
            "waiting_at_arrival_max": float(wait.max()) if len(wait) else None,
        })  # fmt: skip
        if (part & has_rank).any():  # attention-DP ranks (sim.dp): each one's load and TTFT
            rows[-1]["dp_ranks"] = [_rank_row(k, part & has_rank & (rank == k), ok, ttft)
                                    for k in np.unique(rank[part & has_rank]).tolist()]
    return rows


def _rank_row(k: int, part: np.ndarray, ok: np.ndarray, ttft: np.ndarray) -> dict[str, Any]:
    t = describe(ttft[part & ok])
    return {"rank": int(k), "requests": int(part.sum()), "ttft_ms_p50": t["p50"],
            "ttft_ms_p90": t["p90"]}  # fmt: skip
