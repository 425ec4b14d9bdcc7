"""Sub-agent links of a Dynamo request trace: a session whose requests carry
``agent_context.parent_session_id`` hangs under that session, placed by
``agent_context.dependency`` when given, else by timing (docs/session-graphs.md,
"dynamo"). A ``parent_session_id`` naming no session is an error at the child's first line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workbench.errors import TraceFormatError
from workbench.records import Spawn, SpawnTrigger, Unit
from workbench.traces import bounds
from workbench.traces._io import wait_ms
from workbench.traces.graph import dangling, subtree_ends

RELATION = "subagent"
TRIGGERS: dict[str, SpawnTrigger] = {"request_start": "round_start", "request_end": "round_end"}


def attach(path: Path, units: list[Unit], sessions: dict[str, list[Any]]) -> list[Unit]:
    """``units`` with ``spawn`` set on every child session (``sessions``: requests in
    received order, by session id)."""
    done = subtree_ends({sid: max(_end(r) for r in reqs) for sid, reqs in sessions.items()},
                        {sid: reqs[0].parent_session_id for sid, reqs in sessions.items()})
    out = []
    for u in units:
        reqs = sessions[u.unit_id]
        parent = reqs[0].parent_session_id
        if parent is None:
            out.append(u)
            continue
        first = reqs[0]
        if parent not in sessions:
            raise dangling(path, first.line, u.unit_id, parent, "parent_session_id")
        dep = next(((r.line, r.dependency) for r in reqs if r.dependency), None)
        spawn = (_explicit(path, dep[0], dep[1], parent, sessions[parent]) if dep
                 else _timed(first.line, reqs, sessions[parent], done[u.unit_id]))
        out.append(dataclasses.replace(u, spawn=dataclasses.replace(spawn, line=first.line)))
    return out


def _index(path: Path, line: int, key: str, rid: Any, parent: str, reqs: list[Any]) -> int:
    for k, r in enumerate(reqs):
        if r.request_id == str(rid):
            return k
    raise TraceFormatError(path, line, f"dependency.{key} {rid!r} is no request of the parent "
                           f"session {parent!r}")


def _explicit(path: Path, line: int, dep: dict[str, Any], parent: str, reqs: list[Any]) -> Spawn:
    relation = dep.get("relation", RELATION)
    if relation != RELATION:
        raise TraceFormatError(path, line, f"dependency.relation {relation!r} is not understood "
                               f"(known: {RELATION!r}); refusing to guess what it means")
    if dep.get("parent_request_id") is None:
        raise TraceFormatError(path, line, "dependency needs parent_request_id")
    k = _index(path, line, "parent_request_id", dep["parent_request_id"], parent, reqs)
    wire = dep.get("trigger", "request_end")
    if wire not in TRIGGERS:
        raise TraceFormatError(path, line, f"dependency.trigger must be one of "
                               f"{', '.join(TRIGGERS)}, got {bounds.shown(wire)}")
    delay = dep.get("delay_ms")
    delay_ms = 0.0 if delay is None else wait_ms(path, line, "dependency.delay_ms", delay)
    join = dep.get("join_request_id")
    j = None if join is None else _index(path, line, "join_request_id", join, parent, reqs)
    if j is not None and j <= k:
        raise TraceFormatError(path, line, "dependency.join_request_id must come after "
                               "parent_request_id in the parent session")
    return Spawn(parent, k, TRIGGERS[wire], delay_ms, j)


def _end(r: Any) -> float:
    return float(r.received_ms + (r.total_ms or 0.0))


def _timed(line: int, reqs: list[Any], parent_reqs: list[Any], done: float) -> Spawn:
    """The spawn and join of a child without ``dependency`` (module doc); ``done``: when
    its whole subtree ended (``graph.subtree_ends``)."""
    t = reqs[0].received_ms
    k = max((i for i, r in enumerate(parent_reqs) if r.received_ms <= t), default=0)
    pk = parent_reqs[k]
    if pk.total_ms is not None and t >= _end(pk):
        trigger: SpawnTrigger = "round_end"
        delay = t - _end(pk)
    else:
        trigger, delay = "round_start", max(t - pk.received_ms, 0.0)
    j = next((i for i in range(k + 1, len(parent_reqs)) if parent_reqs[i].received_ms >= done),
             None)
    return Spawn(reqs[0].parent_session_id, k, trigger, delay, j, line)
