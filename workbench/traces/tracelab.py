"""TraceLab normalized round JSONL (``tracelab``): one recorded LLM round a line.

Fields, the mapping to rounds (``input_len = max(newly_append_tokens, 1)`` ...), session
identity ``(provider, project, session_id)``, tool waits and arrivals:
docs/trace-formats.md, "tracelab"; sub-agents (``tracelab_graph``):
docs/session-graphs.md, "tracelab". Fields not in ``KNOWN_FIELDS`` are named in one warning.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces.formats import register_format
from workbench.traces.json_io import json_int, json_lines, json_number, note_unknown, warn_unknown
from workbench.traces.shared import request_id, step_aside, union_length
from workbench.traces.tracelab_graph import SUBAGENT_TOOLS, attach_subagents

FORMAT_NAME = "tracelab"
TOOL_WAIT_MODES = ("union", "sum")
Interval = tuple[float, float]
_INT_FIELDS = ("round_index", "prefix_tokens", "newly_append_tokens", "output_tokens")
#: the round schema's fields: those read, and those TraceLab writes that replay does not
#: need (cache split, reasoning tokens, message counts ...); any other is named in one
#: warning (``json_io.note_unknown``)
KNOWN_FIELDS = frozenset((
    *_INT_FIELDS, "provider", "project", "session_id", "model", "input_tokens_total",
    "timing_events", "tools", "parent_session_id", "round_id", "turn_id", "trace_key", "store",
    "claude_uncached_input_tokens", "claude_cache_creation_input_tokens",
    "claude_cache_read_input_tokens", "reasoning_output_tokens", "current_input_event_count",
    "current_user_message_count", "current_tool_result_count", "current_user_message_chars",
    "current_tool_result_chars", "current_input_chars", "first_input_event_type",
))


def sniff(lines: list[str]) -> bool:
    """A JSON object line carrying TraceLab's round keys."""
    head = lines[0] if lines else ""
    return head.startswith("{") and '"round_index"' in head and '"newly_append_tokens"' in head


@dataclass(frozen=True)
class _Row:
    """One parsed line: identity, order keys, mapped lengths, tool wait and timing."""

    line: int
    identity: tuple[str, str | None, str]
    round_index: int
    model: str | None
    prefix_len: int
    input_len: int
    output_len: int
    start_ms: float | None
    tool_wait_ms: float  # under the reader's tool_wait mode
    end_ms: float | None = None  # the round's last timing event or tool result
    agent_tools: tuple[Interval, ...] = ()  # its sub-agent tool calls (tracelab_graph)
    parent_session_id: str | None = None


@register_format(FORMAT_NAME, sniff=sniff, description="TraceLab normalized round JSONL")
def read_tracelab(path: Path, *, tool_wait: str = "union") -> Workload:
    """Read TraceLab rounds into sessions; ``tool_wait`` is ``"union"`` or ``"sum"``."""
    if tool_wait not in TOOL_WAIT_MODES:
        raise ConfigError(f"tool_wait must be one of {TOOL_WAIT_MODES}, "
                          f"got {bounds.shown(tool_wait)}")
    path = Path(path)
    sessions: dict[tuple[str, str | None, str], list[_Row]] = {}
    unknown: dict[str, int] = {}
    seen: dict[object, int] = {}  # each round's key (``_round_key``) → its line
    for line, obj, raw in json_lines(path, FORMAT_NAME):
        note_unknown(path, line, obj, KNOWN_FIELDS, unknown)
        row = _parse_row(path, line, obj, tool_wait)
        _refuse_repeat(path, row, obj.get("round_id"), raw, seen)
        sessions.setdefault(row.identity, []).append(row)
    starts = [_session_start(path, rows) for rows in sessions.values()]
    origin = min(starts)
    for rows, start in zip(sessions.values(), starts, strict=True):
        if start - origin > bounds.MAX_ARRIVAL_MS:
            rule = bounds.over("session arrival after the first session", start - origin,
                               bounds.MAX_ARRIVAL_MS, "ms")
            raise TraceFormatError(path, _first(rows).line, rule)
    names = _unit_ids(list(sessions))
    units = attach_subagents(path, [
        _build_unit(names[key], rows, start - origin)
        for (key, rows), start in zip(sessions.items(), starts, strict=True)
    ], sessions, names)
    meta = {
        "needs_context_policy": True,
        "tool_wait": tool_wait,
        "tool_latency_source": "wall",
        "session_identity": ["provider", "project", "session_id"],
        "round_order": ["round_index", "file_order"],
        "arrival_origin_ms": origin,
        "arrival_origin": datetime.fromtimestamp(origin / 1000, UTC).isoformat(),
    }
    warn_unknown(path, unknown, meta)
    return Workload(units, FORMAT_NAME, source=str(path), meta=meta)


