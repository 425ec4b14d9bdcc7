"""A sweep's points by configuration, and the capacity of each configuration.

Every combination of the non-load axes' values is one configuration: one curve in load
order and one capacity (docs/sweeps.md, "Configurations" and "Capacity").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

import workbench.sweeps.spec as spec_mod
from workbench.sweeps.serve import SERVE_PREFIX
from workbench.sweeps.store import Sweep

#: axes that are load, in the order one is chosen as a sweep's load axis
LOAD_AXES = ("arrival.rate", "arrival.max_concurrency")
RATE_AXIS = "arrival.rate"
THROUGHPUT = "request_throughput_rps"


def load_axis_of(axes: Sequence[str], capacity: Mapping[str, Any] | None = None) -> str | None:
    """The load axis, or None (docs/sweeps.md, "Configurations")."""
    if capacity and capacity.get("axis"):
        return str(capacity["axis"])
    for axis in LOAD_AXES:
        if axis in axes:
            return axis
    client = [a for a in axes if not a.startswith(SERVE_PREFIX)]
    return client[-1] if client else None


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass
class Group:
    """One configuration: the values of every axis but the load, and its finished points
    in load order (ties: point index)."""

    params: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    #: its points with a numeric load that did not finish (an interrupted sweep), load order
    unfinished: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return spec_mod.label(self.params)


def load_axis(sweep: Sweep) -> str | None:
    return load_axis_of(sweep.axes, sweep.capacity)


def groups(sweep: Sweep) -> list[Group]:
    """The sweep's configurations in the order their first point was listed, each with its
    finished points that have a numeric load."""
    axis = load_axis(sweep)
    others = [a for a in sweep.axes if a != axis]
    out: dict[str, Group] = {}
    for p in sweep.points:
        params = p.get("params") or {}
        key = {a: params.get(a) for a in others}
        group = out.setdefault(repr(sorted(key.items(), key=lambda kv: kv[0])), Group(key))
        if p.get("status") == "done" and (axis is None or _numeric(params.get(axis))):
            group.points.append(p)
        elif axis is not None and _numeric(params.get(axis)):
            group.unfinished.append(p)
    for g in out.values():
        if axis is not None:
            g.points.sort(key=lambda p: (p["params"][axis], p["index"]))
            g.unfinished.sort(key=lambda p: (p["params"][axis], p["index"]))
    return list(out.values())


@dataclass
class Capacity:
    """A configuration's capacity. ``status``: ``held`` (up to ``point``, broke at
    ``broken``), ``above`` (at every point), ``below`` (broke at the lowest load) or
    ``none``; ``again``: points above the first break that held (not monotone)."""

    group: Group
    axis: str | None
    status: str
    point: dict[str, Any] | None = None
    broken: dict[str, Any] | None = None
    again: list[dict[str, Any]] = field(default_factory=list)
    found_by_search: bool = False

    @property
    def label(self) -> str:
        return self.group.label

    @property
    def sustained(self) -> float | None:
        """The capacity: requests/s delivered at the highest load that held."""
        if self.point is None:
            return None
        v = (self.point.get("metrics") or {}).get(THROUGHPUT)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def offered(self) -> Any:
        """The load value the capacity was sustained at (the swept axis)."""
        return None if self.point is None or self.axis is None else self.point["params"][self.axis]

    @property
    def unfinished_above(self) -> list[dict[str, Any]]:
        """Of an ``above`` capacity, the points at a higher load that did not finish (an
        interrupted sweep): the range it held over was not all tried."""
        if self.status != "above" or self.axis is None:
            return []
        axis, top = self.axis, float(self.offered)
        return [p for p in self.group.unfinished if float(p["params"][axis]) > top]


def _held(p: Mapping[str, Any]) -> bool:
    return bool((p.get("slo") or {}).get("held"))


def search_of(search: Mapping[str, Any], params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A configuration's own capacity search (its entry of ``configurations``, if any)."""
    if "configurations" not in search:
        return search
    key = json_params(params)
    return next((c for c in search["configurations"]
                 if json_params(c.get("params") or {}) == key), {})


def json_params(params: Mapping[str, Any]) -> dict[str, Any]:
    import json

    return dict(json.loads(json.dumps(dict(params), default=str)))


def capacities(sweep: Sweep) -> list[Capacity]:
    """Each configuration's capacity, in ``groups`` order (docs/sweeps.md, "Capacity")."""
    axis = load_axis(sweep)
    search = sweep.capacity or {}
    out = []
    for g in groups(sweep):
        pts = g.points
        if axis is None or not pts:
            out.append(Capacity(g, axis, "none"))
            continue
        verdicts = [_held(p) for p in pts]
        first_broken = verdicts.index(False) if False in verdicts else len(pts)
        again = [p for p, ok in zip(pts[first_broken:], verdicts[first_broken:],
                                    strict=True) if ok]
        if first_broken == 0:
            out.append(Capacity(g, axis, "below", broken=pts[0], again=again))
        elif first_broken == len(pts):
            out.append(Capacity(g, axis, "above", point=pts[-1]))
        else:
            point = pts[first_broken - 1]
            own = search_of(search, g.params)
            found = own.get("status") == "found" and point["params"][axis] == own.get("value")
            out.append(Capacity(g, axis, "held", point=point, broken=pts[first_broken],
                                again=again, found_by_search=found))
    return out


@dataclass
class Best:
    """The configuration(s) that held up to the highest load (``leaders``: tied), and those
    that held at every point of a lower range (``unsure``: may be higher)."""

    leaders: list[Capacity]
    unsure: list[Capacity]


def best(caps: Sequence[Capacity]) -> Best | None:
    """The best configuration by the load held, not the delivered rate (docs/sweeps.md,
    "Capacity"); None when none held at any load."""
    held = [c for c in caps if c.point is not None and _numeric(c.offered)]
    if not held:
        return None
    top = max(float(c.offered) for c in held)
    leaders = [c for c in held if float(c.offered) == top]
    unsure = [c for c in held if c.status == "above" and float(c.offered) < top]
    return Best(leaders, unsure)


@dataclass
class Curve:
    """One configuration: label ("" when alone), rows in load order, capacity (or None)."""

    label: str
    frame: pd.DataFrame
    capacity: Capacity | None


def curves(sweep: Sweep) -> list[Curve]:
    """A curve per configuration, in the sweep's order, each in load order."""
    df = sweep.frame
    gs = groups(sweep)
    caps = capacities(sweep) if sweep.slo else [None] * len(gs)
    out = []
    for g, cap in zip(gs, caps, strict=True):
        order = [p["index"] for p in g.points]
        rows = (df.set_index("point", drop=False).loc[order].reset_index(drop=True)
                if order and not df.empty else df.iloc[0:0])
        out.append(Curve(g.label if len(gs) > 1 else "", rows, cap))
    return out


def in_load_order(sweep: Sweep) -> pd.DataFrame:
    """``sweep.frame`` per configuration, each in load order; points without a load last.
    Here, not beside the figures: the sweep command prints its table with it after a
    stop, and no plotting library is imported for a table (docs/sweeps.md, "Stopped")."""
    df = sweep.frame
    if df.empty:
        return df
    parts = [c.frame for c in curves(sweep)]
    seen = {int(i) for part in parts for i in part["point"]}
    parts.append(df[~df["point"].isin(seen)])
    return pd.concat([p for p in parts if not p.empty], ignore_index=True)
