"""Write a run's requests as a Dynamo request trace (``dynamo.request.trace.v1``).

The rows, their times and session ids: docs/trace-formats.md, ``dynamo``."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workbench.metrics.frame import as_records, output_token_counts
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.storage.rundir import RecordWriter

SCHEMA = "dynamo.request.trace.v1"
ToUnixMs = Callable[[int], float]
TOOL_CLASS = "workbench.tool_wait"


def _t0_unix_ms(manifest: RunManifest) -> float:
    started = manifest.started_at
    if isinstance(started, str):
        try:
            return dt.datetime.fromisoformat(started).timestamp() * 1000
        except ValueError:
            return 0.0
    return 0.0


def session_key(rec: RequestRecord) -> str:
    """The session id, made unique per closed-loop repeat (``~N`` request-id suffix)."""
    stem, sep, loop = rec.request_id.rpartition("~")
    return f"{rec.session_id}~{loop}" if sep and stem and loop.isdigit() else rec.session_id


def _hashes(rec: RequestRecord, block_size: int) -> tuple[int, list[int]]:
    """(input_length, hashes), checked against ``ceil(input_length / block_size)``."""
    hashes = rec.extra.get("input_sequence_hashes")
    if not isinstance(hashes, list):
        raise ValueError(f"{rec.request_id}: no extra['input_sequence_hashes'] to export")
    length = rec.sent_prompt_tokens or rec.prompt_tokens or 0
    if length < 1 or len(hashes) != math.ceil(length / block_size):
        raise ValueError(
            f"{rec.request_id}: {len(hashes)} hashes for a {length}-token prompt do not fit "
            f"block_size {block_size} (want ceil({length}/{block_size})); pass the run's block size"
        )
    return length, [int(h) for h in hashes]


def _request_row(
    rec: RequestRecord, sent_ns: int, block_size: int, at: ToUnixMs, tool_id: str | None,
    n_out: int, context: dict[str, Any],
) -> dict[str, Any]:
    length, hashes = _hashes(rec, block_size)
    end_ns = rec.end_ns if rec.end_ns is not None else sent_ns
    req: dict[str, Any] = {
        "request_id": rec.request_id,
        "input_tokens": rec.prompt_tokens if rec.prompt_tokens is not None else length,
        "output_tokens": n_out,  # metrics.frame.output_tokens, derived for every record
        "request_received_ms": at(sent_ns),
    }
    if rec.cached_tokens_reported and rec.cached_tokens is not None:  # unreported: not 0
        req["cached_tokens"] = rec.cached_tokens
    if rec.end_ns is not None:
        req["total_time_ms"] = (rec.end_ns - sent_ns) / 1e6
    calls = [{"id": tool_id}] if tool_id else []
    req["finish_reason_metadata"] = {"finish_reason": rec.finish_reason, "tool_calls": calls}
    req["replay"] = {
        "trace_block_size": block_size,
        "input_length": length,
        "input_sequence_hashes": hashes,
    }
    return _event("request_end", at(end_ns), context, request=req)


def _tool_row(
    rec: RequestRecord, ended_ns: int, next_ns: int, tool_id: str, at: ToUnixMs
) -> dict[str, Any]:
    start = at(ended_ns)
    end = min(start + float(rec.extra["tool_wait_ms"]), at(next_ns))
    end = max(end, start)
    tool = {"tool_call_id": tool_id, "tool_class": TOOL_CLASS, "status": "ok",
            "started_at_unix_ms": start, "ended_at_unix_ms": end,
            "duration_ms": end - start}  # fmt: skip
    return _event("tool_end", end, {"session_id": session_key(rec)}, tool=tool)


def _event(kind: str, at_ms: float, context: dict[str, Any], **body: Any) -> dict[str, Any]:
    """A trace row: the envelope every event shares, then its ``request`` or ``tool``."""
    return {"schema": SCHEMA, "event_type": kind, "event_time_unix_ms": at_ms,
            "event_source": "workbench", "agent_context": context, **body}  # fmt: skip


def _exported(result: RunResult, include_failed: bool) -> list[RequestRecord]:
    keep = [
        r
        for r in as_records(result)  # read back from disk when not kept in memory
        if not r.warmup and r.dispatch_ns is not None and (include_failed or r.status == "ok")
    ]
    return sorted(keep, key=lambda r: (r.dispatch_ns or 0, r.round_idx))


def dynamo_rows(
    result: RunResult,
    block_size: int,
    *,
    t0_unix_ms: float | None = None,
    include_failed: bool = False,
) -> list[dict[str, Any]]:
    """The trace rows, ordered by event time (request_end at its end, tool_end at its end)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    recs = _exported(result, include_failed)
    if not recs:
        return []
    origin = min(r.dispatch_ns for r in recs if r.dispatch_ns is not None)
    base = _t0_unix_ms(result.manifest) if t0_unix_ms is None else t0_unix_ms

    def at(ns: int) -> float:
        return base + (ns - origin) / 1e6

    nexts: dict[int, RequestRecord] = {}
    last_by_session: dict[str, RequestRecord] = {}
    for r in recs:  # in dispatch order: the previous round of r's session precedes it
        prev = last_by_session.get(session_key(r))
        if prev is not None:
            nexts[id(prev)] = r
        last_by_session[session_key(r)] = r
    contexts = _agent_contexts(recs)
    rows = []
    for r, n_out in zip(recs, output_token_counts(recs), strict=True):
        nxt = nexts.get(id(r))
        wait = float(r.extra.get("tool_wait_ms") or 0.0)
        tool = nxt is not None and wait > 0 and r.end_ns is not None
        tool_id = f"{r.request_id}:tool" if tool else None
        rows.append(_request_row(r, r.dispatch_ns or 0, block_size, at, tool_id, n_out,
                                 contexts[id(r)]))
        if tool_id is not None and nxt is not None and r.end_ns is not None:
            rows.append(_tool_row(r, r.end_ns, nxt.dispatch_ns or 0, tool_id, at))
    return sorted(rows, key=lambda row: row["event_time_unix_ms"])


