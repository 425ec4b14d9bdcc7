"""Published measurement tables, the preset's error on each row, and the factor fit.

The tables live in ``workbench/data/measurements/*.tsv``, each with its source as
``# key: value`` lines above a tab-separated header (docs/hardware.md lists them). Three
kinds of benchmark are replayed on the embedded engine in virtual time
(``presets.bench``): ``closed_loop`` (a fixed concurrency of clients: NIM/AIPerf,
GenAI-Perf), ``burst`` (a batch sent at once: ``vllm bench serve`` without a rate,
TensorRT-LLM's static batch) and ``batch_latency`` (vLLM's latency test).
``table_errors`` returns the relative error of every published number.

``fit`` searches the efficiency factors (``presets.Factors``) that minimise the loss
(``loss``: per metric class, the median absolute log error over its goal, summed) over a
FIT subset of the tables, by a deterministic pattern search on a log scale (each factor
× and ÷ a step, the step shrinking 1.5 → 1.2 → 1.07). ``python -m
workbench.sim.presets.fit`` runs the documented procedure (docs/hardware.md, "Fit"):
the fit on the FIT tables, every table's errors, the held-out ones apart, and writes the
factors with their provenance to ``sim/presets/fitted_factors.json``, which the presets load.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import median
from typing import Any

import workbench.sim.presets as presets
from workbench.sim.config import EngineConfig
from workbench.sim.presets.bench import burst, closed_loop
from workbench.sim.presets.tables import TABLES_DIR, Table, load_tables

__all__ = ["TABLES_DIR", "RowError", "Table", "errors", "fit", "load_tables", "loss",
           "split", "summary", "table_errors"]

#: published column -> the class its goal belongs to (docs/hardware.md: ≤ 20 % for ITL
#: and throughput, ≤ 30 % for TTFT; a whole request's latency is held to 20 %)
METRIC_CLASS = {"ttft_ms": "ttft", "itl_ms": "itl", "tpot_ms": "itl",
                "throughput_tok_s": "throughput", "total_tok_s": "throughput",
                "output_tok_s": "throughput",
                "latency_ms": "latency", "mean_latency_ms": "latency"}
GOALS = {"ttft": 0.30, "itl": 0.20, "throughput": 0.20, "latency": 0.20}
STEPS = (1.5, 1.2, 1.07)


@dataclass(frozen=True, slots=True)
class RowError:
    """One published number against the preset's: ``error`` = simulated / published − 1."""

    table: str
    preset: str
    key: str  # the row: concurrency, batch × lengths, or the test's name
    metric: str  # a METRIC_CLASS key
    published: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1

    @property
    def log_error(self) -> float:
        return math.log(self.simulated / self.published)


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


def _config(preset: str, table: Table) -> EngineConfig:
    """The preset's engine, scheduling as the engine the table ran on did (ValueError
    naming the table for a knob the engine does not have)."""
    try:
        return EngineConfig.from_knobs(preset=preset, **table.engine_knobs)
    except ValueError as exc:
        raise ValueError(f"{table.name}: '# engine_config:' {exc}") from exc


def _burst_rows(table: Table) -> list[RowError]:
    out: list[RowError] = []
    for row in table.rows:
        batch, isl, osl = int(row["batch"]), int(row["isl"]), int(row["osl"])
        got = burst(_config(row["preset"], table), batch, isl, osl)
        sim = {"ttft_ms": got.ttft_ms, "tpot_ms": got.tpot_ms,
               "latency_ms": got.latency_ms, "total_tok_s": got.total_tok_s,
               "output_tok_s": batch * osl / (got.latency_ms / 1e3)}
        key = f"{batch}x{isl}/{osl}"
        out += [RowError(table.name, row["preset"], key, k, float(row[k]), sim[k])
                for k in sim if row.get(k)]
    return out


