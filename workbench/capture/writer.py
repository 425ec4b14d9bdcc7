"""A conversation as kv-cache-tester's captured format, written atomically (docs/capture.md)."""

from __future__ import annotations

import contextlib
import glob
from pathlib import Path
from typing import Any

import orjson

from workbench import redact
from workbench import safe_write as safe
from workbench.capture.blocks import BLOCK_SIZE
from workbench.capture.sessions import Agent, Conversation, Turn

#: what ``hash_id_scope`` says: ids are numbered per file
SCOPE = "local"


def conversation_id(conv: Conversation, prefix: str) -> str:
    return f"{prefix}{conv.number:04d}"


def _done(agent: Agent) -> list[Turn]:
    return [t for t in agent.turns if t.done]


def _models(turns: list[Turn]) -> list[str]:
    return list(dict.fromkeys(redact.text(t.model) for t in turns))


def document(conv: Conversation, prefix: str = "conv_") -> dict[str, Any] | None:
    """The file's JSON document, or None while the conversation has no done request."""
    root = conv.root
    if not _done(root) and not any(_done(a) for a in conv.agents):
        return None
    ordered = sorted((t for a in conv.agents for t in _done(a)), key=lambda t: t.sent)
    numbers = _agent_numbers(conv)
    origin = min((t.sent for t in ordered), default=0.0)
    if _done(root):
        origin = _done(root)[0].sent
    doc: dict[str, Any] = {
        "id": conversation_id(conv, prefix),
        "models": _models(ordered),
        "block_size": BLOCK_SIZE,
        "hash_id_scope": SCOPE,
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": _requests(root, origin, numbers),
    }
    unknown = sum(t.prefix_unknown for t in ordered)
    if unknown:  # Responses requests whose earlier items the capture never saw
        doc["requests_prefix_unknown"] = unknown
    if conv.not_recorded:  # relayed and not recorded (an error answer, a cut stream …)
        doc["requests_not_recorded"] = conv.not_recorded
    return doc


def _agent_numbers(conv: Conversation) -> dict[int, int]:
    """Sub-agents numbered 1, 2, … in order of their first done request."""
    subs = [a for a in conv.agents if a.parent is not None and _done(a)]
    subs.sort(key=lambda a: _done(a)[0].sent)
    return {id(a): k for k, a in enumerate(subs, 1)}


def _request(turn: Turn, origin: float) -> dict[str, Any]:
    assert turn.ended is not None
    return {
        "t": round(turn.sent - origin, 6),
        "type": "s" if turn.stream else "n",
        "model": redact.text(turn.model),
        "in": turn.prompt_tokens,
        "out": turn.output_tokens,
        "hash_ids": turn.hash_ids,
        "input_types": turn.input_types,
        "output_types": turn.output_types,
        "stop": turn.stop,
        "api_time": round(turn.ended - turn.sent, 6),
        "think_time": round(turn.think_time, 6),
    }


def _requests(agent: Agent, origin: float, numbers: dict[int, int]) -> list[dict[str, Any]]:
    rows: list[tuple[float, dict[str, Any]]] = [
        (t.sent, _request(t, origin)) for t in _done(agent)
    ]
    for child in agent.children:
        turns = _done(child)
        if not turns:
            continue
        start = turns[0].sent
        end = max(t.ended or start for t in turns)
        marker = {
            "t": round(start - origin, 6),
            "type": "subagent",
            "agent_id": f"agent_{numbers[id(child)]:03d}",
            "subagent_type": "unknown",
            "duration_ms": round((end - start) * 1000),
            "status": "completed" if not child.inflight else "running",
            "models": _models(turns),
            "tool_tokens": 0,
            "system_tokens": 0,
            "requests": _requests(child, start, numbers),
        }
        rows.append((start, marker))
    rows.sort(key=lambda r: r[0])
    return [r for _, r in rows]


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` at ``path`` through a temporary file renamed over it (no fsync)."""
    safe.write_file(path, orjson.dumps(doc))  # NAME.tmp, never through a link


def remove_stale(directory: Path, prefix: str = "conv_") -> None:
    """Temporary files a killed capture left behind (``write_atomic``'s, never renamed)."""
    for tmp in directory.glob(safe.temp_of(f"{glob.escape(prefix)}*.json").name):
        with contextlib.suppress(OSError):
            tmp.unlink()
