"""What several readers compute alike (file and number reading is ``_io.py``'s): the
canonical request id and how much of a request's block-id prefix was seen before. A
reader imports these from here, never from a sibling reader."""

from __future__ import annotations


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
