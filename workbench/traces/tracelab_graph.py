"""Sub-agent sessions of a TraceLab round trace: by ``parent_session_id`` fields (rule 1)
or by containment in a ``Task``/``Agent`` tool call (rule 2); where each hangs and
which round joins it: docs/session-graphs.md, "tracelab".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workbench.errors import TraceFormatError
from workbench.records import Spawn, Unit
from workbench.traces.graph import dangling, subtree_ends

SUBAGENT_TOOLS = frozenset(("Task", "Agent"))
Interval = tuple[float, float]
Key = tuple[str, str | None, str]


def _ordered(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (r.round_index, r.line))


def _span(rows: list[Any]) -> Interval | None:
    rows = _ordered(rows)
    start = rows[0].start_ms
    ends = [r.end_ms for r in rows if r.end_ms is not None]
    return None if start is None or not ends else (start, max(ends))


def attach_subagents(
    path: Path, units: list[Unit], sessions: dict[Key, list[Any]], names: dict[Key, str]
) -> tuple[Unit, ...]:
    """``units`` (one per session, in ``sessions`` order) with ``spawn`` set on children."""
    keys = list(sessions)
    spawns: dict[Key, Spawn] = {}
    named: set[Key] = set()  # children by rule 1: their join is inferred from timing
    by_name = {names[k]: k for k in keys}
    calls = _agent_calls(sessions)
    for key in keys:
        got = _by_field(path, key, sessions, names)
        if got is not None:
            named.add(key)
        got = got or _by_containment(key, sessions, names, calls.get(key[:2], []))
        if got is not None:
            spawns[key] = got
    ends = subtree_ends({k: span[1] for k in keys if (span := _span(sessions[k])) is not None},
                        {k: by_name[sp.parent_id] for k, sp in spawns.items()})
    for key in named:
        edge = spawns[key]
        spawns[key] = dataclasses.replace(edge, join_round=_timed_join(
            sessions[by_name[edge.parent_id]], edge.round_idx, ends.get(key)))
    out = []
    for key, unit in zip(keys, units, strict=True):
        sp = spawns.get(key)
        out.append(unit if sp is None else dataclasses.replace(unit, spawn=sp))
    return tuple(out)


def _by_field(path: Path, key: Key, sessions: dict[Key, list[Any]],
              names: dict[Key, str]) -> Spawn | None:
    rows = _ordered(sessions[key])
    named = [(r.line, r.parent_session_id) for r in rows if r.parent_session_id is not None]
    if not named:
        return None
    line, parent_sid = named[0]
    for other_line, other in named[1:]:
        if other != parent_sid:
            raise TraceFormatError(path, other_line, f"parent_session_id {other!r} differs from "
                                   f"{parent_sid!r} (line {line}) in the same session")
    pkey = (key[0], key[1], parent_sid)
    if pkey not in sessions or pkey == key:
        raise dangling(path, line, names[key], parent_sid, "parent_session_id",
                       f"the other sessions of provider {key[0]!r}, project {key[1]!r}")
    start = rows[0].start_ms or 0.0
    prow = _ordered(sessions[pkey])
    k = max((i for i, r in enumerate(prow) if (r.start_ms or 0.0) <= start), default=0)
    delay = max(start - (prow[k].end_ms or start), 0.0)
    return Spawn(names[pkey], k, "round_end", delay, None, line)  # join: _timed_join


def _timed_join(parent_rows: list[Any], k: int, done: float | None) -> int | None:
    """Rule 1's join: the parent's first round after ``k`` that started at or after the
    child's whole subtree ended (``done``; in replay the join waits for all of it),
    else none; without timing, the parent's next round."""
    prow = _ordered(parent_rows)
    if done is None:
        return k + 1 if k + 1 < len(prow) else None
    return next((i for i in range(k + 1, len(prow))
                 if prow[i].start_ms is not None and prow[i].start_ms >= done), None)


#: a sub-agent tool call: its interval, its session and the round that made it
_Call = tuple[float, float, Key, int]


def _agent_calls(sessions: dict[Key, list[Any]]) -> dict[tuple[str, str | None], list[_Call]]:
    """Every ``Task``/``Agent`` call by ``(provider, project)``, in session order, then
    round order, then the round's order: each session looks through its own group's calls
    once, not through every session's rounds (that was quadratic in sessions: 3,000
    sessions of one project took minutes)."""
    out: dict[tuple[str, str | None], list[_Call]] = {}
    for pkey, prows in sessions.items():
        for k, row in enumerate(_ordered(prows)):
            for a, b in row.agent_tools:
                out.setdefault(pkey[:2], []).append((a, b, pkey, k))
    return out


def _by_containment(key: Key, sessions: dict[Key, list[Any]], names: dict[Key, str],
                    calls: list[_Call]) -> Spawn | None:
    """The narrowest call of another session of the group whose interval holds this
    session's span (the first such call on a tie)."""
    if not calls:
        return None
    span = _span(sessions[key])
    if span is None:
        return None
    best: tuple[float, Key, int, float] | None = None
    for a, b, pkey, k in calls:
        if pkey != key and a <= span[0] and span[1] <= b and (best is None or b - a < best[0]):
            best = (b - a, pkey, k, a)
    if best is None:
        return None
    _, pkey, k, emitted = best
    n = len(sessions[pkey])
    line = _ordered(sessions[key])[0].line
    return Spawn(names[pkey], k, "round_end", max(span[0] - emitted, 0.0),
                 k + 1 if k + 1 < n else None, line)
