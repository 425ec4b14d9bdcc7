"""What several readers compute alike (file and number reading is ``_io.py``'s, JSON fields
``json_io.py``'s). A reader imports these from here, never from a sibling reader."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, NamedTuple

from workbench.errors import TraceFormatError
from workbench.plurals import counted
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds

log = logging.getLogger(__name__)


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


class Request(NamedTuple):
    """One row of a trace of independent requests (``azure``, ``burstgpt``): its line, its
    0-based data row (the request id's number), its arrival in ms from the trace's first
    request, its lengths and the unit's metadata."""

    line: int
    row: int
    arrival_ms: float
    input_len: int
    output_len: int
    meta: Mapping[str, Any]


def request_workload(path: Path, fmt: str, requests: Sequence[Request], meta: dict[str, Any],
                     *, time_column: str, prompt_column: str,
                     empty: Sequence[int]) -> Workload:
    """The workload of a trace of independent requests (``azure``, ``burstgpt``): one unit a
    request, in file order, named ``{fmt}_{row}``, no cached prefix (no block ids). An
    arrival past ``bounds.MAX_ARRIVAL_MS`` is refused at its line (docs/trace-bounds.md);
    the rows skipped for an empty prompt (``empty``: their lines) and those earlier than a
    row above them (kept where they are, each sent at its own time) are warned about and
    counted in ``meta`` (docs/trace-formats.md, "azure")."""
    units: list[Unit] = []
    late: list[int] = []
    latest = -math.inf
    for req in requests:
        if req.arrival_ms > bounds.MAX_ARRIVAL_MS:
            raise TraceFormatError(path, req.line, bounds.over(
                "arrival after the first request", req.arrival_ms, bounds.MAX_ARRIVAL_MS, "ms"))
        if req.arrival_ms < latest:
            late.append(req.line)
        latest = max(latest, req.arrival_ms)
        rid = f"{fmt}_{req.row}"
        rnd = Round(rid, rid, 0, req.arrival_ms, 0, req.input_len, req.output_len)
        units.append(Unit(rid, "independent", req.arrival_ms, (rnd,), req.meta))
    note_rows(path, meta, "skipped_empty_prompts", empty, f"{prompt_column} 0",
              "skipped (an empty prompt cannot be sent)")
    note_rows(path, meta, "rows_out_of_order", late, f"a {time_column} earlier than a row "
              "above it", "kept in file order, each sent at its own time")
    return Workload(tuple(units), fmt, str(path), None, meta)


def note_rows(path: Path, meta: dict[str, Any], key: str, lines: Sequence[int], what: str,
              done: str) -> None:
    """One warning for the rows a reader skipped or changed (never silently: docs/
    trace-formats.md), ``lines`` theirs: ``"3 rows have GeneratedTokens 0 (first at line
    7): ..."``, their count in ``meta[key]``; nothing when there are none."""
    if lines:
        meta[key] = len(lines)
        log.warning("%s: %s %s (first at line %d): %s", path,
                    counted(len(lines), "row has", "rows have"), what, lines[0], done)
