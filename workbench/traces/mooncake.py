"""Mooncake request traces (JSONL): independent requests, or closed-loop sessions.

One object a line (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``;
optional ``session_id``, ``delay``, ``request_id``; AIPerf's rows without ``hash_ids``, or
with ``text_input`` instead of ``input_length``): every field and decision is in
docs/trace-formats.md, "mooncake"; the bounds in docs/trace-bounds.md.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from workbench.errors import ConfigError, TraceFormatError
from workbench.plurals import counted
from workbench.records import Round, Unit, Workload
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
from workbench.traces.shared import ideal_prefixes, step_aside
from workbench.traces.text_tokens import text_counter

log = logging.getLogger(__name__)


class _Row(NamedTuple):
    """One parsed line (a NamedTuple: ~4x cheaper to build than a frozen dataclass)."""

    line: int
    timestamp: float | None
    input_length: int  # 0 until a text_input row is counted
    output_length: int
    hash_ids: tuple[int, ...] | None
    session_id: str | None
    delay: float
    request_id: str | None
    text: str | None = None  # AIPerf's text_input, until counted
    beside_text: bool = False  # input_length or hash_ids given with text_input (ignored)


KNOWN_FIELDS = frozenset(("input_length", "output_length", "hash_ids", "timestamp",
                          "session_id", "delay", "request_id", "text_input"))
#: fields that change what the others mean: refused, never ignored
_FOREIGN = {key: "belongs to the bailian format, whose timestamp is in seconds, not ms: "
                 "read this file as 'bailian'" for key in ("chat_id", "parent_chat_id")}


def _count(path: Path, line: int, name: str, value: Any) -> int:
    """A token count in [1, MAX_ROUND_TOKENS]; a plain in-range int skips the helper (speed)."""
    if type(value) is int and 1 <= value <= bounds.MAX_ROUND_TOKENS:
        return value
    return json_tokens(path, line, name, value, minimum=1)


def _ms(path: Path, line: int, name: str, value: Any, bound: float, *,
        unix: bool = False) -> float:
    """A time in ms in [0, bound], or with ``unix`` Unix ms too (``_rebase`` decides); a
    plain in-range int skips the helper (speed)."""
    if type(value) is int and 0 <= value <= bound:
        return float(value)
    ms = json_number(path, line, name, value, maximum=None if unix else bound)
    if ms > bound and not (unix and bounds.UNIX_MS_FROM <= ms <= bounds.MAX_EPOCH_MS):
        raise TraceFormatError(path, line, bounds.over(name, value, bound, "ms"))
    return ms


def _rebase(path: Path, rows: list[_Row]) -> tuple[list[_Row], float, str]:
    """Rows whose timestamps are all Unix ms (``bounds.UNIX_MS_FROM`` on), or all Unix
    seconds (``UNIX_S_FROM`` to ``UNIX_S_TO``: as ms from the start, a trace whose first
    request came 11.6 days in), rebased to the first request; the origin subtracted, in
    ms (0: none), and the unit the file's timestamps were read in ("ms", "s") (docs/
    trace-formats.md, "mooncake"). Rows below Unix time were bounded as they were read."""
    given = [r.timestamp for r in rows if r.timestamp is not None]
    unit = "ms"
    if (given and min(given) >= bounds.UNIX_S_FROM
            and max(given) < bounds.UNIX_S_TO):  # fmt: skip
        unit = "s"
        rows = [r if r.timestamp is None else r._replace(timestamp=r.timestamp * 1000)
                for r in rows]
    stamps = [r.timestamp or 0.0 for r in rows]
    if max(stamps) < bounds.UNIX_MS_FROM:
        return rows, 0.0, unit
    origin = min(stamps)
    if origin < bounds.UNIX_MS_FROM:
        origin = 0.0
    for row in rows:
        at = (row.timestamp or 0.0) - origin
        if at > bounds.MAX_ARRIVAL_MS:  # Unix ms beside ms from the start: no origin fits
            shown = int(at) if at.is_integer() else at
            raise TraceFormatError(path, row.line, bounds.over(
                "timestamp", shown, bounds.MAX_ARRIVAL_MS, "ms"))
        if at + row.delay > bounds.MAX_ARRIVAL_MS:
            raise TraceFormatError(path, row.line, bounds.over(
                "timestamp + delay", at + row.delay, bounds.MAX_ARRIVAL_MS, "ms"))
    # origin is not 0 here: a Unix-ms row beside ms from the start raised above
    moved = [r if r.timestamp is None else r._replace(timestamp=r.timestamp - origin)
             for r in rows]
    first = datetime.fromtimestamp(origin / 1000, UTC).isoformat()
    log.warning("%s: timestamps are Unix time in %s (the first %s), not ms from the trace's "
                "start: rebased to the first request (arrival_origin_ms %s)", path,
                "seconds" if unit == "s" else "ms", first,
                int(origin) if origin.is_integer() else origin)
    return moved, origin, unit


def _parse_row(path: Path, line: int, obj: dict[str, Any], raw: str, block: int, rnd: str) -> _Row:
    if "output_length" not in obj:
        raise TraceFormatError(path, line, (
            "missing field 'output_length': replay needs each request's output length (AIPerf "
            "sends such a row without max_tokens, so the server decides it)"))
    out = _count(path, line, "output_length", obj["output_length"])
    if "hash_ids" in obj and "input_length" not in obj:
        raise TraceFormatError(path, line, "hash_ids without input_length (AIPerf's rule: "
                                           "block ids need the prompt's length)")
    text = obj.get("text_input")
    ids: tuple[int, ...] | None = None
    if text is not None:  # AIPerf sends the text: input_length and hash_ids go unused
        if not isinstance(text, str):
            raise TraceFormatError(path, line, f"text_input must be a string, got "
                                               f"{bounds.shown(text)}")
        inp = 0  # counted when every row is read (read_mooncake)
    elif "input_length" not in obj:
        raise TraceFormatError(path, line, "missing field 'input_length' (or 'text_input', "
                                           "AIPerf's text)")
    else:
        inp = _count(path, line, "input_length", obj["input_length"])
        bounds.check_round(path, line, inp, out)
        if "hash_ids" in obj:
            ids = json_hash_ids(path, line, obj["hash_ids"], raw)
            want = inp // block if rnd == "floor" else -(-inp // block)
            if len(ids) != want:
                raise TraceFormatError(path, line, f"{len(ids)} hash_ids for input_length "
                                                   f"{inp}: expected {want} ({rnd}({inp}/{block}))")
    sid = obj.get("session_id")
    session = None if sid is None else json_id(path, line, "session_id", sid)
    ts = obj.get("timestamp")
    if ts is None:
        if session is None:
            raise TraceFormatError(path, line, "missing field 'timestamp' (row has no session_id)")
    else:
        ts = _ms(path, line, "timestamp", ts, bounds.MAX_ARRIVAL_MS, unix=True)
    delay = obj.get("delay")
    delay = 0.0 if delay is None else _ms(path, line, "delay", delay, bounds.MAX_WAIT_MS)
    if (ts or 0.0) < bounds.UNIX_MS_FROM and (ts or 0.0) + delay > bounds.MAX_ARRIVAL_MS:
        rule = bounds.over("timestamp + delay", (ts or 0.0) + delay, bounds.MAX_ARRIVAL_MS, "ms")
        raise TraceFormatError(path, line, rule)  # Unix ms: once rebased (``_rebase``)
    rid = obj.get("request_id")
    request_id = None if rid is None else json_id(path, line, "request_id", rid)
    return _Row(line, ts, inp, out, ids, session, delay, request_id, text,
                text is not None and ("input_length" in obj or "hash_ids" in obj))


def _count_texts(path: Path, rows: list[_Row], tokenizer: str | None,
                 meta: dict[str, Any]) -> list[_Row]:
    """``rows`` with every ``text_input`` counted (``text_tokens``: words, or the
    ``tokenizer`` option) as its ``input_length``; said in ``meta``."""
    at = [i for i, r in enumerate(rows) if r.text is not None]
    if not at and tokenizer is None:
        return rows
    counter = text_counter(tokenizer)
    meta["reader"] = counter.describe()
    if not at:
        return rows
    rows = list(rows)
    for i, n in zip(at, counter.counts([rows[i].text or "" for i in at]), strict=True):
        row = rows[i]
        if n < 1:
            raise TraceFormatError(path, row.line, "text_input counts 0 tokens (a prompt with "
                                                   "no text has nothing to send)")
        bounds.check_round(path, row.line, n, row.output_length, "text_input")
        rows[i] = row._replace(input_length=n, text=None)
    meta["text_input_rows"] = len(at)
    beside = [rows[i].line for i in at if rows[i].beside_text]
    if beside:
        meta["ignored_beside_text_input"] = len(beside)
        log.warning("%s: %s text_input with input_length or hash_ids (first at line %d): the "
                    "text is the prompt (AIPerf sends it), input_length and hash_ids ignored",
                    path, counted(len(beside), "row gives", "rows give"), beside[0])
    return rows


def _request_ids(path: Path, rows: list[_Row]) -> list[str]:
    """One unique id per row: ``request_id`` when given, else ``mooncake_{n}`` stepping
    aside for ids the file uses (docs/trace-bounds.md, "Unique ids")."""
    sessions = {r.session_id for r in rows if r.session_id is not None}
    given: dict[str, int] = {}
    for row in rows:
        rid = row.request_id
        if rid is None:
            continue
        if rid in given:
            raise bounds.duplicate(path, row.line, "request_id", rid, given[rid])
        if row.session_id is None and rid in sessions:
            rule = f"request_id {rid!r} of a row without session_id is also a session_id"
            raise TraceFormatError(path, row.line, rule)
        given[rid] = row.line
    taken = set(given) | sessions
    return [row.request_id or step_aside(f"mooncake_{n}", taken) for n, row in enumerate(rows)]


def _arrival_order(rows: list[_Row]) -> list[int]:
    """Row indices by the time each is sent at the earliest, ties in file order: an
    independent row at its ``timestamp``; a session's turn at the session's arrival
    (its first row's ``timestamp`` + ``delay``) plus the delays of the turns after it
    up to this one (closed loop: the responses' time comes on top, unknown here)."""
    at: list[float] = []
    clock: dict[str, float] = {}
    for r in rows:
        if r.session_id is None:
            at.append(r.timestamp or 0.0)
        else:
            sid = r.session_id
            clock[sid] = clock.get(sid, r.timestamp or 0.0) + r.delay
            at.append(clock[sid])
    return sorted(range(len(rows)), key=at.__getitem__)  # stable: ties in file order


def _units(path: Path, rows: list[_Row], block: int) -> list[Unit]:
    """Independent rows become one-round units, session rows are grouped closed-loop; each
    round's prefix is the ideal cached one of its block ids, rows taken in arrival order
    (``_arrival_order``)."""
    ordered = _arrival_order(rows)
    prefixes = dict(zip(ordered, ideal_prefixes((rows[i].hash_ids for i in ordered),
                                                (rows[i].input_length for i in ordered), block),
                        strict=True))
    rids = _request_ids(path, rows)

    def round_of(i: int, unit_id: str, k: int, arrival: float, wait: float) -> Round:
        row, prefix = rows[i], prefixes[i]
        return Round(rids[i], unit_id, k, arrival, prefix, row.input_length - prefix,
                     row.output_length, wait, row.hash_ids)

    order: list[str | int] = []
    sessions: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row.session_id is None:
            order.append(i)
        elif row.session_id not in sessions:
            sessions[row.session_id] = [i]
            order.append(row.session_id)
        else:
            sessions[row.session_id].append(i)
    units: list[Unit] = []
    for key in order:
        if isinstance(key, int):
            rid, at = rids[key], rows[key].timestamp or 0.0
            units.append(Unit(rid, "independent", at, (round_of(key, rid, 0, at, 0.0),)))
            continue
        idx = sessions[key]
        first = rows[idx[0]]
        arrival = (first.timestamp or 0.0) + first.delay
        waits = [rows[i].delay for i in idx[1:]] + [0.0]  # after turn k: turn k+1's delay
        turns = tuple(round_of(i, key, k, arrival, waits[k]) for k, i in enumerate(idx))
        units.append(Unit(key, "session", arrival, turns))
    return units


def _sniff(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    return (
        obj is not None
        and ("input_length" in obj or "text_input" in obj)
        and ("hash_ids" in obj or "output_length" in obj)
        and "schema" not in obj
        and "turns" not in obj
        and not obj.keys() & _FOREIGN.keys()  # a Bailian file (timestamps in seconds)
    )


@register_format(
    "mooncake",
    sniff=_sniff,
    description="Mooncake JSONL: timestamp, input_length, output_length, hash_ids "
    "(optional session_id/delay for closed-loop sessions; AIPerf's text_input: option "
    "tokenizer)",
)
def read_mooncake(path: Path, *, block_size: int = 512, hash_rounding: str = "ceil",
                  tokenizer: str | None = None) -> Workload:
    """Load a Mooncake trace; ``block_size`` is the tokens per hash id (512 in the public
    files); ``tokenizer`` counts AIPerf's ``text_input`` (words without it)."""
    check_block_size(block_size)
    if hash_rounding not in ("ceil", "floor"):
        raise ConfigError(f"hash_rounding must be 'ceil' or 'floor', "
                          f"got {bounds.shown(hash_rounding)}")
    path = Path(path)
    seen: dict[str, int] = {}
    rows = []
    for line, obj, raw in json_lines(path, "mooncake"):
        if not obj.keys() <= KNOWN_FIELDS:
            note_unknown(path, line, obj, KNOWN_FIELDS, seen, refused=_FOREIGN)
        rows.append(_parse_row(path, line, obj, raw, block_size, hash_rounding))
    counted_meta: dict[str, Any] = {}
    rows = _count_texts(path, rows, tokenizer, counted_meta)
    rows, origin, unit = _rebase(path, rows)
    units = _units(path, rows, block_size)
    meta: dict[str, Any] = {"hash_rounding": hash_rounding,
                            "sessions": sum(u.is_session for u in units), **counted_meta}
    if origin:
        meta["arrival_origin_ms"] = origin
    if unit == "s":
        meta["timestamp_unit"] = "s"
    warn_unknown(path, seen, meta)
    return Workload(tuple(units), "mooncake", str(path), block_size, meta)
