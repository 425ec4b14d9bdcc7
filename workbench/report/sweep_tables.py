"""Tables of sweeps for the ``sweep`` notebook and reports (pandas frames, ``tables.show``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from workbench.sweeps.store import Sweep

POINT_COLUMNS = ("ttft_ms_p90", "tpot_ms_p90", "e2e_ms_p90", "request_throughput_rps",
                 "output_token_throughput_tps", "goodput_rps", "actual_prefix_hit_rate",
                 "server_prefix_hit_rate", "preemptions", "ok_rate", "repeats", "slo_held",
                 "slo_worst_ratio")


def sweeps_table(sweeps: Mapping[str, Sweep]) -> pd.DataFrame:
    """One row per sweep: what varied, where, under which SLO, how it ended."""
    rows: dict[str, dict[str, Any]] = {}
    for label, s in sweeps.items():
        m = s.manifest
        points = s.points
        cap = s.capacity or {}
        rows[label] = {
            "sweep": s.sweep_id,
            "kind": m.get("kind"),
            "mode": m.get("mode"),
            "target": m.get("target"),
            "axes": ", ".join(s.axes),
            "repeats": (m.get("spec") or {}).get("repeats"),
            "SLO": m.get("slo_text"),
            "status": m.get("status"),
            "points done": sum(1 for p in points if p.get("status") == "done"),
            "points skipped": sum(1 for p in points if p.get("status") == "skipped"),
            "capacity": cap.get("value") if cap else None,
            "capacity status": cap.get("status") if cap else None,
        }
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "label"
    df.attrs["name"] = "sweeps"
    return df


def points_table(sweeps: Mapping[str, Sweep]) -> pd.DataFrame:
    """One row per finished point of every sweep: the axis values and the pooled numbers."""
    frames = []
    for label, s in sweeps.items():
        df = s.frame
        if df.empty:
            continue
        cols = [c for c in ("point", *s.axes, *POINT_COLUMNS) if c in df]
        part = df[cols].copy()
        part.insert(0, "sweep", label)
        frames.append(part)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out.attrs["name"] = "sweep_points"
    return out


def flush_table(sweeps: Mapping[str, Sweep]) -> pd.DataFrame:
    """What was done to the server's prefix cache before every run of every sweep."""
    rows = []
    for label, s in sweeps.items():
        for p in s.points:
            for r in p.get("runs", []):
                f = r.get("flush") or {}
                rows.append({"sweep": label, "point": p["index"], "repeat": r["repeat"],
                             "run": r["run_id"], "action": f.get("action"),
                             "ok": f.get("ok"), "endpoint": f.get("endpoint"),
                             "status": f.get("status"), "reason": f.get("reason")})
    df = pd.DataFrame(rows)
    df.attrs["name"] = "sweep_flushes"
    return df
