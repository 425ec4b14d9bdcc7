"""Tables of sweeps for the ``sweep`` notebook and reports (docs/sweeps.md, "Plots and tables")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

import workbench.catalogs.requests as catalog
import workbench.sweeps.spec as spec_mod
from workbench.catalogs.requests import SCALAR_LATENCY
from workbench.metrics.wording import slo_phrase, within_phrase
from workbench.report.headline import capacity_brief, sig, sweep_rounds_per_unit
from workbench.report.tables import named
from workbench.sweeps.groups import RATE_AXIS, capacities, in_load_order, load_axis
from workbench.sweeps.points import STATS
from workbench.sweeps.store import OVER_RATE, Sweep

#: what ``points_table`` shows, and its column names, with their units as every table
#: names a metric (``catalog.with_unit``: ``TTFT p90 (ms)``); the repeats only when a
#: point had more than one
POINT_SHOWN: tuple[tuple[str, str], ...] = (
    ("requests", "requests"),
    *((f"{m}_p90", catalog.with_unit(m, "p90")) for m in SCALAR_LATENCY),
    ("request_throughput_rps", "throughput (req/s)"), ("goodput_rps", "goodput (req/s)"),
    ("actual_prefix_hit_rate", "hit"), ("preemptions", "preemptions"), ("ok_rate", "ok"),
    ("repeats", "repeats"), ("slo_held", "SLO held"),
)  # fmt: skip
#: what the points table's names leave out: the report's caption, the CLI's line under it
POINTS_CAPTION = ("Points in load order (means over repeats; hit, ok and shares as "
                  "fractions 0-1)")


def slo_columns(sweep: Sweep) -> list[tuple[str, str]]:
    """``(frame column, label)`` of the SLO's bounds whose observed value the points table
    does not show already: a bound's percentile (``ttft_ms:p99``: column ``ttft_ms_p99``
    or ``slo:ttft_ms:p99``, ``TTFT p99 (ms)``) or a per-request bound's attained share
    (``ttft_ms<=2000``: ``slo:ttft_ms``, ``share within TTFT ≤ 2 s``, the bound in the
    verdict's words), so the verdict's numbers stand in the table under it."""
    shown = {k for k, _ in POINT_SHOWN}
    out: list[tuple[str, str]] = []
    for key, limit in (sweep.slo or {}).items():
        metric, _, pct = key.partition(":")
        if key == "ok":
            continue
        if pct:
            name, text = f"{metric}_{pct}", catalog.with_unit(metric, pct)
            if name in shown:
                continue
            # the summary's own percentile when it keeps that one: the same number
            col = name if pct in STATS else f"slo:{key}"
        else:
            col, text = f"slo:{key}", f"share within {within_phrase(metric, limit)}"
        out.append((col, text))
    return out


def _search_cell(cap: Mapping[str, Any]) -> str:
    """``found, bracket [4.1, 4.9]``; a search per configuration: one such part each."""
    def one(c: Mapping[str, Any]) -> str:
        return (f"{c.get('status')}, bracket "
                f"[{', '.join(sig(v) if v is not None else '–' for v in c.get('bracket') or [])}]")

    if "configurations" not in cap:
        return one(cap)
    return "; ".join(f"{spec_mod.label(c['params'])}: {one(c)}" for c in cap["configurations"])


def sweeps_table(sweeps: Mapping[str, Sweep]) -> pd.DataFrame:
    """One row per sweep: what varied, where, under which SLO, how it ended."""
    rows: dict[str, dict[str, Any]] = {}
    for label, s in sweeps.items():
        m = s.manifest
        points = s.points
        cap = s.capacity or {}
        rows[label] = {
            "sweep": s.sweep_id,
            "kind": m.kind,
            "mode": m.mode,
            "target": m.target,
            "axes": ", ".join(s.axes),
            "repeats": m.spec.get("repeats"),
            "SLO": slo_phrase(s.slo) or None,  # in the headline's words, not the flag's
            "status": m.status,
            "points done": sum(1 for p in points if p.get("status") == "done"),
            "points skipped": sum(1 for p in points if p.get("status") == "skipped"),
            "capacity": _capacity_cell(s),
            "search": _search_cell(cap) if cap else None,
        }
    df = pd.DataFrame.from_dict(rows, orient="index").T  # a column per sweep: fits a page
    df.index.name = "sweep"
    return named(df, "sweeps")


def _capacity_cell(sweep: Sweep) -> str | None:
    """Each configuration's ``capacity_brief``; None without an SLO."""
    if not sweep.slo:
        return None
    rounds = sweep_rounds_per_unit(sweep) if load_axis(sweep) == RATE_AXIS else None
    caps = capacities(sweep)
    if len(caps) == 1:
        return capacity_brief(caps[0], rounds)
    return "; ".join(f"{c.label}: {capacity_brief(c, rounds)}" for c in caps)


def held_label(sweeps: Mapping[str, Sweep]) -> str:
    """The points table's verdict column, naming the SLO in the headline's words when the
    sweeps share one (``SLO held at TTFT p90 ≤ 500 ms``); ``SLO held`` when they differ
    (the sweeps table names each one's)."""
    phrases = {slo_phrase(s.slo) for s in sweeps.values() if s.slo}
    if len(phrases) == 1 and (phrase := next(iter(phrases))):
        return f"SLO held at {phrase}"
    return "SLO held"


def _repeated(df: pd.DataFrame) -> bool:
    return "repeats" in df and bool((df["repeats"] > 1).any())


def points_table(sweeps: Mapping[str, Sweep], *, held: str | None = None,
                 over: Mapping[int, Any] | None = None) -> pd.DataFrame:
    """A row per finished point in load order: the axes and ``POINT_SHOWN`` (0-1:
    ``POINTS_CAPTION``). ``held``: the verdict column's name (default ``held_label``);
    ``over``: the points over ``--max-error-rate`` as the caller judged them (default: as
    the sweep keeps them), marked in a column when there are any."""
    frames = []
    held = held or held_label(sweeps)
    for label, s in sweeps.items():
        df = in_load_order(s)
        if df.empty:
            continue
        shown: list[tuple[str, str]] = [
            *((k, held if k == "slo_held" else text) for k, text in POINT_SHOWN
              if k != "repeats" or _repeated(df)),
            *slo_columns(s)]
        if over is not None:
            df[OVER_RATE] = [int(i) in over for i in df["point"]]
        if OVER_RATE in df and df[OVER_RATE].fillna(False).astype(bool).any():
            shown.append((OVER_RATE, "over --max-error-rate"))
        cols = [c for c in (*s.axes, *(k for k, _ in shown)) if c in df]
        part = df[cols].rename(columns=dict(shown))
        if len(sweeps) > 1:
            part.insert(0, "sweep", label)
        frames.append(part)
    return named(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), "sweep_points")


FLUSH_KEYS = ("action", "ok", "endpoint", "status", "reason")


def flush_table(sweeps: Mapping[str, Sweep]) -> pd.DataFrame:
    """The prefix-cache flush before each sweep's runs: a row per distinct outcome with
    its count of runs, the first and the last."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for label, s in sweeps.items():
        for p in s.points:
            for r in p.get("runs", []):
                f = r.get("flush") or {}
                key = (label, *(f.get(k) for k in FLUSH_KEYS))
                row = groups.setdefault(key, {"sweep": label, **{k: f.get(k) for k in
                                                                   FLUSH_KEYS},
                                              "runs": 0, "first": r["run_id"]})
                row["runs"] += 1
                row["last"] = r["run_id"]
    df = pd.DataFrame(list(groups.values()))
    if len(df):
        df = df.dropna(axis=1, how="all")  # an endpoint or status no run had
    return named(df, "sweep_flushes")