def _str(path: Path, line: int, obj: dict[str, Any], key: str, *, optional: bool) -> str | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise TraceFormatError(path, line, f"{key} must be a non-empty string, "
                                           f"got {bounds.shown(value)}")
    return value


def _parse_row(path: Path, line: int, obj: dict[str, Any], mode: str) -> _Row:
    """Types, the token invariant and the timing of one round line."""
    provider = _str(path, line, obj, "provider", optional=False)
    project = _str(path, line, obj, "project", optional=True)
    sid = bounds.check_id(path, line, "session_id",
                          _str(path, line, obj, "session_id", optional=False) or "")
    model = _str(path, line, obj, "model", optional=True)
    lengths = {k: _int(path, line, obj, k) for k in _INT_FIELDS}
    if lengths["round_index"] < 0:
        raise TraceFormatError(path, line, f"round_index must be >= 0, "
                                           f"got {bounds.shown(obj['round_index'])}")
    total = obj.get("input_tokens_total")
    expected = lengths["prefix_tokens"] + lengths["newly_append_tokens"]
    if total is not None and _int(path, line, obj, "input_tokens_total") != expected:
        raise TraceFormatError(
            path, line, f"input_tokens_total {total!r} != prefix_tokens + newly_append_tokens"
        )
    events = _list(path, line, obj, "timing_events")
    stamps = [_stamp(path, line, "timing_events[].timestamp", e.get("timestamp")) for e in events]
    intervals, loose, latency_sum, agent = _tools(path, line, _list(path, line, obj, "tools"))
    starts = [s for s in stamps if s is not None] + [a for a, _ in intervals]
    ends = [s for s in stamps if s is not None] + [b for _, b in intervals]
    assert provider is not None and sid is not None  # non-optional above
    prompt = max(lengths["prefix_tokens"], 0) + max(lengths["newly_append_tokens"], 1)
    bounds.check_round(path, line, prompt, max(lengths["output_tokens"], 1))
    # a tool with a latency but no start time cannot be placed: it overlaps nothing
    waits = {"union": union_length(intervals) + loose, "sum": latency_sum}
    for how, wait in waits.items():
        if wait > bounds.MAX_WAIT_MS:
            rule = bounds.over(f"tool wait ({how} of the round's tools)", wait,
                               bounds.MAX_WAIT_MS, "ms")
            raise TraceFormatError(path, line, rule)
    parent = _str(path, line, obj, "parent_session_id", optional=True)  # tracelab_graph
    return _Row(
        line=line,
        identity=(provider, project, sid),
        round_index=lengths["round_index"],
        model=model,
        prefix_len=max(lengths["prefix_tokens"], 0),
        input_len=max(lengths["newly_append_tokens"], 1),
        output_len=max(lengths["output_tokens"], 1),
        start_ms=min(starts) if starts else None,
        tool_wait_ms=waits[mode],
        end_ms=max(ends) if ends else None,
        agent_tools=agent,
        parent_session_id=parent and bounds.check_id(path, line, "parent_session_id", parent),
    )


def _refuse_repeat(path: Path, row: _Row, round_id: Any, raw: str,
                   seen: dict[object, int]) -> None:
    """A round recorded twice (a file joined to itself) is refused at its second line: the
    same ``round_id`` in one session, or without one, the same line byte for byte
    (docs/trace-formats.md, "tracelab")."""
    if round_id is not None:
        key: object = (row.identity, "round_id", str(round_id))
        if key in seen:
            raise bounds.duplicate(path, row.line, "round_id", str(round_id), seen[key])
    else:
        # the line's digest, not the line: a round's line can be kilobytes of tool records
        digest = hashlib.blake2b(raw.strip().encode(), digest_size=16).digest()
        key = (row.identity, "line", digest)
        if key in seen:
            raise TraceFormatError(path, row.line, (
                f"duplicate round: line {row.line} repeats line {seen[key]} byte for byte "
                f"(session_id {bounds.shown(row.identity[2])}, round_index {row.round_index})"))
    seen[key] = row.line


