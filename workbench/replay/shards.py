"""One plan over N shards (worker processes, Ray actors, virtual-time runners): units
round-robin in release order, concurrency divided, routing slots stacked."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from workbench.replay.plan import Plan
from workbench.replay.queue import release_order


@dataclass(frozen=True)
class ShardPart:
    """One shard's part of a run: its units, its share of the concurrency, its first
    routing slot and how many of its units it warms."""

    plan: Plan
    max_concurrency: int | None
    slot_offset: int
    warmup: int


def split_run(plan: Plan, max_concurrency: int | None, warmup: int, n: int) -> list[ShardPart]:
    """The run over ``n`` shards, as every sharding executor splits it."""
    plans = split_plan(plan, n) if n > 1 else [plan]
    shares = split_concurrency(max_concurrency, n)
    offsets = slot_offsets(shares, [len(p.units) for p in plans])
    return [ShardPart(*part) for part in
            zip(plans, shares, offsets, warmup_shares(warmup, n), strict=True)]


def split_plan(plan: Plan, n: int) -> list[Plan]:
    """Round-robin in release order: the i-th unit released goes to shard ``i mod n``."""
    units = release_order(plan.units)
    return [dataclasses.replace(plan, units=units[k::n]) for k in range(n)]


def split_concurrency(c: int | None, n: int) -> list[int | None]:
    """``c`` slots over ``n`` shards (the first ``c mod n`` get one more); None stays None."""
    if c is None:
        return [None] * n
    return [c // n + (1 if k < c % n else 0) for k in range(n)]


def slot_offsets(shares: list[int | None], plan_sizes: list[int]) -> list[int]:
    """First routing slot of each shard: shares stacked (uncapped: unit counts stacked)."""
    out, acc = [], 0
    for share, size in zip(shares, plan_sizes, strict=True):
        out.append(acc)
        acc += share if share is not None else size
    return out


def warmup_shares(n_warm: int, n: int) -> list[int]:
    """How many of the run's first ``n_warm`` units each of ``n`` shards holds (release
    position i is shard ``i mod n``'s): ``ceil((n_warm - k) / n)`` for shard k (docs/arrival.md)."""
    return [max(0, -(-(n_warm - k) // n)) for k in range(n)]
