"""Warm-cache detection: did the server's prefix cache know this run's prompts beforehand?

A request that first sends a (unit, round) and is served more cached tokens than this
run itself can have put in the cache proves the cache held the workload's blocks before
the run; the allowance, the requests checked and the 5 % floor are
docs/cache-isolation.md's. ``warm_cache`` is written once, over ``Columns``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.metrics.columns import Columns
from workbench.metrics.derive import cache_reported

WARM_MIN_REQUESTS = 1
WARM_MIN_FRACTION = 0.05


def verdict(
    checked: int, beyond: int, excess: int, flush: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``summary["warm_cache"]`` from the counts; ``warning`` is None unless warm."""
    warm = beyond >= WARM_MIN_REQUESTS and checked > 0 and beyond / checked >= WARM_MIN_FRACTION
    warning = None
    if warm:
        flushed = bool(flush and flush.get("ok"))
        why = (
            "even though the cache was reset before the run: another client is sending the "
            "same tokens to this server"
            if flushed
            else "the server's prefix cache held this workload's blocks before the run "
            "(an earlier run of the same trace and seed?)"
        )
        warning = (
            f"warm cache: {beyond} of {checked} first-seen requests were served cached tokens "
            f"beyond the plan ({excess} tokens) — {why}. Hit rates and TTFT are optimistic. "
            "Reset the cache first (backend.flush_cache true; vLLM serves the reset only "
            "with VLLM_SERVER_DEV_MODE=1) or isolate the run with backend.token_salt 'run'"
        )
    return {
        "checked_requests": int(checked),
        "beyond_plan_requests": int(beyond),
        "excess_cached_tokens": int(excess),
        "warm": warm,
        "warning": warning,
    }


def reported(cols: Columns) -> np.ndarray:
    """``derive.cache_reported`` of the rows of ``cols``."""
    return cache_reported(cols.bools("cached_tokens_reported"), cols.ints("cached_tokens")[1])


def first_seen(full: Columns) -> Columns:
    """The checked rows of a run's columns *with* its warm-up rows (see module doc)."""
    warm = full.bools("warmup")
    unit = full.ints("unit_ordinal")[0]
    keep = np.flatnonzero(~warm & full.equals("status", "ok") & reported(full))
    dispatch, sent = full.ints("dispatch_ns")
    rnd = full.ints("round_idx")[0]
    # dispatch order (absent dispatch last), request id, then file order: the first of each
    keys = (dispatch[keep] * sent[keep], ~sent[keep], rnd[keep], unit[keep])
    by = np.lexsort(keys)
    tied = np.all([(k[by][1:] == k[by][:-1]) for k in keys], axis=0) if len(by) > 1 else []
    ids = full.rank("request_id")[keep] if np.any(tied) else np.zeros(len(keep), np.int64)
    order = keep[np.lexsort((keep, ids, dispatch[keep], ~sent[keep]))]
    span = int(rnd.max()) - int(rnd.min()) + 1 if len(rnd) else 1
    pair = unit[order] * span + (rnd[order] - (int(rnd.min()) if len(rnd) else 0))
    firsts = order[np.unique(pair, return_index=True)[1]]
    firsts = firsts[~np.isin(unit[firsts], unit[warm])]
    mask = np.zeros(len(full), dtype=bool)
    mask[firsts] = True
    return full.where(mask)


def warm_cache(full: Any, flush: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``summary["warm_cache"]`` of a run's rows, warm-up rows included (a ``Columns``, or
    anything ``to_frame`` takes)."""
    rows = first_seen(Columns.of(full))
    prompt, pp = rows.ints("prompt_tokens")[0], rows.ints("planned_prompt_tokens")[0]
    allowed = (rows.ints("planned_prefix_tokens")[0] + rows.ints("folded_prefix_tokens")[0]
               + np.maximum(prompt - pp, 0))  # fmt: skip
    over = np.maximum(rows.ints("cached_tokens")[0] - allowed, 0)
    return verdict(len(rows), int((over > 0).sum()), int(over.sum()), flush)
