"""What several readers compute alike (file and number reading is ``_io.py``'s, JSON fields
``json_io.py``'s). A reader imports these from here, never from a sibling reader."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
