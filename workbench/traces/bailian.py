"""Alibaba Bailian usage traces (``qwen-bailian-usagetraces-anon``, JSONL): chained turns.

One request a line (``chat_id``, ``parent_chat_id``, ``timestamp`` in **seconds**,
``input_length``, ``output_length``, ``hash_ids``, ``type``, ``turn``); conversations
are ``parent_chat_id`` chains run closed-loop: docs/trace-formats.md, "bailian".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from workbench.errors import TraceFormatError
from workbench.plurals import counted
from workbench.records import Round, Unit, UnitKind, Workload
from workbench.traces import bounds
from workbench.traces._io import check_block_size
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    first_json_object,
    json_hash_ids,
    json_id,
    json_lines,
    json_number,
    json_tokens,
    note_unknown,
    warn_unknown,
)
from workbench.traces.shared import ideal_prefixes

log = logging.getLogger(__name__)

FORMAT_NAME = "bailian"
DEFAULT_BLOCK_SIZE = 16
ROOT = "-1"
KNOWN_FIELDS = frozenset(("chat_id", "parent_chat_id", "timestamp", "input_length",
                          "output_length", "hash_ids", "type", "turn"))
_MS_PER_S = 1000.0


class _Row(NamedTuple):
    line: int
    chat_id: str
    parent: str | None
    arrival_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None
    kind: str | None


def _sniff(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    return obj is not None and "chat_id" in obj and "parent_chat_id" in obj


def _hash_ids(path: Path, line: int, value: Any, raw: str, n: int, block: int) -> tuple[int, ...]:
    ids = json_hash_ids(path, line, value, raw)
    ceil, floor = -(-n // block), n // block
    if len(ids) not in (ceil, floor):
        raise TraceFormatError(
            path, line, f"{len(ids)} hash_ids for input_length {n}: expected {ceil} "
            f"(ceil({n}/{block})) or {floor} (floor); is block_size {block} right?")
    return ids


def _parse(path: Path, line: int, obj: dict[str, Any], raw: str, block: int) -> _Row:
    for key in ("chat_id", "timestamp", "input_length", "output_length"):
        if obj.get(key) is None:
            raise TraceFormatError(path, line, f"missing field {key!r}")
    chat = json_id(path, line, "chat_id", obj["chat_id"])
    parent_raw = obj.get("parent_chat_id")
    parent = None if parent_raw is None else json_id(path, line, "parent_chat_id", parent_raw)
    if parent == ROOT:
        parent = None
    seconds = json_number(path, line, "timestamp", obj["timestamp"],
                          maximum=bounds.MAX_ARRIVAL_MS / _MS_PER_S, unit="s")
    inp = json_tokens(path, line, "input_length", obj["input_length"], minimum=1)
    out = json_tokens(path, line, "output_length", obj["output_length"], minimum=1)
    bounds.check_round(path, line, inp, out)
    ids = obj.get("hash_ids")
    hashes = None if ids is None else _hash_ids(path, line, ids, raw, inp, block)
    kind = obj.get("type")
    return _Row(line, chat, parent, seconds * _MS_PER_S, inp, out, hashes,
                None if kind is None else str(kind))


def _roots(path: Path, rows: list[_Row]) -> tuple[dict[str, str], int, int]:
    """Each chat's root chat id; (roots, dangling parents, the first dangling line)."""
    by_id: dict[str, _Row] = {}
    for r in rows:
        if r.chat_id in by_id:
            raise bounds.duplicate(path, r.line, "chat_id", r.chat_id, by_id[r.chat_id].line)
        by_id[r.chat_id] = r
    root: dict[str, str] = {}
    dangling, first = 0, 0
    for r in rows:
        chain: list[str] = []
        cur: _Row | None = r
        while cur is not None and cur.chat_id not in root:
            if len(chain) > len(rows) or cur.chat_id in chain:
                raise TraceFormatError(path, r.line, f"parent_chat_id chain of chat "
                                       f"{r.chat_id!r} loops back to chat {cur.chat_id!r}")
            chain.append(cur.chat_id)
            if cur.parent is None:
                cur = None
            elif cur.parent not in by_id:
                dangling += 1
                first = first or cur.line
                cur = None
            else:
                cur = by_id[str(cur.parent)]
        top = root[cur.chat_id] if cur is not None else chain[-1]
        for c in chain:
            root[c] = top
    return root, dangling, first


