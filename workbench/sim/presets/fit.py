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
set of tables, by a deterministic pattern search on a log scale (each factor × and ÷ a
step, the step shrinking 1.5 → 1.2 → 1.07). ``leave_one_source_out`` fits once per
source without it and predicts that source's rows. ``python -m
workbench.sim.presets.fit`` runs the documented procedure (docs/hardware.md, "Fit"):
the fit on every source, the leave-one-source-out folds, and writes the factors with
their provenance and the folds' errors (per GPU, TP and metric) to
``sim/presets/fitted_factors.json``, which the presets load and state (``--stage fit``
and ``--stage folds`` split it in two commands, beside each other or one after the other:
``search_record`` is the search's part, ``with_folds`` adds the folds'); ``--stage replay``
rewrites those figures without a search (the stored factors and folds replayed on the
current formulas and tables, ``replay_folds``).
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
from workbench.sim.presets.bench import burst, closed_loop, perf_analyzer_windows
from workbench.sim.presets.tables import TABLES_DIR, Table, load_tables

__all__ = ["TABLES_DIR", "RowError", "Table", "errors", "fit", "leave_one_source_out",
           "load_tables", "loss", "procedure", "replay_folds", "search_record", "summary",
           "table_errors", "with_folds"]

#: published column -> the class its goal belongs to (docs/hardware.md: ≤ 15 % for ITL
#: and throughput, ≤ 25 % for TTFT; a whole request's or batch's latency is held to 15 %)
METRIC_CLASS = {"ttft_ms": "ttft", "itl_ms": "itl", "tpot_ms": "itl",
                "throughput_tok_s": "throughput", "total_tok_s": "throughput",
                "output_tok_s": "throughput",
                "latency_ms": "latency", "mean_latency_ms": "latency"}
GOALS = {"ttft": 0.25, "itl": 0.15, "throughput": 0.15, "latency": 0.15}
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
        got = burst(_config(row["preset"], table), batch, isl, osl,
                    test_run=table.test_run)
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
    switches = {k: v for k, v in table.switches.items() if getattr(presets.FACTORS, k) != v}
    if switches:
        # the engine decoded with one block per head, or its fake-weight router collapsed:
        # its tables replay with the switches on
        with using(dataclasses.replace(presets.FACTORS, **switches)):
            return table_errors(table, quick)
    out: list[RowError] = []
    if table.kind == "closed_loop":
        preset = table.meta["preset"]
        cfg = _config(preset, table)
        for row in table.rows:
            c = int(row["concurrency"])
            # lengths per row where the table sweeps them, else the table's
            isl, osl = (int(row.get(k) or table.meta[k]) for k in ("isl", "osl"))
            requests = table.measured_requests(row) or (max(c, 16) if quick else None)
            if table.perf_analyzer:
                got = perf_analyzer_windows(cfg, c, isl, osl)
            else:
                got = closed_loop(cfg, c, isl, osl, requests=requests,
                                  test_run=table.test_run)
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


def uses(table: Table) -> frozenset[str]:
    """The factors ``table``'s replay depends on: every factor, but ``mfu_fp8`` only with
    an FP8 preset, ``mfu`` only with a 16-bit one (or while ``mfu_fp8`` is 0, "as
    ``mfu``": ``_quick_key``), ``allreduce_us`` only above TP 1 (``Preset.step_ms``),
    and a compiled static loop's table (``# step_loop: static``) ``static_step_ms`` in
    place of ``step_overhead_ms``, no ``request_overhead_ms``
    (``presets.STATIC_LOOP_REQUEST_OVERHEAD_MS``) and no ``seq_us``."""
    parsed = [presets.parse(p) for p in table.presets]
    names = {f.name for f in dataclasses.fields(presets.Factors)}
    if not any(fp8 for *_rest, fp8 in parsed):
        names.discard("mfu_fp8")
    if all(fp8 for *_rest, fp8 in parsed):
        names.discard("mfu")
    if all(tp == 1 for _m, _g, tp, _f in parsed):
        names.discard("allreduce_us")
    if not table.unsplit_attention:
        names.discard("attn_block_share")
    if not any(presets.resolve(p).model.experts for p in table.presets):
        names.discard("moe_layer_us")  # a dense model's table: no MoE layer
    # a table's steps pay one fixed time: a compiled static loop's or a serving engine's
    names.discard("step_overhead_ms" if table.static_loop else "static_step_ms")
    if table.static_loop:  # no front end: its requests pay no request overhead, and no
        names.difference_update(("request_overhead_ms", "seq_us"))  # host time per sequence
    names.difference_update(SWITCHES)  # switches the table sets, never searched
    return frozenset(names)


