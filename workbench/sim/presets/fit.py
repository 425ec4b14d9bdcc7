"""Published measurement tables, the preset's error on each row, and the factor fit.

The tables live in ``workbench/data/measurements/*.tsv``, each with its source as
``# key: value`` lines above a tab-separated header (docs/hardware.md lists them).
``errors`` replays every row on the embedded engine in virtual time
(``presets.bench``) and returns the relative error of each published number;
``fit`` (a tool; the shipped factors were set by hand, docs/hardware.md "Fit") searches
the efficiency factors (``presets.Factors``) that minimise the median absolute error
over the ``closed_loop`` (NIM) tables, one factor at a time on a multiplicative grid.
The vLLM batch-latency rows are checked, never fitted. ``python -m
workbench.sim.presets.fit`` prints the fit and every row.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import workbench.sim.presets as presets
from workbench.sim.config import EngineConfig
from workbench.sim.presets.bench import batch_latency, closed_loop

TABLES_DIR = Path(__file__).resolve().parents[2] / "data" / "measurements"


@dataclass(frozen=True, slots=True)
class Table:
    """One published table: its metadata lines and rows (strings as read)."""

    name: str
    meta: dict[str, str]
    rows: list[dict[str, str]]

    @property
    def kind(self) -> str:
        return self.meta["kind"]


@dataclass(frozen=True, slots=True)
class RowError:
    """One published number against the preset's: ``error`` = simulated / published − 1."""

    table: str
    preset: str
    key: str  # the row: concurrency, or the test's name
    metric: str  # ttft_ms, itl_ms, throughput_tok_s, mean_latency_ms
    published: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1


def load_tables(folder: Path = TABLES_DIR) -> list[Table]:
    """Every ``*.tsv`` table of ``folder``, sorted by name."""
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
        for need in ("source", "kind", "isl", "osl"):
            if need not in meta:
                raise ValueError(f"{path}: missing '# {need}: ...' line")
        out.append(Table(path.stem, meta, list(csv.DictReader(body, delimiter="\t"))))
    return out


@contextlib.contextmanager
def using(factors: presets.Factors) -> Iterator[None]:
    """Presets resolve with ``factors`` inside the block (the fit's trial values)."""
    old = presets.FACTORS
    presets.FACTORS = factors
    presets.resolve.cache_clear()
    try:
        yield
    finally:
        presets.FACTORS = old
        presets.resolve.cache_clear()


def _config(preset: str) -> EngineConfig:
    return EngineConfig.from_knobs(preset=preset)


def table_errors(table: Table) -> list[RowError]:
    """The preset's error on every number of ``table`` (current factors)."""
    isl, osl = int(table.meta["isl"]), int(table.meta["osl"])
    out: list[RowError] = []
    if table.kind == "closed_loop":
        preset = table.meta["preset"]
        cfg = _config(preset)
        for row in table.rows:
            c = int(row["concurrency"])
            got = closed_loop(cfg, c, isl, osl)
            sim = {"ttft_ms": got.ttft_ms, "itl_ms": got.itl_ms,
                   "throughput_tok_s": got.throughput}
            out += [RowError(table.name, preset, str(c), k, float(row[k]), sim[k]) for k in sim]
    elif table.kind == "batch_latency":
        batch = int(table.meta["batch"])
        for row in table.rows:
            ms = batch_latency(_config(row["preset"]), batch, isl, osl)
            out.append(RowError(table.name, row["preset"], row["test"], "mean_latency_ms",
                                float(row["mean_latency_ms"]), ms))
    else:
        raise ValueError(f"{table.name}: unknown kind {table.kind!r}")
    return out


def errors(tables: list[Table] | None = None) -> list[RowError]:
    """``table_errors`` of every bundled table."""
    return [e for t in (tables if tables is not None else load_tables()) for e in table_errors(t)]


def summary(rows: list[RowError]) -> dict[str, float]:
    """Median absolute error per metric, and over all rows."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.metric, []).append(abs(r.error))
    out = {k: median(v) for k, v in sorted(by.items())}
    out["all"] = median(abs(r.error) for r in rows) if rows else 0.0
    return out


def _loss(rows: list[RowError]) -> float:
    """The fit's objective: each metric's median absolute error over its goal (20 % for
    ITL and throughput, 30 % for TTFT), summed."""
    goal = {"ttft_ms": 0.3, "itl_ms": 0.2, "throughput_tok_s": 0.2}
    s = summary(rows)
    return sum(s[k] / g for k, g in goal.items() if k in s)


def fit(tables: list[Table] | None = None, passes: int = 1,
        steps: tuple[float, ...] = (0.75, 0.9, 1.15, 1.35),
        log: Any = None) -> presets.Factors:
    """Coordinate search from the current factors over the ``closed_loop`` tables
    (``log``: a callable given each improvement)."""
    fitted = [t for t in (tables if tables is not None else load_tables())
              if t.kind == "closed_loop"]
    best = presets.FACTORS
    with using(best):
        best_loss = _loss(errors(fitted))
    for _ in range(passes):
        for name in (f.name for f in dataclasses.fields(presets.Factors)):
            for step in steps:
                value = getattr(best, name) * step
                if name in ("mfu", "mbu") and value > 1:
                    continue
                trial = dataclasses.replace(best, **{name: value})
                with using(trial):
                    loss = _loss(errors(fitted))
                if loss < best_loss - 1e-9:
                    best, best_loss = trial, loss
                    if log is not None:
                        log(f"{loss:.4f} {best}")
    return best


def report(rows: list[RowError]) -> list[dict[str, Any]]:
    """Rows as plain dicts (the docs' and the notebook's tables)."""
    return [{**dataclasses.asdict(r), "error": r.error} for r in rows]


if __name__ == "__main__":  # pragma: no cover - the fit, run by hand (docs/hardware.md)
    got = fit(log=lambda line: print(line, flush=True))
    print(got)
    with using(got):
        rows = errors()
    for r in rows:
        print(f"{r.table[:40]:40} {r.key:>22} {r.metric:17} {r.published:10.2f} "
              f"{r.simulated:10.2f} {r.error:+.1%}")
    print(summary(rows))
