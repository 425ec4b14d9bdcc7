"""Session graphs (docs/session-graphs.md): ``check_graph`` (run by ``load_trace`` on every
workload) refuses a graph that cannot run; ``window`` keeps whole agent tasks; the raw
CSV's graph columns and the canonical file's graph sidecar are read and written here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from workbench.errors import ConfigError, TraceFormatError
from workbench.plurals import counted
from workbench.records import Spawn, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import as_int, wait_ms

#: the raw session CSV's optional graph columns (docs/session-graphs.md)
CSV_COLUMNS = ("parent_session_id", "spawn_round", "spawn_trigger", "spawn_delay_ms",
               "join_round")
TRIGGERS = ("round_start", "round_end")
DETACHED = "none"
K = TypeVar("K", bound=Hashable)

WINDOW_RULE = (
    "contiguous: the agent tasks (root units, file order) from index offset to "
    "offset + count - 1, each with all its descendants"
)


def has_graph(workload: Workload) -> bool:
    return any(u.spawn is not None for u in workload.units)


def graph_summary(units: Sequence[Unit]) -> dict[str, int]:
    """``agent_tasks`` (roots), ``subagents``, ``max_depth`` (0: none; 1: sub-agents of a
    root ...), ``max_fanout`` (most children of one parent round), ``detached_subagents``."""
    by_id = {u.unit_id: u for u in units}
    depth: dict[str, int] = {}
    fan: dict[tuple[str, int], int] = {}
    for u in units:
        if u.spawn is not None:
            depth[u.unit_id] = _ancestry(u, by_id)[0]
            key = (u.spawn.parent_id, u.spawn.round_idx)
            fan[key] = fan.get(key, 0) + 1
    return {
        "agent_tasks": sum(u.spawn is None for u in units),
        "subagents": len(depth),
        "max_depth": max(depth.values(), default=0),
        "max_fanout": max(fan.values(), default=0),
        "detached_subagents": sum(u.spawn is not None and u.spawn.join_round is None
                                  for u in units),
    }


def dangling(path: Path, line: int, unit_id: str, parent_id: str, field: str = "parent",
             among: str = "the trace") -> TraceFormatError:
    """The one error for a child naming a parent that is not there (every reader's, and
    ``check_graph``'s): ``field`` is what named it, ``among`` where the parent was looked for."""
    return TraceFormatError(path, line, f"unit {unit_id!r}: {field} {parent_id!r} is not in "
                                        f"{among} (dangling parent)")


def check_graph(path: str | Path, workload: Workload) -> None:
    """Every child's parent exists, once, with the rounds its spawn names; no cycle
    (``TraceFormatError`` at the child's ``Spawn.line``)."""
    if not has_graph(workload):
        return
    path = Path(path)
    by_id: dict[str, Unit] = {}
    for u in workload.units:
        if u.unit_id in by_id:
            line = u.spawn.line if u.spawn is not None else 0
            raise TraceFormatError(path, line, f"unit id {u.unit_id!r} appears twice in a "
                                   "session graph (a parent must be named once)")
        by_id[u.unit_id] = u
    for u in workload.units:
        sp = u.spawn
        if sp is None:
            continue
        parent = by_id.get(sp.parent_id)
        if parent is None:
            raise dangling(path, sp.line, u.unit_id, sp.parent_id)
        n = len(parent.rounds)
        if not 0 <= sp.round_idx < n:
            raise TraceFormatError(path, sp.line, f"unit {u.unit_id!r} spawns at round "
                                   f"{sp.round_idx} of {sp.parent_id!r}, which has "
                                   f"{counted(n, 'round')}")
        if sp.join_round is not None and not sp.round_idx < sp.join_round < n:
            raise TraceFormatError(
                path, sp.line, f"unit {u.unit_id!r}: join before round {sp.join_round} of "
                f"{sp.parent_id!r} must come after the spawn round {sp.round_idx} and "
                f"within its {counted(n, 'round')}")
        if sp.delay_ms < 0:
            raise TraceFormatError(path, sp.line, f"unit {u.unit_id!r}: spawn delay must be "
                                   f">= 0, got {sp.delay_ms:g}")
    for u in workload.units:
        if _ancestry(u, by_id)[1]:
            line = u.spawn.line if u.spawn is not None else 0
            raise TraceFormatError(path, line, f"unit {u.unit_id!r} is its own ancestor "
                                   "(a cycle of parent links)")


def _ancestry(unit: Unit, by_id: Mapping[str, Unit]) -> tuple[int, bool]:
    """How many ancestors of ``unit`` are in ``by_id``, and whether its parent links loop."""
    depth, cur, seen = 0, unit, {unit.unit_id}
    while cur.spawn is not None and cur.spawn.parent_id in by_id:
        cur = by_id[cur.spawn.parent_id]
        if cur.unit_id in seen:
            return depth, True
        seen.add(cur.unit_id)
        depth += 1
    return depth, False


def subtree_ends(own: Mapping[K, float], parent: Mapping[K, K | None]) -> dict[K, float]:
    """Each node's *subtree end*: the latest ``own`` end of itself and its descendants
    (``parent``: None for a root), what a join inferred from timing must come after
    (docs/session-graphs.md). A parent outside ``own`` and a cycle are skipped."""
    out = dict(own)
    for node, end in own.items():
        seen = {node}
        up = parent.get(node)
        while up is not None and up in out and up not in seen:
            out[up] = max(out[up], end)
            seen.add(up)
            up = parent.get(up)
    return out


def descendants(unit: Unit, children: dict[str, list[Unit]]) -> Iterator[Unit]:
    """Every descendant of ``unit``, depth first, children in file order."""
    for c in children.get(unit.unit_id, ()):
        yield c
        yield from descendants(c, children)


def window(workload: Workload, offset: int, count: int | None) -> Workload:
    """Tasks ``offset .. offset + count - 1`` (file order) with their descendants, recorded
    in ``meta["window"]``; an ``offset`` past the last task is a ``ConfigError``."""
    # a stream's units are all roots: its window is a slice, drawn without the rest
    tops = workload.units if workload.streamed else [u for u in workload.units if u.spawn is None]
    if offset and offset >= len(tops):
        raise ConfigError(f"trace.offset {offset} is past the trace's {len(tops)} units "
                          f"({workload.source or 'the trace'})")
    end = len(tops) if count is None else offset + count
    chosen = tops[offset:end]
    if not workload.streamed and has_graph(workload):
        kids: dict[str, list[Unit]] = {}  # each parent id's children, in file order
        for u in workload.units:
            if u.spawn is not None:
                kids.setdefault(u.spawn.parent_id, []).append(u)
        keep = {id(u) for r in chosen for u in (r, *descendants(r, kids))}
        units = tuple(u for u in workload.units if id(u) in keep)
    else:
        units = tuple(chosen)
    meta: dict[str, Any] = dict(workload.meta)
    meta["window"] = {"offset": offset, "count": len(chosen), "requested": count,
                      "units_in_file": len(tops), "rule": WINDOW_RULE}
    return dataclasses.replace(workload, units=units, meta=meta)


def csv_spawn(path: Path, line: int, row: dict[str, str]) -> tuple[Any, ...] | None:
    """The graph columns of one CSV row: ``None`` for a root (no parent), else
    ``(parent, spawn_round, trigger, delay_ms, join)`` with ``join`` an int, ``None``
    (default: the parent's next round) or ``DETACHED``."""
    parent = row.get("parent_session_id", "").strip()
    rest = [c for c in CSV_COLUMNS[1:] if row.get(c, "").strip()]
    if not parent:
        if rest:
            raise TraceFormatError(path, line, f"{rest[0]} given without parent_session_id")
        return None
    if not row.get("spawn_round", "").strip():
        raise TraceFormatError(path, line, "parent_session_id needs spawn_round (the "
                               "parent's round that spawns this session)")
    at = as_int(path, line, "spawn_round", row["spawn_round"])
    trigger = row.get("spawn_trigger", "").strip() or "round_end"
    if trigger not in TRIGGERS:
        raise TraceFormatError(path, line, f"spawn_trigger must be one of "
                               f"{', '.join(TRIGGERS)}, got {bounds.shown(trigger)}")
    delay_text = row.get("spawn_delay_ms", "").strip()
    delay = wait_ms(path, line, "spawn_delay_ms", delay_text) if delay_text else 0.0
    join_text = row.get("join_round", "").strip()
    join: int | str | None = None
    if join_text == DETACHED:
        join = DETACHED
    elif join_text:
        join = as_int(path, line, "join_round", join_text)
    return parent, at, trigger, delay, join


def attach_spawns(units: list[Unit], spawns: dict[str, tuple[int, tuple[Any, ...]]]) -> list[Unit]:
    """Set ``spawn`` on the units ``spawns`` names (``unit_id -> (line, csv_spawn)``);
    a default join is the parent's next round, none when the spawn round is its last."""
    if not spawns:
        return units
    n_rounds = {u.unit_id: len(u.rounds) for u in units}
    out = []
    for u in units:
        got = spawns.get(u.unit_id)
        if got is None:
            out.append(u)
            continue
        line, (parent, at, trigger, delay, join) = got
        if join is None:
            join = at + 1 if at + 1 < n_rounds.get(parent, 0) else None
        elif join == DETACHED:
            join = None
        out.append(dataclasses.replace(u, spawn=Spawn(parent, at, trigger, delay, join, line)))
    return out


# -- the graph sidecar of a canonical file (``<stem>.graph.json``) ------------------------

def sidecar_rows(units: list[Unit] | tuple[Unit, ...]) -> list[dict[str, Any]]:
    """One object per child whose parent is among ``units`` (a child whose parent was
    left out becomes a root): what ``tracegen`` writes beside a canonical CSV."""
    ids = {u.unit_id for u in units}
    return [{"session_id": u.unit_id, "parent_session_id": u.spawn.parent_id,
             "spawn_round": u.spawn.round_idx, "spawn_trigger": u.spawn.trigger,
             "spawn_delay_ms": u.spawn.delay_ms, "join_round": u.spawn.join_round}
            for u in units if u.spawn is not None and u.spawn.parent_id in ids]


def attach_sidecar(path: Path, units: tuple[Unit, ...], rows: Any) -> tuple[Unit, ...]:
    """``units`` with the spawns of a graph sidecar (``sidecar_rows``) set; a malformed
    entry is a ``TraceFormatError`` naming the sidecar and the entry (1-based)."""
    if not isinstance(rows, list):
        raise TraceFormatError(path, 0, "graph sidecar must be a JSON array")
    by_id = {u.unit_id: k for k, u in enumerate(units)}
    out = list(units)
    for n, row in enumerate(rows, start=1):
        try:
            sid, parent = str(row["session_id"]), str(row["parent_session_id"])
            trigger = row.get("spawn_trigger", "round_end")
            join = row.get("join_round")
            spawn = Spawn(parent, int(row["spawn_round"]), trigger,
                          float(row.get("spawn_delay_ms", 0.0)),
                          None if join is None else int(join), n)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceFormatError(path, n, f"graph sidecar entry {n} is malformed "
                                   f"({type(exc).__name__}: {exc})") from None
        if trigger not in TRIGGERS:
            raise TraceFormatError(path, n, f"spawn_trigger must be one of "
                                   f"{', '.join(TRIGGERS)}, got {bounds.shown(trigger)}")
        if sid not in by_id:
            raise TraceFormatError(path, n, f"graph sidecar names session {sid!r}, which the "
                                   "canonical file does not have")
        out[by_id[sid]] = dataclasses.replace(out[by_id[sid]], spawn=spawn)
    return tuple(out)