#: the fit's replays (``quick``) of one table at the values of the factors it uses: a
#: trial that moves a factor a table does not use, and the folds' searches, which retrace
#: many of the fit's trials, take the rows from here (a replay is deterministic: the
#: same rows); per process, filled as the searches go
_QUICK_ROWS: dict[tuple[str, tuple[float | None, ...]], list[RowError]] = {}


def _quick_key(table: Table, factors: presets.Factors) -> tuple[str, tuple[float | None, ...]]:
    used = uses(table) | ({"mfu"} if not factors.mfu_fp8 else set())
    values = tuple(getattr(factors, f.name) if f.name in used else None
                   for f in dataclasses.fields(presets.Factors))
    return json.dumps([table.name, table.meta, table.rows], sort_keys=True), values


def quick_errors(tables: list[Table], factors: presets.Factors) -> list[RowError]:
    """``errors(tables, quick=True)`` under ``factors``, each table replayed once per
    value of the factors it uses (``_QUICK_ROWS``)."""
    out: list[RowError] = []
    with using(factors):
        for t in tables:
            key = _quick_key(t, factors)
            if key not in _QUICK_ROWS:
                _QUICK_ROWS[key] = table_errors(t, quick=True)
            out += _QUICK_ROWS[key]
    return out


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


#: each factor's search range; ``mbu`` at most ``MBU_MAX`` (docs/hardware.md, "Fit": a
#: step reads its bytes no faster than a stream copy of the GPU's memory does)
MBU_MAX = 0.89
FACTOR_BOUNDS = {"mfu": (0.05, 1.0), "mbu": (0.05, MBU_MAX), "step_overhead_ms": (0.0, 50.0),
                 "request_overhead_ms": (0.0, 200.0), "allreduce_us": (0.0, 500.0),
                 "mfu_fp8": (0.05, 1.0), "layer_us": (0.0, 500.0),
                 "gemm_half_tokens": (0.0, 4096.0), "attn_block_share": (0.001, 1.0),
                 "static_step_ms": (0.0, 50.0), "seq_us": (0.0, 1000.0),
                 "moe_layer_us": (0.0, 500.0)}
#: fields of ``presets.Factors`` the search leaves alone: switches, not factors
SWITCHES = ("unsplit_attention", "collapsed_routing", "static_loop")


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
            seen[f] = loss(quick_errors(tables, f))
        return seen[f]

    best_loss = evaluate(best)
    if log is not None:
        log(f"start loss {best_loss:.4f} {best}")
    names = [f.name for f in dataclasses.fields(presets.Factors) if f.name not in SWITCHES]
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


#: tables no fit sees (their rows are predicted by the fold fitted on every other table):
#: the TensorRT-LLM overview (its thousands of requests cost ~40 s of CPU a replay) and
#: the Azure guide's TP8 throughput tables (added after the search, kept out of sample)
NEVER_FITTED = ("trtllm-perf-overview", "azure-ai-benchmarking-guide")


@dataclass(frozen=True, slots=True)
class SourceFit:
    """One leave-one-source-out fold: the factors fitted without ``source`` and the
    errors they leave on its tables."""

    source: str
    factors: presets.Factors
    rows: list[RowError]


def source_groups(tables: list[Table]) -> dict[str, list[Table]]:
    """The tables by source (``Table.source_group``), in name order."""
    out: dict[str, list[Table]] = {}
    for t in tables:
        out.setdefault(t.source_group, []).append(t)
    return out


def _fold(args: tuple[str, list[Table], list[Table], presets.Factors, int]) -> SourceFit:
    source, fit_on, held, start, max_evals = args
    got, _loss, _n = fit(fit_on, start=start, max_evals=max_evals)
    with using(got):
        return SourceFit(source, got, errors(held))


