"""Trace statistics: what a workload asks of a server, before anything is replayed.

``trace_stats(workload)`` gives a dict of plain numbers (``TraceStats.summary``; a
``TraceStats`` also reads like that dict) plus DataFrames a notebook can plot. Every
name is defined in docs/interface.md, "trace_stats definitions".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.arrival.schedule import arrival_span
from workbench.context.policy import (
    DEFAULT_POLICY,
    ContextPolicy,
    PlannedRound,
    effective_policy,
    plan_rounds,
)
from workbench.records import Round, Unit, UnitStream, Workload
from workbench.traces.graph import graph_summary

if TYPE_CHECKING:  # pandas is imported where a frame is built: a replay's plan needs only
    import pandas as pd  # ``ideal_prefix_hit_rate``, and a run should not hold pandas' ~75 MB

DEFAULT_BLOCK_SIZE = 512
CURVE_POINTS = 25
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, eq=False)
class TraceStats(Mapping[str, Any]):
    """Summary numbers (also ``stats["name"]``) plus frames: ``rounds`` (one row a round,
    release order), ``sessions`` (one a unit), ``hit_vs_capacity``; ``policy`` is the
    context policy applied (None: the trace's own prefixes)."""

    summary: dict[str, Any]
    rounds: pd.DataFrame
    sessions: pd.DataFrame
    hit_vs_capacity: pd.DataFrame
    fmt: str
    policy: str | None
    block_size: int

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.summary)

    def __len__(self) -> int:
        return len(self.summary)


def trace_stats(
    workload: Workload,
    *,
    cache_capacities: Iterable[int] | None = None,
    block_size: int | None = None,
    policy: str | ContextPolicy = DEFAULT_POLICY,
) -> TraceStats:
    """Statistics of ``workload`` (docs/interface.md, "trace_stats definitions").

    ``block_size``: the cache block in tokens (default: the trace's, else 512);
    ``cache_capacities``: LRU sizes in blocks (default: a log grid to the working set);
    ``policy``: applied to sessions (ignored, as in the runner, for hash-id rounds).
    """
    import pandas as pd

    bs = _block_size(workload, block_size)
    if bs <= 0:
        raise ValueError(f"block_size must be > 0, got {bs}")
    pol = _as_counted(workload, effective_policy(workload, policy))
    table, hash_ids = _round_table(workload, pol)
    rounds = pd.DataFrame(table)
    acc = _block_accesses(rounds, hash_ids, bs)
    rounds["request_order"] = acc.rank
    rounds["ideal_hit_tokens"] = np.bincount(
        acc.rows[acc.eff < acc.never],
        weights=acc.weights[acc.eff < acc.never],
        minlength=len(rounds),
    ).astype(np.int64)
    curve = _hit_curve(acc, cache_capacities, bs, int(rounds["prompt_len"].sum()))
    summary = _summary(workload, rounds, acc, bs)
    return TraceStats(
        summary, rounds, _per_unit(rounds), curve, workload.fmt, getattr(pol, "name", None), bs
    )


def _block_size(workload: Workload, block_size: int | None = None) -> int:
    """The cache block the statistics count in: ``block_size``, else the trace's own, else
    ``DEFAULT_BLOCK_SIZE``."""
    return int(block_size or workload.block_size or DEFAULT_BLOCK_SIZE)


def ideal_prefix_hit_rate(workload: Workload, policy: ContextPolicy | None) -> float:
    """``trace_stats(...)["ideal_prefix_hit_rate"]`` under ``policy`` (``effective_policy``'s),
    without the frames a replay's manifest does not need (~75 MB for 100k one-shot
    requests): 0 with no hash ids and no unit of two rounds (no block is read twice)."""
    units = workload.units
    if isinstance(units, UnitStream) and not units.has_hash_ids and _planned(workload):
        # planned session rounds: the planned prefix hits, from the stream's totals
        return units.prefix_tokens / units.prompt_tokens if units.prompt_tokens else 0.0
    if all(len(u.rounds) <= 1 for u in workload.units) and not workload.has_hash_ids:
        return 0.0
    # the summary's figure without its frames or LRU distances: an infinite cache misses
    # only first accesses (``_block_accesses(..., distances=False)``)
    cols, hash_ids = _access_table(workload, _as_counted(workload, policy))
    acc = _block_accesses(cols, hash_ids, _block_size(workload), distances=False)
    total_prompt = int(cols["prompt_len"].sum())
    return int(acc.weights[acc.eff < acc.never].sum()) / total_prompt if total_prompt else 0.0