def _int(path: Path, line: int, obj: dict[str, Any], key: str) -> int:
    if key not in obj:
        raise TraceFormatError(path, line, f"missing field {key}")
    limit = bounds.MAX_ROUND_TOKENS
    return json_int(path, line, key, obj[key], minimum=-limit, maximum=limit)


def _list(path: Path, line: int, obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TraceFormatError(path, line, f"{key} must be a list of objects")
    return value


def _stamp(path: Path, line: int, name: str, value: Any) -> float | None:
    """An ISO-8601 timestamp as epoch ms (naive means UTC); ``None`` when absent."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp() * 1000.0
    except (TypeError, ValueError, OverflowError):
        rule = f"{name} must be an ISO-8601 time, got {bounds.shown(value)}"
        raise TraceFormatError(path, line, rule) from None


def _tools(
    path: Path, line: int, tools: list[dict[str, Any]]
) -> tuple[list[Interval], float, float, tuple[Interval, ...]]:
    """Tool intervals, the latency of tools with no start time, the sum of all latencies,
    and the sub-agent tool calls (``tracelab_graph``) with both times."""
    intervals: list[Interval] = []
    agent: list[Interval] = []
    loose = total = 0.0
    for tool in tools:
        name = _tool_name(path, line, tool)
        start = _stamp(path, line, "tools[].emitted_at", tool.get("emitted_at"))
        end = _stamp(path, line, "tools[].result_at", tool.get("result_at"))
        wall = tool.get("tool_wall_latency_ms")
        latency = None if wall is None else json_number(
            path, line, "tool_wall_latency_ms", wall, maximum=bounds.MAX_WAIT_MS)
        if start is not None and end is not None:
            if end < start:
                raise TraceFormatError(path, line, "a tool's result_at is before its emitted_at")
            latency = end - start if latency is None else latency
            intervals.append((start, end))
            if name in SUBAGENT_TOOLS:
                agent.append((start, end))
        elif start is not None and latency is not None:
            intervals.append((start, start + latency))
        elif latency is not None:
            loose += latency
        total += latency or 0.0
    return intervals, loose, total, tuple(agent)


def _tool_name(path: Path, line: int, tool: dict[str, Any]) -> str | None:
    """A tool's name, a string or absent: it decides whether the call is a sub-agent's."""
    name = tool.get("tool_name")
    if name is not None and not isinstance(name, str):
        raise TraceFormatError(path, line, f"tools[].tool_name must be a string, "
                                           f"got {bounds.shown(name)}")
    return name


def _first(rows: list[_Row]) -> _Row:
    return min(rows, key=lambda r: (r.round_index, r.line))


def _session_start(path: Path, rows: list[_Row]) -> float:
    first = _first(rows)
    if first.start_ms is None:
        raise TraceFormatError(
            path, first.line, "first round of a session has no timestamp (timing_events or tools)"
        )
    return first.start_ms


def _unit_ids(keys: list[tuple[str, str | None, str]]) -> dict[tuple[str, str | None, str], str]:
    """Unique unit ids: the session_id, suffixed ``~k`` past the first session that has it,
    never a real ``session_id`` of the file (docs/trace-bounds.md, "Unique ids")."""
    real = {key[2] for key in keys}
    taken: set[str] = set()
    return {key: step_aside(key[2], taken, real) for key in keys}


def _build_unit(uid: str, rows: list[_Row], arrival: float) -> Unit:
    ordered = sorted(rows, key=lambda r: (r.round_index, r.line))
    last = len(ordered) - 1
    rounds = tuple(
        Round(
            request_id(uid, k),
            uid,
            k,
            arrival,
            r.prefix_len,
            r.input_len,
            r.output_len,
            0.0 if k == last else r.tool_wait_ms,
        )
        for k, r in enumerate(ordered)
    )
    first = ordered[0]
    models = sorted({r.model for r in ordered if r.model})
    meta = {
        "provider": first.identity[0],
        "project": first.identity[1],
        "source_session_id": first.identity[2],
        "model": first.model,
        "models": models,
        "source_lines": [r.line for r in ordered],
    }
    return Unit(uid, "session", arrival, rounds, meta)