def _agent_contexts(recs: list[RequestRecord]) -> dict[int, dict[str, Any]]:
    """Each record's ``agent_context``: its session and, for a sub-agent, its parent and
    dependency edge (left out when the parent request was not exported)."""
    by_round: dict[tuple[str, Any], str] = {(session_key(r), r.round_idx): r.request_id
                                            for r in recs}
    edges: dict[str, dict[str, Any]] = {}
    for r in recs:
        sp = r.extra.get("spawn")
        parent = r.extra.get("parent_unit_id")
        if not isinstance(sp, dict) or parent is None:
            continue
        pkey = _parent_key(r, str(parent))
        start = by_round.get((pkey, sp.get("parent_round")))
        if start is None:
            continue
        edge = {"relation": "subagent", "parent_request_id": start,
                "trigger": "request_start" if sp.get("trigger") == "round_start" else "request_end",
                "delay_ms": sp.get("delay_ms", 0.0)}
        join = by_round.get((pkey, sp.get("join_round")))
        if join is not None:
            edge["join_request_id"] = join
        edges[session_key(r)] = edge
    out: dict[int, dict[str, Any]] = {}
    for r in recs:
        ctx: dict[str, Any] = {"session_id": session_key(r)}
        parent = r.extra.get("parent_unit_id")
        if parent is not None:
            ctx["parent_session_id"] = _parent_key(r, str(parent))
            if session_key(r) in edges:
                ctx["dependency"] = edges[session_key(r)]
        out[id(r)] = ctx
    return out


def _parent_key(rec: RequestRecord, parent: str) -> str:
    """The parent's session key in the same closed-loop repeat as ``rec``."""
    key = session_key(rec)
    return parent + key[len(rec.session_id):]


def block_size_of(result: RunResult) -> int:
    """The block size the runner hashed prompts with, as the manifest records it."""
    engine = result.manifest.engine
    for value in (
        result.manifest.block_size,
        engine.get("block_size") if isinstance(engine, Mapping) else None,
    ):
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError("the manifest records no block_size; pass block_size=")


def export_dynamo(
    result: RunResult,
    path: str | Path,
    block_size: int | None = None,
    *,
    t0_unix_ms: float | None = None,
    include_failed: bool = False,
) -> Path:
    """Write ``dynamo_rows`` as JSONL to ``path`` (``block_size``: ``block_size_of``)."""
    path = Path(path)
    block_size = block_size if block_size is not None else block_size_of(result)
    with RecordWriter(path) as w:
        w.write_all(
            dynamo_rows(result, block_size, t0_unix_ms=t0_unix_ms, include_failed=include_failed)
        )
    return path