# ------------------------------------------------------------------ rounds table


def _planned(workload: Workload) -> bool:
    """An already planned file (``session-execution-v2``, docs/arrival.md)."""
    return workload.meta.get("needs_context_policy") is False


def _as_counted(workload: Workload, policy: ContextPolicy | None) -> ContextPolicy | None:
    """The policy the statistics apply: none on a planned file, whose prefixes are
    counted as written (its one policy, ``trace-reported``, is the identity on it)."""
    return None if _planned(workload) else policy


def _round_plans(
    workload: Workload, policy: ContextPolicy | None
) -> Iterator[tuple[int, Unit, int, Round, PlannedRound | None, float]]:
    """Each round in release order: its unit's index, the unit, its place in the unit, the
    round, its plan under ``policy`` (None: the round as it is, nothing folded) and its
    estimated start (ms)."""
    for ui, unit in enumerate(workload.units):
        plans = plan_rounds(unit.rounds, policy) if policy is not None and unit.is_session else None
        start = unit.arrival_ms
        for k, r in enumerate(unit.rounds):
            yield ui, unit, k, r, None if plans is None else plans[k], start
            start += r.tool_wait_after_ms


def _round_table(
    workload: Workload, policy: ContextPolicy | None
) -> tuple[dict[str, list[Any]], list[tuple[int, ...] | None]]:
    """Columns of the rounds frame (release order) and each round's hash ids."""
    cols: dict[str, list[Any]] = {c: [] for c in _ROUND_COLUMNS}
    hashes: list[tuple[int, ...] | None] = []
    for ui, unit, k, r, plan, start in _round_plans(workload, policy):
        pl = PlannedRound(r.prefix_len, r.input_len) if plan is None else plan
        row = (
            ui, unit.unit_id, unit.kind, r.request_id, r.round_idx, unit.arrival_ms, start,
            r.prefix_len, r.input_len, pl.prefix_len, pl.input_len,
            pl.prefix_len + pl.input_len, r.output_len, r.tool_wait_after_ms,
            k == len(unit.rounds) - 1, pl.folded_prefix_tokens, pl.major_compaction,
            -1 if r.hash_ids is None else len(r.hash_ids),
        )  # fmt: skip
        for name, value in zip(_ROUND_COLUMNS, row, strict=True):
            cols[name].append(value)
        hashes.append(r.hash_ids)
    return cols, hashes


def _access_table(
    workload: Workload, policy: ContextPolicy | None
) -> tuple[dict[str, np.ndarray], list[tuple[int, ...] | None]]:
    """``_round_table``'s ``_ACCESS_COLUMNS`` alone, as int64 arrays, and each round's hash
    ids: what ``ideal_prefix_hit_rate`` reads, without the other 13 columns (nor a
    ``PlannedRound`` per round a policy leaves as it is)."""
    units: list[int] = []
    starts: list[float] = []
    prefixes: list[int] = []
    prompts: list[int] = []
    outputs: list[int] = []
    cols = (units, starts, prefixes, prompts, outputs)
    hashes: list[tuple[int, ...] | None] = []
    for ui, _, _, r, plan, start in _round_plans(workload, policy):
        p, i = (r.prefix_len, r.input_len) if plan is None else (plan.prefix_len, plan.input_len)
        units.append(ui)
        starts.append(start)
        prefixes.append(p)
        prompts.append(p + i)
        outputs.append(r.output_len)
        hashes.append(r.hash_ids)
    return {c: np.asarray(v, np.int64) for c, v in zip(_ACCESS_COLUMNS, cols, strict=True)}, hashes


_ROUND_COLUMNS = (
    "unit_idx", "unit_id", "kind", "request_id", "round_idx", "arrival_ms", "est_start_ms",
    "raw_prefix_len", "raw_input_len", "prefix_len", "input_len", "prompt_len", "output_len",
    "tool_wait_after_ms", "last_round", "folded_prefix_tokens", "major_compaction", "n_hash_ids",
)  # fmt: skip


# ------------------------------------------------------------------ block accesses


@dataclass(frozen=True)
class _Accesses:
    """Block accesses in request order. ``eff``: prefix-closed LRU stack distance."""

    keys: np.ndarray  # dense block key
    weights: np.ndarray  # tokens a hit on this access saves (0 for writes)
    rows: np.ndarray  # round (row of the rounds frame)
    reads: np.ndarray  # bool: part of a planned prefix (counts toward hits)
    eff: np.ndarray  # stack distance, max over the round's earlier reads; `never` if unseen
    never: int
    working_set: int
    rank: np.ndarray  # each round's place in request order


