"""The published measurement tables as files: ``workbench/data/measurements/*.tsv``.

Each table keeps its source as ``# key: value`` lines (source URL, section, engine and
version, kind, lengths, the preset standing for the deployment, notes on every
conversion) above a tab-separated header; docs/hardware.md lists them. Reading them
needs no engine: ``presets.stated`` asks which (model, GPU) pairs a table covers,
``presets.fit`` replays them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

TABLES_DIR = Path(__file__).resolve().parents[2] / "data" / "measurements"
KINDS = ("closed_loop", "burst", "batch_latency")
REQUIRED = {"closed_loop": ("source", "kind", "preset", "isl", "osl"),
            "batch_latency": ("source", "kind", "isl", "osl", "batch"),
            "burst": ("source", "kind")}


@dataclass(frozen=True, slots=True)
class Table:
    """One published table: its metadata lines and rows (strings as read)."""

    name: str
    meta: dict[str, str]
    rows: list[dict[str, str]]

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def presets(self) -> list[str]:
        """The deployments (presets) the table measured, in row order."""
        if "preset" in self.meta:
            return [self.meta["preset"]]
        return list(dict.fromkeys(r["preset"] for r in self.rows))


def load_tables(folder: Path = TABLES_DIR) -> list[Table]:
    """Every ``*.tsv`` table of ``folder``, sorted by name (ValueError naming the file
    and the missing line or unknown kind)."""
    out = []
    for path in sorted(folder.glob("*.tsv")):
        meta: dict[str, str] = {}
        body: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                meta[key.strip()] = value.strip()
            elif line.strip():
                body.append(line)
        kind = meta.get("kind", "")
        if kind not in KINDS:
            raise ValueError(f"{path}: '# kind:' must be one of {KINDS}, got {kind!r}")
        for need in REQUIRED[kind]:
            if need not in meta:
                raise ValueError(f"{path}: missing '# {need}: ...' line")
        out.append(Table(path.stem, meta, list(csv.DictReader(body, delimiter="\t"))))
    return out
