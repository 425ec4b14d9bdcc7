"""What several readers compute alike (file and number reading is ``_io.py``'s, JSON fields
``json_io.py``'s). A reader imports these from here, never from a sibling reader."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet


def request_id(session_id: str, round_idx: int) -> str:
    """The canonical request id; also the ``x-request-id`` join key with server logs."""
    return f"session_{session_id}_round_{round_idx:06d}"


def leading_seen_blocks(hash_ids: tuple[int, ...], seen: set[int]) -> int:
    """How many leading block ids are already in ``seen`` (a block id implies its prefix)."""
    n = 0
    for h in hash_ids:
        if h not in seen:
            break
        n += 1
    return n


def union_length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals (parallel tool calls)."""
    total = 0.0
    end = -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def ideal_prefixes(hash_ids: Iterable[tuple[int, ...] | None], lengths: Iterable[int],
                   block: int) -> list[int]:  # fmt: skip
    """Each prompt's ideal cached prefix, prompts in order: its leading blocks whose id an
    earlier prompt sent, times ``block``, within its length (0 without ids)."""
    seen: set[int] = set()
    out: list[int] = []
    for ids, length in zip(hash_ids, lengths, strict=True):
        out.append(0 if ids is None else min(leading_seen_blocks(ids, seen) * block, length))
        seen.update(ids or ())
    return out


def step_aside(name: str, taken: set[str], avoid: AbstractSet[str] = frozenset()) -> str:
    """``name``, or the first of ``name~2``, ``name~3`` ... not in ``taken`` nor ``avoid``
    (a suffixed name only); the one chosen is added to ``taken``."""
    out, k = name, 1
    while out in taken or (k > 1 and out in avoid):
        k += 1
        out = f"{name}~{k}"
    taken.add(out)
    return out