def leave_one_source_out(tables: list[Table], start: presets.Factors, max_evals: int,
                         jobs: int = 1) -> list[SourceFit]:
    """Per source: a fit (from ``start``, at most ``max_evals`` replays) on every other
    source's fittable tables, and its errors on that source's tables (``NEVER_FITTED``
    tables are in no fit: their rows are predicted by the fit on all other sources,
    returned as the fold named ``"(never fitted)"``). ``jobs`` folds run at once."""
    fittable = [t for t in tables if not any(n in t.name for n in NEVER_FITTED)]
    never = [t for t in tables if t not in fittable]
    groups = source_groups(fittable)
    folds = [(src, [t for t in fittable if t not in held], held, start, max_evals)
             for src, held in groups.items()]
    if never:
        folds.append(("(never fitted)", fittable, never, start, max_evals))
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(_fold, folds))
    return [_fold(f) for f in folds]


def replay_folds(tables: list[Table], fold_factors: dict[str, dict[str, float]]) -> list[SourceFit]:
    """The folds a record stores (``fold_factors``: source -> factors), replayed as they
    stand, no search: each source's tables with the factors of the fold that left it out
    (the ``"(never fitted)"`` fold: the ``NEVER_FITTED`` tables). What ``--stage replay``
    re-derives the leave-one-source-out figures with after a change of the step-time
    formulas that leaves the factors' meaning alone (docs/hardware.md, "Fit")."""
    fittable = [t for t in tables if not any(n in t.name for n in NEVER_FITTED)]
    groups = source_groups(fittable)
    out = []
    for source, values in fold_factors.items():
        held = ([t for t in tables if t not in fittable] if source == "(never fitted)"
                else groups[source])
        factors = presets.Factors(**values)
        with using(factors):
            out.append(SourceFit(source, factors, errors(held)))
    return out


def breakdown(rows: list[RowError]) -> dict[str, dict[str, float]]:
    """Median absolute error per (GPU, TP) and metric class, with the row counts:
    ``{"h100 tp8": {"itl": 0.12, "itl_n": 11, ...}}``."""
    by: dict[str, list[RowError]] = {}
    for r in rows:
        _model, gpu, tp, _fp8 = presets.parse(r.preset)
        by.setdefault(f"{gpu} tp{tp}", []).append(r)
    out: dict[str, dict[str, float]] = {}
    for key, rs in sorted(by.items()):
        cell: dict[str, float] = {}
        for cls, v in summary(rs).items():
            if cls == "all":
                continue
            cell[cls] = round(v, 4)
            cell[f"{cls}_n"] = sum(METRIC_CLASS[r.metric] == cls for r in rs)
        out[key] = cell
    return out


#: where every fit starts (the fits are local searches): the previous fit's factors
#: (docs/hardware.md, "Fit") with the new ones at round values no table was searched for;
#: a compiled static loop's fixed step starts where a serving engine's does (no prior that
#: it is cheaper: the search moves it, a fold that never saw a static table keeps it)
START = presets.Factors(mfu=0.70, mbu=0.8, step_overhead_ms=2.4, request_overhead_ms=5.19,
                        allreduce_us=20.0, mfu_fp8=0.467, layer_us=5.0, gemm_half_tokens=32.0,
                        attn_block_share=0.02, static_step_ms=2.4, seq_us=20.0,
                        moe_layer_us=20.0)


