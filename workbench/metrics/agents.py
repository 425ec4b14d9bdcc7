"""Agent-level metrics per task (a root unit and its sub-agents), and the concurrency a run
really reached (docs/metrics.md, "Agent tasks and caps"; docs/session-graphs.md).

A task's ``makespan_ms`` runs from its root's admission to its root's lifecycle
``end_ns`` (stamped after every descendant ended); ``engine_ms`` is the union of its
requests' dispatch → end, ``tool_ms`` the rest; ``width`` is the most children one unit
spawned, ``depth`` the longest chain of spawns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workbench.metrics.distribution import describe
from workbench.records import RequestRecord, RunManifest

NS_PER_MS = 1e6


def peak_in_flight(spans: Iterable[tuple[int, int]]) -> int:
    """The most intervals open at once (an end at t closes before a start at t)."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    cur = peak = 0
    for _, step in events:
        cur += step
        peak = max(peak, cur)
    return peak


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def concurrency(
    spans: list[tuple[int, int]], manifest: RunManifest
) -> dict[str, Any] | None:
    """Peak tasks and streams (``spans``: the measured requests' dispatch → end), and
    whether the configured caps ever bound; ``None`` when the run set no cap."""
    arrival = manifest.section("arrival")
    cap, streams_cap = arrival.get("max_concurrency"), arrival.get("max_streams")
    if cap is None and streams_cap is None:
        return None
    peak_tasks = manifest.peak_active_units
    out: dict[str, Any] = {"max_concurrency": cap, "max_streams": streams_cap,
                           "peak_tasks": peak_tasks, "peak_streams": peak_in_flight(spans)}
    warnings = []
    if cap is not None and isinstance(peak_tasks, int) and peak_tasks < cap:
        warnings.append(f"units never reached max_concurrency {cap} (at most {peak_tasks} at "
                        "once): the cap changed nothing")
    if streams_cap is not None and out["peak_streams"] < streams_cap:
        warnings.append(f"requests never reached max_streams {streams_cap} (at most "
                        f"{out['peak_streams']} in flight): the cap changed nothing")
    out["warnings"] = warnings
    return out


def agent_summary(
    records: list[RequestRecord], lifecycle: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Task-level percentiles, fan-out and TTFT by depth; ``None`` without a graph."""
    tasks = per_task(records, lifecycle)
    if not tasks:
        return None
    by_depth: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if (not r.warmup and r.status == "ok" and r.first_token_ns is not None
                and r.dispatch_ns is not None):
            by_depth[int(r.extra.get("depth", 0))].append(
                (r.first_token_ns - r.dispatch_ns) / NS_PER_MS)
    return {
        "tasks": len(tasks),
        **{key: describe(t[key] for t in tasks)
           for key in ("makespan_ms", "engine_ms", "tool_ms", "width", "depth", "units")},
        "ttft_ms_by_depth": {str(d): describe(v) for d, v in sorted(by_depth.items())},
    }


def per_task(
    records: list[RequestRecord], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One dict per agent task (a root's lifecycle row and its descendants')."""
    recs: dict[tuple[str, int], list[RequestRecord]] = defaultdict(list)
    for r in records:
        if not r.warmup and r.extra.get("task_id") is not None:
            recs[(str(r.extra["task_id"]), _loop(r.request_id))].append(r)
    units: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("task_id") is not None and not row.get("warmup"):
            units[(str(row["task_id"]), int(row.get("loop", 0)))].append(row)
    out = []
    for key, members in units.items():
        root = next((m for m in members if m.get("parent_unit_id") is None), None)
        if root is None:
            continue
        makespan = root["end_ns"] - root["admitted_ns"]
        engine = _union_ns([(r.dispatch_ns, r.end_ns) for r in recs.get(key, [])
                            if r.dispatch_ns is not None and r.end_ns is not None])
        kids: dict[str, int] = defaultdict(int)
        for m in members:
            if m.get("parent_unit_id") is not None:
                kids[str(m["parent_unit_id"])] += 1
        out.append({
            "task_id": key[0], "loop": key[1], "units": len(members),
            "makespan_ms": makespan / NS_PER_MS, "engine_ms": engine / NS_PER_MS,
            "tool_ms": (makespan - engine) / NS_PER_MS,
            "width": max(kids.values(), default=0),
            "depth": max(int(m.get("depth", 0)) for m in members),
        })
    return out


def _loop(request_id: str) -> int:
    stem, sep, loop = request_id.rpartition("~")
    return int(loop) if sep and stem and loop.isdigit() else 0


def column_spans(df: Any) -> list[tuple[int, int]]:
    """Dispatch → end of every row of a ``metrics.columns.Columns`` that has both."""
    d, dv = df.ints("dispatch_ns")
    e, ev = df.ints("end_ns")
    ok = dv & ev
    return list(zip(d[ok].tolist(), e[ok].tolist(), strict=True))


def has_tasks(lifecycle: Iterable[Mapping[str, Any]]) -> bool:
    return any(row.get("task_id") is not None for row in lifecycle)


def budget_section(
    manifest: RunManifest, lifecycle: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """``arrival.session_budget_s`` and the units it truncated (lifecycle reason
    ``budget``; left out of ``breakdown.per_session``); ``None`` without a budget."""
    budget = manifest.section("arrival").get("session_budget_s")
    if budget is None:
        return None
    cut = sorted(str(r.get("unit_id")) for r in lifecycle
                 if r.get("reason") == "budget" and not r.get("warmup"))
    return {"budget_s": budget, "truncated_units": len(cut), "units": cut[:100]}
