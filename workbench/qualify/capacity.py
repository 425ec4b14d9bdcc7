"""The smallest capacity change that brings a row's preemptions into range.

``propose_capacity`` searches one capacity knob of a row (``num_blocks`` by default) on
this tree, in virtual time, for the value nearest the row's own whose run preempts within
the row's bounds, no request twice, every request served (docs/parity.md, "The capacity
edge"). The change is returned, not applied (``apply_capacity`` writes it into the spec,
the same for both sides).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from workbench.qualify.spec import ParitySpec, Row, Side

MAX_PROBES = 24


def probe_row(spec: ParitySpec, row: Row, knob: str, value: int) -> dict[str, Any]:
    """One virtual replay of ``row`` with ``knob`` = ``value`` (this tree, in process)."""
    from workbench.executors.virtual import simulate

    side = spec.baseline if spec.baseline.kind == "engine" else Side("tree")
    cfg = spec.run_config(row, side)
    cfg["target"]["engine"][knob] = value
    result = simulate(cfg)
    per = [int(r.extra.get("preemptions", 0)) for r in result.records]
    return {"value": value, "preemptions": sum(per), "most_per_request": max(per, default=0),
            "not_ok": sum(1 for r in result.records if r.status != "ok")}  # fmt: skip


def propose_capacity(spec: ParitySpec, row_name: str, knob: str = "num_blocks", *,
                     max_probes: int = MAX_PROBES,
                     probe: Callable[[int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The search of the module doc; ``probe`` (value -> figures) replaces the replay."""
    row = next((r for r in spec.rows if r.name == row_name), None)
    if row is None:
        raise ValueError(f"no row {row_name!r}; rows: {[r.name for r in spec.rows]}")
    start = row.engine.get(knob)
    if type(start) is not int or start < 1:
        raise ValueError(f"row {row_name}: engine.{knob} must be a positive integer to search")
    lo, hi = row.preemptions
    seen: dict[int, dict[str, Any]] = {}
    run = probe or (lambda v: probe_row(spec, row, knob, v))

    def at(v: int) -> dict[str, Any]:
        if v not in seen:
            if len(seen) >= max_probes:
                raise _Exhausted
            seen[v] = run(v)
        return seen[v]

    def fits(f: dict[str, Any]) -> bool:
        return f["not_ok"] == 0 and lo <= f["preemptions"] <= hi and f["most_per_request"] <= 1

    found: int | None = None
    note = ""
    try:
        first = at(start)
        if fits(first):
            found = start
        elif first["preemptions"] < lo and first["not_ok"] == 0:
            found, note = _down(at, start, lo)
        elif first["not_ok"] == 0 or first["preemptions"] > hi:
            found, note = _up(at, start, hi)
        else:
            note = "requests fail at the row's own capacity; no search"
    except _Exhausted:
        note = f"stopped after {max_probes} replays"
    if found is not None and not fits(at(found)):
        f = at(found)
        note = (note or "") + (f"; at the edge {knob}={found} gives {f['preemptions']} "
                               f"preemptions (most per request {f['most_per_request']}, "
                               f"{f['not_ok']} not ok)")
        found = None
    if found is None:  # preemptions are not monotone: any value probed that fits, nearest
        fitting = sorted((abs(v - start), v) for v, f in seen.items() if fits(f))
        if fitting:
            found = fitting[0][1]
            note += f"; the nearest value probed that fits: {found}"
        else:
            note += "; none in range"
    probes = [seen[v] for v in seen]
    return {"row": row_name, "knob": knob, "from": start, "to": found,
            "change": None if found is None else found - start,
            "preemptions": None if found is None else seen[found]["preemptions"],
            "bounds": [lo, hi], "probes": probes, "note": note.strip("; ")}  # fmt: skip


class _Exhausted(Exception):
    pass


def resolution(start: int) -> int:
    """How close the bisection gets to the edge: 1/256 of the row's own value (a block
    count is not a fact to 1 in 50,000; the probes it saves are whole replays)."""
    return max(1, start // 256)


def _narrow(at: Callable[[int], dict[str, Any]], good: int, bad: int, start: int,
            fits: Callable[[dict[str, Any]], bool]) -> int:
    """Bisect between ``good`` (fits) and ``bad`` (does not) to ``resolution(start)``."""
    while abs(good - bad) > resolution(start):
        mid = (good + bad) // 2
        if fits(at(mid)):
            good = mid
        else:
            bad = mid
    return good


def _down(at: Callable[[int], dict[str, Any]], start: int, lo: int) -> tuple[int | None, str]:
    """The largest value below ``start`` with at least ``lo`` preemptions, every request ok."""
    good, bad = None, start  # good: preempts enough; bad: too few
    v = start
    while v > 1:
        v //= 2
        f = at(v)
        if f["not_ok"]:  # too small for some request: the floor; bisect above it
            floor = v
            while bad - floor > 1:
                mid = (floor + bad) // 2
                g = at(mid)
                if g["not_ok"]:
                    floor = mid
                elif g["preemptions"] >= lo:
                    good = mid
                    break
                else:
                    bad = mid
            if good is None:
                return None, "no capacity preempts without failing a request"
            break
        if f["preemptions"] >= lo:
            good = v
            break
        bad = v
    if good is None:
        return None, "no smaller capacity preempts"
    return _narrow(at, good, bad, start, lambda g: g["preemptions"] >= lo and not g["not_ok"]), ""


def _up(at: Callable[[int], dict[str, Any]], start: int, hi: int) -> tuple[int | None, str]:
    """The smallest value above ``start`` with at most ``hi`` preemptions, every request ok."""
    bad, good = start, None
    v = start
    for _ in range(20):
        v *= 2
        f = at(v)
        if calm(f, hi):
            good = v
            break
        bad = v
    if good is None:
        return None, "no larger capacity calms the preemptions"
    return _narrow(at, good, bad, start, lambda g: calm(g, hi)), ""


def calm(f: dict[str, Any], hi: int) -> bool:
    """No flood, no request preempted twice, every request served."""
    return f["preemptions"] <= hi and f["most_per_request"] <= 1 and not f["not_ok"]


def apply_capacity(spec_data: dict[str, Any], row_name: str, knob: str,
                   value: int) -> dict[str, Any]:  # fmt: skip
    """A copy of a spec's data with one row's capacity knob set (for both sides)."""
    out = copy.deepcopy(spec_data)
    for row in out.get("rows", []):
        if row.get("name") == row_name:
            row["engine"][knob] = value
            return out
    raise ValueError(f"no row {row_name!r} in the spec")