#: the columns of the rounds table the block accesses read
_ACCESS_COLUMNS = ("unit_idx", "est_start_ms", "prefix_len", "prompt_len", "output_len")


def _block_accesses(
    rounds: pd.DataFrame | Mapping[str, np.ndarray],
    hashes: Sequence[tuple[int, ...] | None],
    bs: int,
    *,
    distances: bool = True,
) -> _Accesses:
    """Every block access of the rounds (a frame, or ``_ACCESS_COLUMNS`` as arrays), in
    request order. ``distances=False`` gives each access distance 0 or ``never`` (first
    access of its key) instead of its LRU stack distance: all an infinite cache needs."""
    hk, hw, hr = _hash_accesses(rounds, hashes, bs)
    n_hash_keys = int(hk.max()) + 1 if hk.size else 0
    sk, sw, sr, sread = _session_accesses(rounds, hashes, bs, n_hash_keys)
    keys = np.concatenate([hk, sk])
    weights = np.concatenate([hw, sw])
    rows = np.concatenate([hr, sr])
    reads = np.concatenate([np.ones(hk.size, bool), sread])
    n_rounds = len(hashes)
    rank = np.empty(n_rounds, np.int64)
    rank[np.lexsort((np.arange(n_rounds), np.asarray(rounds["est_start_ms"])))] = np.arange(
        n_rounds
    )
    order = np.argsort(rank[rows], kind="stable")
    keys, weights, rows, reads = keys[order], weights[order], rows[order], reads[order]
    never = len(keys)
    dist = _stack_distances(keys) if distances else _first_accesses(keys)
    dist[~reads] = 0  # writes never break a round's prefix chain (they follow its reads)
    seg = rank[rows]  # non-decreasing: running max restarted at each round
    eff = np.maximum.accumulate(dist + seg * (never + 1)) - seg * (never + 1)
    working_set = int(keys.max()) + 1 if keys.size else 0  # keys are dense and all accessed
    return _Accesses(keys, weights, rows, reads, eff, never, working_set, rank)