@register_format(
    FORMAT_NAME,
    sniff=_sniff,
    description="Alibaba Bailian usage trace JSONL: chat_id, parent_chat_id (chained turns), "
    "timestamp in seconds, input_length, output_length, hash_ids",
)
def read_bailian(path: Path, *, block_size: int = DEFAULT_BLOCK_SIZE) -> Workload:
    """Load a Bailian trace: conversations chained by ``parent_chat_id``, run closed-loop."""
    check_block_size(block_size)
    path = Path(path)
    rows: list[_Row] = []
    extra: dict[str, int] = {}
    for line, obj, raw in json_lines(path, FORMAT_NAME):
        note_unknown(path, line, obj, KNOWN_FIELDS, extra)
        rows.append(_parse(path, line, obj, raw, block_size))
    if not rows:
        raise TraceFormatError(path, 0, "no rows")
    root, dangling, first_dangling = _roots(path, rows)
    units = _units(path, rows, root, _depths(path, rows), block_size)
    meta: dict[str, Any] = {"sessions": sum(u.is_session for u in units),
                            "timestamp_unit": "s", "dangling_parents": dangling}
    if dangling:
        log.warning("%s: %s a parent_chat_id not in the file (first at line %d); "
                    "each starts its own conversation", path,
                    counted(dangling, "row names", "rows name"), first_dangling)
    warn_unknown(path, extra, meta)
    has_hashes = any(r.hash_ids is not None for r in rows)
    return Workload(tuple(units), FORMAT_NAME, str(path), block_size if has_hashes else None,
                    meta)


def _depths(path: Path, rows: list[_Row]) -> dict[str, int]:
    """Each chat's turns from its conversation's root, a turn no earlier than its parent's
    (docs/trace-formats.md, "bailian"): a child before its parent would be sent before the
    answer its prompt holds, and claim a prefix not yet cached. Chains are acyclic here
    (``_roots``)."""
    by_id = {r.chat_id: r for r in rows}
    depth: dict[str, int] = {}
    for r in rows:
        parent = by_id.get(r.parent) if r.parent is not None else None
        if parent is not None and r.arrival_ms < parent.arrival_ms:
            at, then = (round(x.arrival_ms / _MS_PER_S, 6) for x in (r, parent))
            raise TraceFormatError(path, r.line, (
                f"chat_id {bounds.shown(r.chat_id)} arrives at {at} s, before its parent_chat_id "
                f"{bounds.shown(parent.chat_id)} (line {parent.line}, {then} s): a turn's prompt "
                "holds its parent's answer, so it cannot come first (docs/trace-formats.md, "
                "\"bailian\")"))
        chain: list[str] = []
        cur: _Row | None = r
        while cur is not None and cur.chat_id not in depth:
            chain.append(cur.chat_id)
            cur = by_id.get(cur.parent) if cur.parent is not None else None
        base = -1 if cur is None else depth[cur.chat_id]
        for k, chat in enumerate(reversed(chain), start=1):
            depth[chat] = base + k
    return depth


def _units(path: Path, rows: list[_Row], root: dict[str, str], depth: dict[str, int],
           block: int) -> list[Unit]:
    def run_order(r: _Row) -> tuple[float, int, int]:  # by time, parents first, then file
        return r.arrival_ms, depth[r.chat_id], r.line

    ordered = sorted(rows, key=run_order)  # a prompt finds cached what was sent before it
    prefixes = ideal_prefixes((r.hash_ids for r in ordered),
                              (r.input_length for r in ordered), block)
    prefix = {r.line: p for r, p in zip(ordered, prefixes, strict=True)}
    sessions: dict[str, list[_Row]] = {}
    for r in rows:  # conversations in the order of their first row in the file
        sessions.setdefault(root[r.chat_id], [])
    for r in ordered:
        sessions[root[r.chat_id]].append(r)
    units = []
    for sid, turns in sessions.items():
        arrival = turns[0].arrival_ms
        rounds = []
        for k, r in enumerate(turns):
            wait = turns[k + 1].arrival_ms - r.arrival_ms if k + 1 < len(turns) else 0.0
            if wait > bounds.MAX_WAIT_MS:
                raise TraceFormatError(path, turns[k + 1].line, bounds.over(
                    "gap to the previous turn", wait, bounds.MAX_WAIT_MS, "ms"))
            p = prefix.get(r.line, 0)
            rounds.append(Round(r.chat_id, sid, k, arrival, p, r.input_length - p,
                                r.output_length, wait, r.hash_ids))
        kind: UnitKind = "session" if len(turns) > 1 else "independent"
        meta = {"type": turns[0].kind} if turns[0].kind else {}
        units.append(Unit(sid, kind, arrival, tuple(rounds), meta))
    return units