def _by(rows: list[RowError], key: Callable[[RowError], str]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[RowError]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return {k: {m: round(v, 4) for m, v in summary(rs).items()} for k, rs in sorted(groups.items())}


COMMAND = "python -m workbench.sim.presets.fit"
#: the keys the folds add to a record (``_loso_record``), none of them the search's
FOLD_KEYS = ("held_out_error", "leave_one_source_out", "folds_seconds")
_HOW = "(pattern search on log errors from START; docs/hardware.md 'Fit')"


def procedure(max_evals: int, loso_evals: int | None = None, jobs: int = 2,
              one_command: bool = False) -> str:
    """The command(s) a record was made with: the search alone (``loso_evals`` None:
    ``--stage fit``, no folds yet), the search and then its folds as a second command
    (``--stage folds``, beside it or after it), or both in ``one_command``
    (``--stage all``)."""
    if loso_evals is None:
        return (f"{COMMAND} --stage fit --max-evals {max_evals} --write {_HOW}; no "
                "leave-one-source-out folds (--stage folds adds them)")
    if one_command:
        return (f"{COMMAND} --max-evals {max_evals} --loso-evals {loso_evals} "
                f"--jobs {jobs} --write {_HOW}")
    return (f"{COMMAND} --stage fit --max-evals {max_evals} --write, and "
            f"{COMMAND} --stage folds --loso-evals {loso_evals} --jobs {jobs} --write "
            f"{_HOW}")


def search_record(factors: presets.Factors, got_loss: float, evals: int, max_evals: int,
                  fitted_on: list[str], never_fitted: list[str],
                  in_sample: dict[str, float], seconds: float) -> dict[str, Any]:
    """What the search writes (``--stage fit``): the factors, their provenance and their
    in-sample errors, with no leave-one-source-out figures (``with_folds`` adds them)."""
    return {
        "factors": dataclasses.asdict(factors),
        "start": dataclasses.asdict(START),
        "procedure": procedure(max_evals),
        "fitted_on": fitted_on, "never_fitted": never_fitted,
        "loss": round(got_loss, 4), "evaluations": evals, "max_evals": max_evals,
        "in_sample": {k: round(v, 4) for k, v in in_sample.items()},
        "seconds": round(seconds),
        "fitted": time.strftime("%Y-%m-%d"),
    }


def with_folds(record: dict[str, Any], loso: dict[str, Any], jobs: int,
               seconds: float | None) -> dict[str, Any]:
    """``record`` (a search's) with the folds' figures ``loso`` (``_loso_record``) in
    place of any it had, and the procedure naming the search's command and the folds'
    (their own evaluations per fold): a new dict. ``seconds`` is the folds' wall time
    when they ran as their own command (None: within the search's)."""
    evals = loso["leave_one_source_out"]["evaluations_per_fold"]
    out = {k: v for k, v in record.items() if k not in FOLD_KEYS}
    out["procedure"] = procedure(record.get("max_evals", record["evaluations"]), evals, jobs,
                                 one_command=seconds is None)
    out.update(loso)
    if seconds is not None:
        out["folds_seconds"] = round(seconds)
    return out


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - run by hand
    ap = argparse.ArgumentParser(prog="python -m workbench.sim.presets.fit",
                                 description="Fit the preset efficiency factors and check "
                                             "them leave-one-source-out (docs/hardware.md, "
                                             "'Fit').")
    ap.add_argument("--max-evals", type=int, default=48, help="replays of the fit on all sources")
    ap.add_argument("--loso-evals", type=int, default=6, help="replays of each held-out fold")
    ap.add_argument("--jobs", type=int, default=2, help="folds fitted at once")
    ap.add_argument("--write", action="store_true", help=f"write {presets.FACTORS_FILE.name}")
    ap.add_argument("--fitted", default=None, metavar="JSON",
                    help="the factors a finished search of --max-evals found (its log's last "
                         "line), to run only the folds")
    ap.add_argument("--stage", choices=("all", "fit", "folds", "replay"), default="all",
                    help="fit: the search alone (writes the record without folds); folds: the "
                         "folds alone, added to the record's search (the two can run at once); "
                         "replay: no search, the record's factors and folds replayed on the "
                         "current formulas and tables, its figures rewritten")
    ap.add_argument("--replace", action="store_true",
                    help="--stage folds: replace the folds of the record as it stands (its "
                         "search finished) instead of waiting for a search-stage record "
                         "without folds")
    args = ap.parse_args(argv)
    if args.stage == "folds":
        return _folds_stage(args)
    if args.stage == "replay":
        return _replay_stage(args)
    tables = load_tables()
    fittable = [t for t in tables if not any(n in t.name for n in NEVER_FITTED)]
    t0 = time.monotonic()
    if args.fitted:
        got = presets.Factors(**json.loads(args.fitted))
        with using(got):
            got_loss, evals = loss(errors(fittable, quick=True)), args.max_evals
    else:
        got, got_loss, evals = fit(fittable, start=START, max_evals=args.max_evals,
                                   log=lambda line: print(line, flush=True))
    with using(got):
        rows_in = errors(fittable)
    folds = ([] if args.stage == "fit" else
             leave_one_source_out(tables, START, args.loso_evals, jobs=args.jobs))
    loso = [r for f in folds for r in f.rows]
    for r in loso:
        print(f"{r.table[:52]:52} {r.key:>14} {r.metric:16} {r.published:11.2f} "
              f"{r.simulated:11.2f} {r.error:+.1%}")
    record = search_record(got, got_loss, evals, max_evals=args.max_evals,
                           fitted_on=[t.name for t in fittable],
                           never_fitted=[t.name for t in tables if t not in fittable],
                           in_sample=summary(rows_in), seconds=time.monotonic() - t0)
    if folds:  # --stage all: one command made the search and its folds
        record = with_folds(record, _loso_record(tables, folds, args.loso_evals),
                            jobs=args.jobs, seconds=None)
    print(json.dumps(record, indent=1))
    if args.write:
        presets.FACTORS_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


def _loso_record(tables: list[Table], folds: list[SourceFit],
                 evals: int) -> dict[str, Any]:  # pragma: no cover - run by hand
    loso = [r for f in folds for r in f.rows]
    return {
        "held_out_error": {k: round(v, 4) for k, v in summary(loso).items()},
        "leave_one_source_out": {
            "evaluations_per_fold": evals,
            "by_gpu_tp": breakdown(loso),
            "by_source": _by(loso, lambda r: next(t.source_group for t in tables
                                                  if t.name == r.table)),
            "by_table": _by(loso, lambda r: r.table),
            "fold_factors": {f.source: dataclasses.asdict(f.factors) for f in folds},
        },
    }


def _folds_stage(args: argparse.Namespace) -> int:  # pragma: no cover - run by hand
    """The folds alone (``--stage folds``): printed, and with ``--write`` added to the
    record the search stage wrote (``with_folds``): a search's record without folds,
    waited for up to an hour when the search runs beside them; with ``--replace``, the
    record as it stands (its search finished, its folds replaced)."""
    t0 = time.monotonic()
    tables = load_tables()
    folds = leave_one_source_out(tables, START, args.loso_evals, jobs=args.jobs)
    for r in (r for f in folds for r in f.rows):
        print(f"{r.table[:52]:52} {r.key:>14} {r.metric:16} {r.published:11.2f} "
              f"{r.simulated:11.2f} {r.error:+.1%}")
    got = _loso_record(tables, folds, args.loso_evals)
    print(json.dumps(got, indent=1), flush=True)
    if args.write:
        for _ in range(360):  # the search stage writes the record when it ends
            record = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))
            done = "leave_one_source_out" in record and not args.replace
            if record.get("start") == dataclasses.asdict(START) and not done:
                break
            time.sleep(10)
        else:
            raise SystemExit("no search-stage record to add the folds to")
        record = with_folds(record, got, jobs=args.jobs, seconds=time.monotonic() - t0)
        presets.FACTORS_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


