"""NVIDIA Dynamo request traces (``dynamo.request.trace.v1`` JSONL) → sessions.

``request_end`` rows are the requests, ``tool_end``/``tool_error`` rows the tool waits
between a session's requests; every field, tolerance and decision is in
docs/trace-formats.md, "dynamo"; sub-agents (``dynamo_graph``) in
docs/session-graphs.md, "dynamo".
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from workbench.errors import TraceFormatError
from workbench.plurals import noun
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import as_int, epoch_ms, token_count, wait_ms
from workbench.traces.dynamo_graph import attach
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    json_id,
    json_lines,
    json_object,
    loads_exact,
    note_unknown,
    warn_unknown,
)
from workbench.traces.shared import ideal_prefixes, union_length

SCHEMA = "dynamo.request.trace.v1"
_TOOL_EVENTS = ("tool_end", "tool_error")
#: the fields of the schema, per object (those read and those Dynamo writes that replay
#: does not need); any other is named in one warning (``json_io.note_unknown``)
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "": frozenset(("schema", "event_type", "event_time_unix_ms", "event_source",
                   "agent_context", "request", "tool")),
    "agent_context.": frozenset(("session_id", "parent_session_id", "dependency",
                                 "trajectory_id", "session_final", "compaction",
                                 "input_trigger")),
    "request.": frozenset(("request_id", "x_request_id", "model", "input_tokens",
                           "output_tokens", "cached_tokens", "request_received_ms",
                           "total_time_ms", "ttft_ms", "finish_reason_metadata", "replay",
                           "worker_id")),
    "request.replay.": frozenset(("trace_block_size", "input_length",
                                  "input_sequence_hashes")),
    "tool.": frozenset(("tool_call_id", "tool_class", "claude", "started_at_unix_ms",
                        "ended_at_unix_ms", "duration_ms", "status", "output_bytes",
                        "output_tokens", "error_type")),
}
#: a sub-agent edge's fields (workbench's exporter, docs/session-graphs.md): another one
#: could change when the child starts or is joined, so it is refused, not ignored
DEPENDENCY_FIELDS = frozenset(("relation", "parent_request_id", "trigger", "delay_ms",
                               "join_request_id"))
_INT_TEXT = re.compile(r"-?[0-9]+")
_REQUIRED = {  # the fields a request_end row must have, per object
    "request.": ("request_id", "output_tokens", "request_received_ms"),
    "request.replay.": ("trace_block_size", "input_length", "input_sequence_hashes"),
}

log = logging.getLogger(__name__)


class _Request(NamedTuple):
    line: int
    request_id: str
    session_id: str | None
    parent_session_id: str | None
    received_ms: float
    total_ms: float | None
    input_length: int
    output_tokens: int
    block_size: int
    hashes: tuple[int, ...]
    tool_call_ids: tuple[str, ...]
    dependency: dict[str, Any] | None = None


class _Tool(NamedTuple):
    line: int
    session_id: str | None
    tool_call_id: str | None
    start_ms: float
    end_ms: float
    duration_ms: float | None = None  # when the start is end - duration_ms


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """The event of an ``{"timestamp": ..., "event": {...}}`` envelope, or the row itself."""
    inner = obj.get("event")
    if isinstance(inner, dict) and "event_type" not in obj and "schema" not in obj:
        return inner
    return obj


def _object(path: Path, line: int, parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise TraceFormatError(path, line, f"{key} must be an object, got {value!r:.40}")
    return value


def _hashes(path: Path, line: int, value: Any, raw: str) -> tuple[int, ...]:
    """Sequence hashes as exact ints (JSON integers or decimal strings, any width)."""
    if not isinstance(value, list):
        raise TraceFormatError(path, line, "input_sequence_hashes must be a list")
    if any(type(h) is float for h in value):  # orjson's rendering of a >64-bit int
        exact = _unwrap(loads_exact(path, line, raw))
        value = exact.get("request", {}).get("replay", {}).get("input_sequence_hashes")
        if not isinstance(value, list):
            raise TraceFormatError(path, line, "input_sequence_hashes must be a list")
    out: list[int] = []
    for h in value:
        if type(h) is int:
            out.append(h)
        elif isinstance(h, str) and _INT_TEXT.fullmatch(h.strip()):
            out.append(int(h.strip()))
        else:
            raise TraceFormatError(path, line, f"sequence hash must be an integer, "
                                               f"got {bounds.shown(h)}")
    return tuple(out)


def _tool_call_ids(req: dict[str, Any]) -> tuple[str, ...]:
    """Tool-call ids the response emitted (used only to link tool rows; lenient)."""
    meta = req.get("finish_reason_metadata")
    calls = meta.get("tool_calls") if isinstance(meta, dict) else None
    if not isinstance(calls, list):
        return ()
    return tuple(str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None)


def _session(
    path: Path, line: int, ev: dict[str, Any], seen: dict[str, int]
) -> tuple[str | None, str | None]:
    ctx = ev.get("agent_context")
    if ctx is None:
        return None, None
    if not isinstance(ctx, dict) or ctx.get("session_id") is None:
        raise TraceFormatError(path, line, "agent_context must be an object with a session_id")
    note_unknown(path, line, ctx, KNOWN_FIELDS["agent_context."], seen, where="agent_context.")
    parent = ctx.get("parent_session_id")
    return (
        json_id(path, line, "agent_context.session_id", ctx["session_id"]),
        None if parent is None else json_id(path, line, "parent_session_id", parent),
    )


def _request(path: Path, line: int, ev: dict[str, Any], raw: str,
             seen: dict[str, int]) -> _Request:  # fmt: skip
    req = _object(path, line, ev, "request")
    replay = _object(path, line, req, "replay")
    for at, obj in (("request.", req), ("request.replay.", replay)):
        note_unknown(path, line, obj, KNOWN_FIELDS[at], seen, where=at)
        missing = next((key for key in _REQUIRED[at] if obj.get(key) is None), None)
        if missing is not None:
            raise TraceFormatError(path, line, f"missing field {missing!r}")
    block = as_int(path, line, "trace_block_size", replay["trace_block_size"], minimum=1,
                   maximum=bounds.MAX_ROUND_TOKENS)
    length = token_count(path, line, "input_length", replay["input_length"], minimum=1)
    output = token_count(path, line, "output_tokens", req["output_tokens"])
    bounds.check_round(path, line, length, max(output, 1))
    hashes = _hashes(path, line, replay["input_sequence_hashes"], raw)
    want = -(-length // block)
    if len(hashes) != want:
        raise TraceFormatError(
            path,
            line,
            f"{len(hashes)} input_sequence_hashes for input_length {length}: "
            f"expected ceil({length}/{block}) = {want}",
        )
    total = req.get("total_time_ms")
    session, parent = _session(path, line, ev, seen)
    ctx = ev.get("agent_context")
    dep = ctx.get("dependency") if isinstance(ctx, dict) else None
    if dep is not None and not isinstance(dep, dict):
        raise TraceFormatError(path, line, f"agent_context.dependency must be an object, got "
                               f"{dep!r:.40}")
    if dep is not None and (odd := sorted(dep.keys() - DEPENDENCY_FIELDS)):
        raise TraceFormatError(
            path, line, f"agent_context.dependency has {noun(len(odd), 'field')} {', '.join(odd)} "
            "this reader "
            "does not know; they may change when the sub-agent starts or is joined, so the "
            f"edge is refused (known: {', '.join(sorted(DEPENDENCY_FIELDS))})")
    return _Request(
        line,
        json_id(path, line, "request_id", req["request_id"]),
        session,
        parent,
        epoch_ms(path, line, "request_received_ms", req["request_received_ms"]),
        None if total is None else wait_ms(path, line, "total_time_ms", total),
        length,
        output,
        block,
        hashes,
        _tool_call_ids(req),
        dep,
    )


def _tool(path: Path, line: int, ev: dict[str, Any], seen: dict[str, int]) -> _Tool:
    tool = _object(path, line, ev, "tool")
    note_unknown(path, line, tool, KNOWN_FIELDS["tool."], seen, where="tool.")
    if tool.get("ended_at_unix_ms") is None:
        raise TraceFormatError(path, line, "missing field 'ended_at_unix_ms'")
    end = epoch_ms(path, line, "ended_at_unix_ms", tool["ended_at_unix_ms"])
    if tool.get("started_at_unix_ms") is not None:
        start = epoch_ms(path, line, "started_at_unix_ms", tool["started_at_unix_ms"])
    elif tool.get("duration_ms") is not None:
        duration = wait_ms(path, line, "duration_ms", tool["duration_ms"])
        return _Tool(line, _session(path, line, ev, seen)[0], _call(tool), end - duration, end,
                     duration)
    else:
        raise TraceFormatError(path, line, "tool needs started_at_unix_ms or duration_ms")
    if start > end:
        raise TraceFormatError(path, line, "tool started_at_unix_ms is after ended_at_unix_ms")
    session, _ = _session(path, line, ev, seen)
    return _Tool(line, session, _call(tool), start, end)


def _call(tool: dict[str, Any]) -> str | None:
    call = tool.get("tool_call_id")
    return None if call is None else str(call)


def _shown(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def _unix_scale(path: Path, name: str, stamps: list[tuple[int, float]]) -> float:
    """What turns ``name``'s values into ms, told from their scale where it is unambiguous
    (docs/trace-formats.md, "dynamo"): 1 for Unix ms (from ``bounds.UNIX_MS_FROM``) and for
    ms from the trace's start (below ``bounds.UNIX_S_FROM``), 1000 for Unix seconds (every
    value in ``[UNIX_S_FROM, UNIX_S_TO)``); anything else is refused."""
    if not stamps:
        return 1.0
    line, lo = min(stamps, key=lambda s: (s[1], s[0]))
    if lo < bounds.UNIX_S_FROM or lo >= bounds.UNIX_MS_FROM:
        return 1.0
    doc = '(docs/trace-formats.md, "dynamo")'
    if lo >= bounds.UNIX_S_TO:
        raise TraceFormatError(path, line, (
            f"{name} {_shown(lo)} is neither Unix ms (from 1e12: 2001) nor Unix seconds (1e9 "
            "to 1e10: 2001 to 2286) nor ms from the trace's start (below 1e9): its unit cannot "
            f"be told from its scale {doc}"))
    odd = next(((n, v) for n, v in stamps if v >= bounds.UNIX_S_TO), None)
    if odd is not None:
        raise TraceFormatError(path, odd[0], (
            f"{name} {_shown(odd[1])} is not in Unix seconds as line {line}'s {_shown(lo)} is "
            f"(1e9 to 1e10): one unit for the whole file {doc}"))
    first = datetime.fromtimestamp(lo, UTC).isoformat()
    log.warning("%s: %s is in Unix seconds (the first %s: %s), not ms: read as seconds", path,
                name, _shown(lo), first)
    return 1000.0


def _in_ms(path: Path, requests: list[_Request], tools: list[_Tool]
           ) -> tuple[list[_Request], list[_Tool], dict[str, str]]:  # fmt: skip
    """Requests and tools with every Unix time in ms (``_unix_scale`` of each field), and
    the unit of each field that was not."""
    units: dict[str, str] = {}
    if _unix_scale(path, "request_received_ms",
                   [(r.line, r.received_ms) for r in requests]) != 1.0:
        requests = [r._replace(received_ms=r.received_ms * 1000.0) for r in requests]
        units["request_received_ms"] = "s"
    if _unix_scale(path, "ended_at_unix_ms", [(t.line, t.end_ms) for t in tools]) != 1.0:
        tools = [t._replace(end_ms=t.end_ms * 1000.0,
                            start_ms=t.start_ms * 1000.0 if t.duration_ms is None
                            else t.end_ms * 1000.0 - t.duration_ms) for t in tools]
        units["tool.ended_at_unix_ms"] = "s"
    return requests, tools, units


def _read_events(
    path: Path, seen: dict[str, int]
) -> tuple[list[_Request], list[_Tool], Counter[str]]:
    """The request and tool rows (others counted as skipped); the fields of theirs this
    reader does not know go into ``seen`` (field → first line)."""
    requests: list[_Request] = []
    tools: list[_Tool] = []
    skipped: Counter[str] = Counter()
    for line, obj, raw in json_lines(path, "dynamo"):
        ev = _unwrap(obj)
        if ev.get("schema") != SCHEMA:
            got = ev.get("schema")
            raise TraceFormatError(path, line, f"schema must be {SCHEMA!r}, got {got!r:.60}")
        kind = ev.get("event_type")
        if not isinstance(kind, str):
            raise TraceFormatError(path, line, "missing field 'event_type'")
        if kind != "request_end" and kind not in _TOOL_EVENTS:
            skipped[kind] += 1
            continue
        note_unknown(path, line, ev, KNOWN_FIELDS[""], seen)
        if kind == "request_end":
            requests.append(_request(path, line, ev, raw, seen))
        else:
            tools.append(_tool(path, line, ev, seen))
    if not requests:
        raise TraceFormatError(path, 0, "no request_end rows")
    return requests, tools, skipped


def _check(path: Path, requests: list[_Request]) -> None:
    """One block size, unique request ids, sessions on all requests or none."""
    first = requests[0]
    ids: dict[str, int] = {}  # each request id's line
    for r in requests:
        if r.block_size != first.block_size:
            raise TraceFormatError(
                path,
                r.line,
                f"trace_block_size {r.block_size} differs from {first.block_size} "
                f"(line {first.line})",
            )
        if (r.session_id is None) != (first.session_id is None):
            raise TraceFormatError(
                path,
                r.line,
                "mixed trace: some request_end rows have agent_context.session_id and some do not",
            )
        if r.request_id in ids:
            raise bounds.duplicate(path, r.line, "request_id", r.request_id, ids[r.request_id])
        ids[r.request_id] = r.line


def _tool_wait(a: _Request, b: _Request, tools: list[_Tool], sources: Counter[str]) -> float:
    """Wait between consecutive requests ``a`` → ``b`` of one session (see module doc)."""
    lo, hi = a.received_ms, b.received_ms
    spans = [(max(t.start_ms, lo), t.end_ms) for t in tools if lo < t.end_ms <= hi]
    if spans:
        sources["tools"] += 1
        return union_length(spans)
    if a.total_ms is not None:
        sources["gap"] += 1
        return max(0.0, hi - (lo + a.total_ms))
    sources["none"] += 1
    return 0.0


def _tools_by_session(requests: list[_Request], tools: list[_Tool]) -> dict[str, list[_Tool]]:
    owner = {call: r.session_id for r in requests if r.session_id for call in r.tool_call_ids}
    out: dict[str, list[_Tool]] = {}
    for t in tools:
        sid = t.session_id or (owner.get(t.tool_call_id) if t.tool_call_id else None)
        if sid is not None:
            out.setdefault(sid, []).append(t)
    return out


def _session_units(
    path: Path,
    ordered: list[_Request],
    tools: list[_Tool],
    prefix: dict[int, int],
    origin: float,
    sources: Counter[str],
) -> list[Unit]:
    sessions: dict[str, list[_Request]] = {}
    for r in ordered:
        sessions.setdefault(r.session_id or "", []).append(r)
    spans = _tools_by_session(ordered, tools)
    units: list[Unit] = []
    for sid, reqs in sessions.items():
        arrival = _arrival(path, reqs[0], origin)
        rounds = []
        for k, r in enumerate(reqs):
            wait = (
                _tool_wait(r, reqs[k + 1], spans.get(sid, []), sources)
                if k + 1 < len(reqs)
                else 0.0
            )
            if wait > bounds.MAX_WAIT_MS:
                rule = bounds.over(f"wait after request {r.request_id!r}", wait,
                                   bounds.MAX_WAIT_MS, "ms")
                raise TraceFormatError(path, r.line, rule)
            rounds.append(_round(r, sid, k, arrival, prefix[r.line], wait))
        meta = {"parent_session_id": reqs[0].parent_session_id} if reqs[0].parent_session_id else {}
        units.append(Unit(sid, "session", arrival, tuple(rounds), meta))
    return attach(path, units, sessions)


def _arrival(path: Path, r: _Request, origin: float) -> float:
    """``received_ms`` rebased to the trace's first request, inside the arrival bound."""
    arrival = r.received_ms - origin
    if arrival > bounds.MAX_ARRIVAL_MS:
        rule = bounds.over("request_received_ms after the first request", arrival,
                           bounds.MAX_ARRIVAL_MS, "ms")
        raise TraceFormatError(path, r.line, rule)
    return arrival


