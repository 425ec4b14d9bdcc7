"""Warm-cache detection: did the server's prefix cache know this run's prompts beforehand?

A run's synthetic tokens are new to the server unless an earlier run on the same
server sent the same ones (same trace, seed and salt). The plan says, for every
request, how many leading tokens this run itself can have put in the cache
(``planned_prefix_tokens``, plus ``folded_prefix_tokens``: a claimed prefix
sent as fresh input, which the shared-prefix pool may still have cached, plus
the tokens the server counted beyond the planned prompt: a chat template's
header, the same in every prompt). A server can never serve more than that
from this run alone: a request that
*first* sends a (unit, round) and is served more cached tokens than that proves
the cache held this workload's blocks before the run started.

Checked: ok, non-warm-up requests whose server reported a cached count, the first
record of each (unit, round) in dispatch order (closed-loop passes repeat their
tokens), of units that had no warm-up (a warm-up primes its units on purpose).
The run is flagged warm when at least ``WARM_MIN_REQUESTS`` and
``WARM_MIN_FRACTION`` of the checked requests went beyond the plan: with
hash-id traces two concurrent requests sharing a block can meet the server in
the other order than the file's, which makes an isolated excess. The pandas
(``warm_cache``) and DuckDB (``metrics.scan.warm_cache``) versions share
``verdict``. docs/cache-isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from workbench.metrics.frame import cache_reported

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


def first_seen(full: pd.DataFrame) -> pd.DataFrame:
    """The checked rows of a ``to_frame`` frame *with* its warm-up rows (see module doc)."""
    warmed = set(full.loc[full["warmup"], "unit_ordinal"].tolist())
    rows = full[~full["warmup"] & (full["status"] == "ok") & cache_reported(full)]
    rows = rows.sort_values(["dispatch_ns", "request_id"], kind="stable", na_position="last")
    rows = rows.drop_duplicates(["unit_ordinal", "round_idx"], keep="first")
    return rows[~rows["unit_ordinal"].isin(warmed)]


def warm_cache(full: pd.DataFrame, flush: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``summary["warm_cache"]`` of a frame that still has its warm-up rows."""
    rows = first_seen(full)
    template = (rows["prompt_tokens"].fillna(0).astype(float) - rows["planned_prompt_tokens"])
    allowed = rows["planned_prefix_tokens"] + rows["folded_prefix_tokens"] + template.clip(lower=0)
    over = (rows["cached_tokens"].astype(float) - allowed).clip(lower=0)
    return verdict(len(rows), int((over > 0).sum()), int(over.sum()), flush)