def _replay_stage(args: argparse.Namespace) -> int:  # pragma: no cover - run by hand
    """``--stage replay``: the record's factors on its fitted tables and its folds on
    their sources, replayed without a search; the in-sample and leave-one-source-out
    figures rewritten (with ``--write``), the search's own record (loss, evaluations)
    kept and the replay dated beside it."""
    record = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))
    tables = load_tables()
    fitted = [t for t in tables if t.name in record["fitted_on"]]
    t0 = time.monotonic()
    with using(presets.Factors(**record["factors"])):
        rows_in = errors(fitted)
    folds = replay_folds(tables, record["leave_one_source_out"]["fold_factors"])
    evals = record["leave_one_source_out"]["evaluations_per_fold"]
    record.update({"never_fitted": [t.name for t in tables
                                    if any(n in t.name for n in NEVER_FITTED)],
                   "in_sample": {k: round(v, 4) for k, v in summary(rows_in).items()},
                   **_loso_record(tables, folds, evals),
                   "replayed": f"{time.strftime('%Y-%m-%d')}: figures re-derived by "
                               "--stage replay (no search) in "
                               f"{round(time.monotonic() - t0)} s"})
    print(json.dumps({k: record[k] for k in ("in_sample", "held_out_error", "replayed")},
                     indent=1))
    if args.write:
        presets.FACTORS_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
