"""The sweep directory: ``sweep.json`` (the sweep manifest) and ``runs/<run_id>/`` per repeat.

``sweep.json`` is rewritten atomically after every repeat (resume: docs/sweeps.md, "A
sweep directory"); ``load_sweep`` reads a directory back as a ``Sweep``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from workbench.errors import ConfigError

SWEEP_MANIFEST = "sweep.json"
RUNS = "runs"


@dataclass
class SweepManifest:
    """The content of ``sweep.json`` (docs/sweeps.md): the first fields always written, the
    later ones once set; unknown keys kept in ``extra`` and written back unchanged."""

    sweep_id: str | None = None
    kind: str | None = None
    label: str | None = None
    mode: str | None = None  # "virtual" or "live"
    target: str | None = None
    axes: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    base_config: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] | None = None
    slo_text: str | None = None
    created_at: str | None = None
    status: str | None = None
    points: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: dict[str, Any] | None = None
    # -- set as the sweep goes -------------------------------------------------------------
    resumed: list[str] | None = None  # when each resume began
    gpus: int | None = None  # a serve sweep's GPUs per server (for per-GPU figures)
    servers: dict[str, Any] | None = None  # a serve sweep's servers, by name
    failed_points: list[int] | None = None
    #: the ``--max-error-rate`` that judged the points (each one's ``over_max_error_rate``)
    #: when ``workbench sweep`` last ran it, a resume included
    max_error_rate: float | None = None
    capacity: dict[str, Any] | None = None  # a capacity search's evidence
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    ALWAYS: ClassVar[tuple[str, ...]] = (
        "sweep_id", "kind", "label", "mode", "target", "axes", "spec", "base_config", "slo",
        "slo_text", "created_at", "status", "points", "stopped_early",
    )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _SWEEP_FIELDS
               if name in self.ALWAYS or getattr(self, name) is not None}
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepManifest:
        known = {k: v for k, v in d.items() if k in _SWEEP_FIELDS}
        for name in ("axes", "spec", "base_config", "points"):  # an early sweep's nulls
            if known.get(name) is None:
                known.pop(name, None)
        extra = {k: v for k, v in d.items() if k not in _SWEEP_FIELDS}
        return cls(**known, extra=extra)


_SWEEP_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SweepManifest) if f.name != "extra"
)


#: a point's mark: a run of it failed more than ``sweep --max-error-rate`` of its requests
OVER_RATE = "over_max_error_rate"


@dataclass
class Sweep:
    """A sweep's manifest and directory; ``frame`` has one row per point."""

    sweep_dir: Path
    manifest: SweepManifest = field(default_factory=SweepManifest)

    @property
    def sweep_id(self) -> str:
        return str(self.manifest.sweep_id or self.sweep_dir.name)

    @property
    def label(self) -> str:
        return str(self.manifest.label or self.sweep_id)

    @property
    def axes(self) -> list[str]:
        return list(self.manifest.axes)

    @property
    def slo(self) -> dict[str, float] | None:
        return self.manifest.slo

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self.manifest.points)

    @property
    def capacity(self) -> dict[str, Any] | None:
        return self.manifest.capacity

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
            if OVER_RATE in p:  # judged by sweep --max-error-rate
                row[OVER_RATE] = bool(p[OVER_RATE])
            rows.append(row)
        df = pd.DataFrame(rows)
        df.attrs["name"] = f"sweep {self.sweep_id}"
        return df

    def __repr__(self) -> str:
        done = sum(1 for p in self.points if p.get("status") == "done")
        return (f"Sweep({self.sweep_id!r}, {done}/{len(self.points)} points, "
                f"status={self.manifest.status!r})")


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_MANIFEST).is_file()


def load_sweep(sweep_dir: str | Path) -> Sweep:
    """A stored sweep (``sweep_dir/sweep.json``)."""
    from workbench.storage.rundir import read_json

    d = Path(sweep_dir)
    if not is_sweep_dir(d):
        raise FileNotFoundError(f"{d} is not a sweep directory (no {SWEEP_MANIFEST})")
    try:
        doc = read_json(d / SWEEP_MANIFEST)
    except ValueError as exc:  # torn or edited: one line, never a traceback
        raise ConfigError(f"{d / SWEEP_MANIFEST}: not a sweep manifest ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("points", []), list):
        raise ConfigError(f"{d / SWEEP_MANIFEST}: not a sweep manifest (a JSON object with "
                          "a list of points)")
    return Sweep(d, SweepManifest.from_dict(doc))


def write_sweep(sweep: Sweep) -> None:
    from workbench.storage.rundir import write_json

    write_json(sweep.sweep_dir / SWEEP_MANIFEST, sweep.manifest.to_dict())


def write_error_rate(sweep: Sweep, max_error_rate: float, over: Collection[int]) -> None:
    """Keep a ``--max-error-rate`` verdict in ``sweep.json``: the rate and each done point's
    ``OVER_RATE`` (true for the indices in ``over``; docs/sweeps.md, "A sweep directory")."""
    for p in sweep.manifest.points:
        if p.get("status") == "done":
            p[OVER_RATE] = p["index"] in over
    sweep.manifest.max_error_rate = max_error_rate
    write_sweep(sweep)