def table_errors(table: Table, quick: bool = False) -> list[RowError]:
    """The preset's error on every number of ``table`` (current factors). ``quick``
    (the fit's trials): a closed loop measures ``max(concurrency, 16)`` requests, not
    ``max(3 × concurrency, 16)``; rows the table's ``# fit_exclude:`` line names (a
    metric, optionally only above a concurrency, with its reason) are left out."""
    out: list[RowError] = []
    if table.kind == "closed_loop":
        preset = table.meta["preset"]
        cfg = _config(preset, table)
        for row in table.rows:
            c = int(row["concurrency"])
            # lengths per row where the table sweeps them, else the table's
            isl, osl = (int(row.get(k) or table.meta[k]) for k in ("isl", "osl"))
            got = closed_loop(cfg, c, isl, osl, requests=max(c, 16) if quick else None,
                              together=table.meta.get("clients") == "together")
            sim = {"ttft_ms": got.ttft_ms, "itl_ms": got.itl_ms,
                   "throughput_tok_s": got.throughput}
            key = str(c) if "isl" not in row else f"{c}x{isl}/{osl}"
            out += [RowError(table.name, preset, key, k, float(row[k]), sim[k])
                    for k in sim if row.get(k)]
    elif table.kind == "burst":
        out = _burst_rows(table)
    else:  # batch_latency
        isl, osl, batch = (int(table.meta[k]) for k in ("isl", "osl", "batch"))
        for row in table.rows:
            ms = burst(_config(row["preset"], table), batch, isl, osl).latency_ms
            out.append(RowError(table.name, row["preset"], row["test"], "mean_latency_ms",
                                float(row["mean_latency_ms"]), ms))
    if quick:
        out = [r for r in out if not _fit_excluded(table, r)]
    return out


def _fit_excluded(table: Table, row: RowError) -> bool:
    """Whether the table's ``# fit_exclude: METRIC [above N] reason`` line leaves ``row``
    out of the fit: every row of METRIC, or (``above N``) those measured with more than
    N clients."""
    words = table.meta.get("fit_exclude", "").split()
    if not words or row.metric != words[0]:
        return False
    if len(words) > 2 and words[1] == "above" and words[2].isdigit():
        return int(row.key.split("x")[0]) > int(words[2])
    return True


def errors(tables: list[Table] | None = None, quick: bool = False) -> list[RowError]:
    """``table_errors`` of every (bundled) table."""
    return [e for t in (tables if tables is not None else load_tables())
            for e in table_errors(t, quick)]


def summary(rows: list[RowError]) -> dict[str, float]:
    """Median absolute error per metric class (ttft, itl, throughput, latency) and over
    all rows."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(METRIC_CLASS[r.metric], []).append(abs(r.error))
    out = {k: median(v) for k, v in sorted(by.items())}
    out["all"] = median(abs(r.error) for r in rows) if rows else 0.0
    return out


def loss(rows: list[RowError]) -> float:
    """The fit's objective: per metric class, the median absolute log error over the
    class's goal (``GOALS``), summed. Log errors weigh 2× too slow like ½× too fast."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(METRIC_CLASS[r.metric], []).append(abs(r.log_error))
    return sum(median(v) / GOALS[k] for k, v in by.items())


FACTOR_BOUNDS = {"mfu": (0.05, 1.0), "mbu": (0.05, 1.0), "step_overhead_ms": (0.0, 50.0),
                 "request_overhead_ms": (0.0, 200.0), "allreduce_us": (0.0, 500.0),
                 "mfu_fp8": (0.05, 1.0)}


def fit(tables: list[Table], start: presets.Factors | None = None,
        steps: tuple[float, ...] = STEPS, max_evals: int = 80,
        log: Callable[[str], None] | None = None) -> tuple[presets.Factors, float, int]:
    """Pattern search from ``start`` (default: the current factors) over ``tables``:
    for each step size, every factor in turn × ``step`` and ÷ ``step`` (within
    ``FACTOR_BOUNDS``), a move kept when it lowers ``loss``, repeated until no factor
    moves, then the next smaller step. Deterministic; at most ``max_evals`` replays of
    the tables. Returns (factors, loss, evaluations)."""
    best = start or presets.FACTORS
    if not best.mfu_fp8:  # 0 stands for "as mfu": the search starts FP8 there
        best = dataclasses.replace(best, mfu_fp8=best.mfu)
    seen: dict[presets.Factors, float] = {}

    def evaluate(f: presets.Factors) -> float:
        if f not in seen:
            with using(f):
                seen[f] = loss(errors(tables, quick=True))
        return seen[f]

    best_loss = evaluate(best)
    if log is not None:
        log(f"start loss {best_loss:.4f} {best}")
    names = [f.name for f in dataclasses.fields(presets.Factors)]
    for step in steps:
        moved = True
        while moved and len(seen) < max_evals:
            moved = False
            for name in names:
                for mult in (step, 1 / step):
                    lo, hi = FACTOR_BOUNDS[name]
                    value = min(hi, max(lo, getattr(best, name) * mult))
                    trial = dataclasses.replace(best, **{name: round(value, 6)})
                    if trial == best or len(seen) >= max_evals:
                        continue
                    got = evaluate(trial)
                    if got < best_loss - 1e-9:
                        best, best_loss, moved = trial, got, True
                        if log is not None:
                            log(f"step {step}: loss {got:.4f} {best}")
                        break
    return best, best_loss, len(seen)