def _hash_accesses(
    rounds: pd.DataFrame | Mapping[str, np.ndarray],
    hashes: Sequence[tuple[int, ...] | None],
    bs: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense keys, token weights and rows of every hash-id block (vectorized)."""
    rows = [i for i, h in enumerate(hashes) if h is not None]
    lens = np.array([len(hashes[i] or ()) for i in rows], np.int64)
    total = int(lens.sum())
    if not total:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    try:
        keys = _dense(np.fromiter(chain.from_iterable(hashes[i] or () for i in rows),
                                  np.int64, total))  # fmt: skip
    except OverflowError:  # Dynamo hashes wider than 64 bits
        dense: dict[int, int] = {}
        keys = np.array([dense.setdefault(x, len(dense)) for i in rows for x in hashes[i] or ()],
                        np.int64)  # fmt: skip
    row_of = np.repeat(np.asarray(rows, np.int64), lens)
    starts = np.repeat(np.cumsum(lens) - lens, lens)
    j = np.arange(total, dtype=np.int64) - starts
    prompt = np.asarray(rounds["prompt_len"], np.int64)[row_of]
    weights = np.clip(prompt - j * bs, 0, bs)
    return keys.astype(np.int64).ravel(), weights, row_of


def _dense(values: np.ndarray) -> np.ndarray:
    """``np.unique(values, return_inverse=True)[1]``: each value's rank among the distinct
    values. Hash ids numbered from 0 (Mooncake's: 182,790 over 288,500 reads of the
    whole trace) are ranked by a table over their range, no sort; other ids are sorted."""
    if values.size and values.min() >= 0 and values.max() < 4 * values.size + 1024:
        seen = np.zeros(int(values.max()) + 1, np.int64)
        seen[values] = 1
        rank: np.ndarray = np.cumsum(seen) - 1
        return rank[values]
    return np.unique(values, return_inverse=True)[1]


def _session_accesses(
    rounds: pd.DataFrame | Mapping[str, np.ndarray],
    hashes: Sequence[tuple[int, ...] | None],
    bs: int,
    first_key: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Conversation blocks of rounds without hash ids: prefix reads, then new versions."""
    keys: list[int] = []
    weights: list[int] = []
    rows: list[int] = []
    nread: list[int] = []
    current: dict[int, list[int]] = {}  # unit -> key of each block of its context
    next_key = first_key
    todo = [i for i, h in enumerate(hashes) if h is None]
    cols = np.column_stack([np.asarray(rounds[c], np.int64)
                            for c in ("unit_idx", "prefix_len", "prompt_len", "output_len")])
    for i, (unit, p, prompt, out) in zip(todo, cols[todo].tolist(), strict=True):
        ctx = current.setdefault(unit, [])
        n_read = -(-p // bs)
        missing = n_read - len(ctx)
        if missing > 0:  # a claimed prefix beyond the context: unseen blocks, misses
            ctx.extend(range(next_key, next_key + missing))
            next_key += missing
        keys.extend(ctx[:n_read])
        weights.extend([bs] * (p // bs) + ([p % bs] if p % bs else []))
        first_new, end = p // bs, -(-(prompt + out) // bs)
        new = list(range(next_key, next_key + max(end - first_new, 0)))
        next_key += len(new)
        ctx[first_new:] = new
        keys.extend(new)
        weights.extend([0] * len(new))
        rows.extend([i] * (n_read + len(new)))
        nread.extend([1] * n_read + [0] * len(new))
    return (
        np.asarray(keys, np.int64),
        np.asarray(weights, np.int64),
        np.asarray(rows, np.int64),
        np.asarray(nread, bool),
    )


def _stack_distances(keys: np.ndarray) -> np.ndarray:
    """LRU stack distance of each access: distinct other keys since its last access.

    An access hits an LRU cache of ``c`` blocks iff its distance is ``< c``.
    First accesses get ``len(keys)`` (never a hit). With ``p`` the previous
    access of the same key, ``distance(t) = t - p - 1 - #{s < t : prev(s) > p}``
    (accesses in the window whose key already appeared in it); the count is an
    offline dominance query answered for all ``t`` at once (``_count_dominated``).
    """
    n = len(keys)
    dist = np.full(n, n, np.int64)
    if n < 2:
        return dist
    order = np.argsort(keys, kind="stable")
    same = keys[order[1:]] == keys[order[:-1]]
    prev = np.full(n, -1, np.int64)
    prev[order[1:][same]] = order[:-1][same]
    t = np.flatnonzero(prev >= 0)
    p = prev[t]
    dist[t] = t - p - 1 - _count_dominated(t, p, n)
    return dist


def _first_accesses(keys: np.ndarray) -> np.ndarray:
    """``len(keys)`` where an access is its key's first, else 0 (``_stack_distances``'
    ``never`` where it has it; any other distance is a hit for an infinite cache)."""
    n = len(keys)
    dist = np.zeros(n, np.int64)
    if n:  # keys are small ints (``_dense``): each one's first access by a table, no sort
        first = np.full(int(keys.max()) + 1, n, np.int64)
        np.minimum.at(first, keys, np.arange(n, dtype=np.int64))
        dist[first[first < n]] = n
    return dist


def _count_dominated(s: np.ndarray, prev: np.ndarray, n: int) -> np.ndarray:
    """For each i: ``#{j : s[j] < s[i] and prev[j] > prev[i]}``, vectorized.

    ``[0, s_i)`` splits into dyadic blocks (one per set bit of ``s_i``); per bit
    level, points sorted by ``(block, prev)`` answer every query in that level
    with two binary searches. O(n log² n) in numpy instead of a Python loop.
    """
    w = n + 1
    counts = np.zeros(len(s), np.int64)
    packed = np.sort(s * w + prev)
    for level in range(int(n).bit_length()):
        if level:  # coarsen the previous level: each block is now two sorted runs (timsort merges)
            packed = np.sort(((packed // w) >> 1) * w + packed % w, kind="stable")
        sel = ((s >> level) & 1).astype(bool)
        if not sel.any():
            continue
        block = (s[sel] >> level) - 1
        hi = np.searchsorted(packed, (block + 1) * w, "left")
        lo = np.searchsorted(packed, block * w + prev[sel], "right")
        counts[sel] += hi - lo
    return counts


# ------------------------------------------------------------------ results


def _hit_curve(
    acc: _Accesses, capacities: Iterable[int] | None, bs: int, total_prompt: int
) -> pd.DataFrame:
    """Token-weighted hit rate per LRU capacity (blocks), from the stack distances."""
    if capacities is None:
        top = max(acc.working_set, 1)
        grid = np.unique(np.round(np.geomspace(1, top, CURVE_POINTS)).astype(np.int64))
        caps = np.union1d(grid, [top])
    else:
        caps = np.asarray(sorted({int(c) for c in capacities}), np.int64)
        if caps.size and caps[0] < 0:
            raise ValueError("cache capacities must be >= 0 blocks")
    read = acc.reads & (acc.weights > 0) & (acc.eff < acc.never)  # `never` is no distance
    eff, w = acc.eff[read], acc.weights[read]
    order = np.argsort(eff, kind="stable")
    cum = np.concatenate([[0], np.cumsum(w[order])])
    hit = cum[np.searchsorted(eff[order], caps, "left")]
    rate = hit / total_prompt if total_prompt else np.zeros(len(caps))
    import pandas as pd

    return pd.DataFrame(
        {"capacity_blocks": caps, "capacity_tokens": caps * bs, "hit_tokens": hit, "hit_rate": rate}
    )


def _pct(values: np.ndarray, name: str, out: dict[str, Any]) -> None:
    for q in PERCENTILES:
        out[f"p{q}_{name}"] = float(np.percentile(values, q)) if values.size else None


def _summary(workload: Workload, rounds: pd.DataFrame, acc: _Accesses, bs: int) -> dict[str, Any]:
    prompt = rounds["prompt_len"].to_numpy(np.int64)
    output = rounds["output_len"].to_numpy(np.int64)
    total_prompt, total_prefix = int(prompt.sum()), int(rounds["prefix_len"].sum())
    n = len(rounds)
    waits = rounds.loc[~rounds["last_round"] & (rounds["kind"] == "session"), "tool_wait_after_ms"]
    arrivals = [u.arrival_ms for u in workload.units]
    out: dict[str, Any] = {
        "units": len(workload.units),
        "sessions": sum(u.is_session for u in workload.units),
        "independent": sum(not u.is_session for u in workload.units),
        "rounds": n,
        "total_prompt_tokens": total_prompt,
        "total_prefix_tokens": total_prefix,
        "total_input_tokens": int(rounds["input_len"].sum()),
        "total_output_tokens": int(output.sum()),
        "folded_prefix_tokens": int(rounds["folded_prefix_tokens"].sum()),
        "major_compaction_rounds": int(rounds["major_compaction"].sum()),
        "mean_input_tokens": float(prompt.mean()) if n else None,
        "mean_output_tokens": float(output.mean()) if n else None,
        "mean_rounds_per_unit": n / len(workload.units) if workload.units else None,
        "planned_prefix_hit_rate": total_prefix / total_prompt if total_prompt else 0.0,
        "ideal_prefix_hit_rate": (
            int(rounds["ideal_hit_tokens"].sum()) / total_prompt if total_prompt else 0.0
        ),
        # no block ids and no prefix lengths: the replay's prompts share nothing by
        # construction, so the hit rates are 0 whatever the traffic shared
        "prefix_sharing_recorded": workload.block_size is not None or total_prefix > 0,
        "block_size": bs,
        "working_set_blocks": acc.working_set,
        "working_set_tokens": acc.working_set * bs,
        **arrival_span(arrivals),  # arrival_span_ms, and a warning past a day
        "total_tool_wait_ms": float(waits.sum()),
    }
    _pct(prompt, "prompt_tokens", out)
    _pct(output, "output_tokens", out)
    _pct(waits.to_numpy(float), "tool_wait_ms", out)
    if not isinstance(workload.units, UnitStream):  # a stream's units are drawn, not held
        out.update(graph_summary(workload.units))
    return out


def _per_unit(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per unit: sizes, planned and ideal hit rates, time spent in tools."""
    g = rounds.groupby("unit_idx", sort=True)
    df = g.agg(
        unit_id=("unit_id", "first"),
        kind=("kind", "first"),
        arrival_ms=("arrival_ms", "first"),
        rounds=("round_idx", "size"),
        prompt_tokens=("prompt_len", "sum"),
        prefix_tokens=("prefix_len", "sum"),
        input_tokens=("input_len", "sum"),
        output_tokens=("output_len", "sum"),
        max_prompt_tokens=("prompt_len", "max"),
        tool_wait_ms=("tool_wait_after_ms", "sum"),
        folded_prefix_tokens=("folded_prefix_tokens", "sum"),
        ideal_hit_tokens=("ideal_hit_tokens", "sum"),
    )
    denom = df["prompt_tokens"].where(df["prompt_tokens"] > 0)
    df["planned_prefix_hit_rate"] = (df["prefix_tokens"] / denom).fillna(0.0)
    df["ideal_prefix_hit_rate"] = (df["ideal_hit_tokens"] / denom).fillna(0.0)
    return df.reset_index()


__all__ = ["TraceStats", "trace_stats"]