def _round(r: _Request, sid: str, k: int, arrival: float, prefix: int, wait: float) -> Round:
    return Round(
        r.request_id,
        sid,
        k,
        arrival,
        prefix,
        r.input_length - prefix,
        max(r.output_tokens, 1),
        wait,
        r.hashes,
    )


def _sniff(lines: list[str]) -> bool:
    for text in lines:
        if SCHEMA not in text:
            continue
        obj = json_object(text)
        return obj is not None and _unwrap(obj).get("schema") == SCHEMA
    return False


@register_format(
    "dynamo",
    sniff=_sniff,
    description="NVIDIA Dynamo request trace JSONL (dynamo.request.trace.v1)",
)
def read_dynamo(path: Path) -> Workload:
    """Load a Dynamo request trace: sessions from agent_context, else independent requests."""
    path = Path(path)
    unknown_fields: dict[str, int] = {}
    requests, tools, skipped = _read_events(path, unknown_fields)
    _check(path, requests)
    requests, tools, units_given = _in_ms(path, requests, tools)
    ordered = sorted(requests, key=lambda r: (r.received_ms, r.line))
    prefixes = ideal_prefixes((r.hashes for r in ordered), (r.input_length for r in ordered),
                              ordered[0].block_size)  # in received order
    prefix = {r.line: p for r, p in zip(ordered, prefixes, strict=True)}
    origin = ordered[0].received_ms
    sources: Counter[str] = Counter()
    if ordered[0].session_id is None:
        units = [
            Unit(r.request_id, "independent", at, (_round(r, r.request_id, 0, at, prefix[r.line],
                                                          0.0),))
            for r in ordered
            for at in (_arrival(path, r, origin),)
        ]
    else:
        # sessions are created in received order, so units come out ordered by arrival
        units = _session_units(path, ordered, tools, prefix, origin, sources)
    meta = {
        "time_origin_unix_ms": origin,
        "skipped_events": dict(skipped),
        "tool_wait_sources": dict(sources),
        "clamped_output_tokens": sum(r.output_tokens < 1 for r in requests),
    }
    if "request_received_ms" in units_given:
        meta["request_received_unit"] = "s"
    if "tool.ended_at_unix_ms" in units_given:
        meta["tool_time_unit"] = "s"
    warn_unknown(path, unknown_fields, meta)
    return Workload(tuple(units), "dynamo", str(path), ordered[0].block_size, meta)