def report(rows: list[RowError]) -> list[dict[str, Any]]:
    """Rows as plain dicts (the docs' and the notebook's tables)."""
    return [{**dataclasses.asdict(r), "error": r.error} for r in rows]


def split(tables: list[Table], held_out: tuple[str, ...]) -> tuple[list[Table], list[Table]]:
    """(FIT, HELD-OUT): a table is held out when its name contains one of ``held_out``."""
    out = [t for t in tables if any(h in t.name for h in held_out)]
    return [t for t in tables if t not in out], out


#: the tables the shipped factors are NOT fitted on (docs/hardware.md, "Fit"): every
#: GPU but the H100 (A100, L40S, H200) and the Qwen3 model
HELD_OUT = ("a100", "l40s", "h200", "qwen3")


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - run by hand
    ap = argparse.ArgumentParser(prog="python -m workbench.sim.presets.fit",
                                 description="Fit the preset efficiency factors "
                                             "(docs/hardware.md, 'Fit').")
    ap.add_argument("--held-out", default=",".join(HELD_OUT),
                    help="comma-separated parts of table names kept out of the fit")
    ap.add_argument("--max-evals", type=int, default=80)
    ap.add_argument("--write", action="store_true", help=f"write {presets.FACTORS_FILE.name}")
    ap.add_argument("--evaluate", action="store_true",
                    help="no search: the stored factors' errors on the tables as they are now "
                         "(after a table is added), the fit's own record kept")
    args = ap.parse_args(argv)
    held = tuple(h for h in args.held_out.split(",") if h)
    fit_tables, out_tables = split(load_tables(), held)
    t0 = time.monotonic()
    if args.evaluate:
        got, got_loss, evals = presets.FACTORS, 0.0, 0
    else:
        got, got_loss, evals = fit(fit_tables, max_evals=args.max_evals,
                                   log=lambda line: print(line, flush=True))
    with using(got):
        rows_in, rows_out = errors(fit_tables), errors(out_tables)
    for r in rows_in + rows_out:
        print(f"{r.table[:52]:52} {r.key:>14} {r.metric:16} {r.published:11.2f} "
              f"{r.simulated:11.2f} {r.error:+.1%}")
    record = {
        "factors": dataclasses.asdict(got),
        "procedure": "python -m workbench.sim.presets.fit --write (pattern search on log "
                     "errors, docs/hardware.md 'Fit')",
        "fitted_on": [t.name for t in fit_tables],
        "held_out": [t.name for t in out_tables],
        "loss": round(got_loss, 4), "evaluations": evals,
        "in_sample": {k: round(v, 4) for k, v in summary(rows_in).items()},
        "held_out_error": {k: round(v, 4) for k, v in summary(rows_out).items()},
        "seconds": round(time.monotonic() - t0),
    }
    if args.evaluate:  # the search's own record stays; the errors are today's
        old = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))
        keep = ("procedure", "loss", "evaluations", "seconds", "fitted")
        record = {**record, **{k: old[k] for k in keep if k in old},
                  "evaluated": time.strftime("%Y-%m-%d")}
    print(json.dumps(record, indent=1))
    if args.write:
        record.setdefault("fitted", time.strftime("%Y-%m-%d"))
        presets.FACTORS_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
