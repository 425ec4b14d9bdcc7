"""The sweep directory: ``sweep.json`` (the sweep manifest) and ``runs/<run_id>/`` per repeat.

``sweep.json`` is rewritten atomically after every repeat, so an interrupted
sweep says exactly which repeats are on disk; running the same sweep into the
same directory resumes from them. ``load_sweep`` reads a sweep directory back
as a ``Sweep`` (its points as a pandas frame) for plots, the notebook and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.errors import ConfigError

SWEEP_MANIFEST = "sweep.json"
RUNS = "runs"


@dataclass
class Sweep:
    """A sweep's manifest and directory; ``frame`` has one row per point."""

    sweep_dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def sweep_id(self) -> str:
        return str(self.manifest.get("sweep_id") or self.sweep_dir.name)

    @property
    def label(self) -> str:
        return str(self.manifest.get("label") or self.sweep_id)

    @property
    def axes(self) -> list[str]:
        return list(self.manifest.get("axes") or [])

    @property
    def slo(self) -> dict[str, float] | None:
        return self.manifest.get("slo")

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("points") or [])

    @property
    def capacity(self) -> dict[str, Any] | None:
        return self.manifest.get("capacity")

    @property
    def run_dirs(self) -> list[str]:
        """Absolute run directories of every finished repeat, in point order."""
        return [str(self.sweep_dir / r["run_dir"])
                for p in self.points for r in p.get("runs", []) if r.get("run_dir")]

    @property
    def frame(self) -> pd.DataFrame:
        """One row per point that ran: the axis values, pooled metrics, SLO verdict."""
        rows = []
        for p in self.points:
            if p.get("status") != "done":
                continue
            row: dict[str, Any] = {"point": p["index"], "label": p.get("label")}
            row.update(p.get("params") or {})
            row.update(p.get("metrics") or {})
            verdict = p.get("slo") or {}
            row["slo_held"] = verdict.get("held")
            row["slo_worst_ratio"] = verdict.get("worst_ratio")
            rows.append(row)
        df = pd.DataFrame(rows)
        df.attrs["name"] = f"sweep {self.sweep_id}"
        return df

    def __repr__(self) -> str:
        done = sum(1 for p in self.points if p.get("status") == "done")
        return (f"Sweep({self.sweep_id!r}, {done}/{len(self.points)} points, "
                f"status={self.manifest.get('status')!r})")


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_MANIFEST).is_file()


def load_sweep(sweep_dir: str | Path) -> Sweep:
    """A stored sweep (``sweep_dir/sweep.json``)."""
    from workbench.storage.rundir import read_json

    d = Path(sweep_dir)
    if not is_sweep_dir(d):
        raise FileNotFoundError(f"{d} is not a sweep directory (no {SWEEP_MANIFEST})")
    try:
        manifest = read_json(d / SWEEP_MANIFEST)
    except ValueError as exc:  # torn or edited: one line, never a traceback
        raise ConfigError(f"{d / SWEEP_MANIFEST}: not a sweep manifest ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("points", []), list):
        raise ConfigError(f"{d / SWEEP_MANIFEST}: not a sweep manifest (a JSON object with "
                          "a list of points)")
    return Sweep(d, manifest)


def write_sweep(sweep: Sweep) -> None:
    from workbench.storage.rundir import write_json

    write_json(sweep.sweep_dir / SWEEP_MANIFEST, sweep.manifest)
