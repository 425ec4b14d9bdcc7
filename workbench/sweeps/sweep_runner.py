"""Run a sweep's points: repeats, flush between points, early stop, resume.

``SweepRunner`` owns one sweep directory; the grid (``sweep``) and the capacity search
are both sequences of ``measure_many`` calls. Live points run one after another, each
run resetting the target's prefix cache first (docs/cache-isolation.md); virtual-time
points may run in ``parallel`` worker processes. docs/sweeps.md has the directory and
resume rules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import json
import logging
import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import workbench.sweeps.spec as spec_mod
from workbench.arrival.schedule import (
    ARRIVAL_SPAN_WARN_MS,
    SPAN_REMEDY,
    span_sentence,
    span_words,
)
from workbench.config import RunConfig
from workbench.cores import usable_cores
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO
from workbench.metrics.wording import spread_phrase, thin_phrase, unmeasured_phrase
from workbench.plurals import counted
from workbench.signals import die_with_parent
from workbench.spawning import children_start, spawn_context
from workbench.storage.rundir import contained_dir
from workbench.sweeps.points import (
    forget_traces,
    point_metrics,
    pool,
    run_complete,
    simulate_and_measure,
)
from workbench.sweeps.spec import MAX_REPEATS
from workbench.sweeps.store import (
    RUNS,
    SWEEP_MANIFEST,
    Sweep,
    SweepManifest,
    load_sweep,
    write_sweep,
)

log = logging.getLogger(__name__)
#: points whose configs are checked between two turns of the event loop (``check``)
CHECK_YIELD_EVERY = 50

Progress = Callable[[str], None]


class PointRuns(TypedDict, total=False):
    """How a sweep's points run and where they go (``sweep_async``, ``capacity_search_async``).

    ``repeats``: runs per point (seeds ``seed``, ``seed+1``, …, pooled); ``virtual``: each
    point through ``simulate``, ``parallel`` at once (default: the cores; live points: one
    at a time); ``out_dir``/``sweep_id``: the sweep directory (the same id resumes);
    ``label``; ``progress``: told each point's line; ``on_interrupted``: told the sweep as
    saved when a signal (or a cancel) stops it, before the interrupt goes on;
    ``max_error_rate``: the threshold each run is judged by (``sweep --max-error-rate``),
    recorded in its manifest (``RunManifest.max_error_rate``)."""

    repeats: int
    virtual: bool
    parallel: int | None
    out_dir: str | Path | None
    sweep_id: str | None
    label: str | None
    progress: Progress | None
    on_interrupted: Callable[[Sweep], None] | None
    max_error_rate: float | None
# config keys that name where a run goes, not what it does (free to differ on resume)
_PLACE_KEYS = ("out_dir", "run_id", "label", "overwrite")


def new_sweep_id(kind: str) -> str:
    return f"{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}-{kind}"


#: how many ``-N`` suffixes a new sweep id tries when sweeps start within one second
FRESH_TRIES = 1000


def fresh_sweep_dir(root: Path, kind: str) -> Path:
    """A new directory ``<UTC second>-<kind>[-N]`` under ``root``, claimed by ``mkdir``: two
    sweeps started in one second never share (and so never resume) one directory."""
    base = new_sweep_id(kind)
    for n in range(1, FRESH_TRIES + 1):
        d = contained_dir(root, base if n == 1 else f"{base}-{n}")
        try:
            d.mkdir()
        except FileExistsError:
            continue
        return d
    raise ConfigError(f"{root}: {FRESH_TRIES} sweeps named {base}-N already; give a sweep id")


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class SweepRunner:
    """One sweep directory being filled (see module docstring)."""

    def __init__(
        self,
        cfg: RunConfig,
        *,
        kind: str,
        spec: Mapping[str, Any],
        axes: Sequence[str],
        slo: SLO | None = None,
        **runs: Unpack[PointRuns],
    ) -> None:
        repeats, virtual = runs.get("repeats", 1), runs.get("virtual", False)
        parallel, sweep_id = runs.get("parallel"), runs.get("sweep_id")
        out_dir, label, progress = runs.get("out_dir"), runs.get("label"), runs.get("progress")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or \
                not 1 <= repeats <= MAX_REPEATS:
            raise ConfigError(f"sweep repeats: expected an integer in [1, {MAX_REPEATS}], "
                              f"got {repeats!r}", field="sweep.repeats")
        if parallel is None:  # virtual points: one process per core; live: one at a time
            parallel = usable_cores() if virtual else 1
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ConfigError(f"sweep parallel must be an integer >= 1, got {parallel!r}",
                              field="sweep.parallel")
        if parallel > 1 and not virtual:
            raise ConfigError("parallel > 1 runs virtual-time points only: live points share "
                              "one server and run one at a time (drop parallel or use virtual)")
        cfg.register_secrets()  # before sweep.json is written (docs/security.md)
        self.cfg, self.repeats, self.slo = cfg, repeats, slo
        self.virtual, self.parallel, self.progress = virtual, parallel, progress
        self.on_interrupted = runs.get("on_interrupted")
        self.max_error_rate = runs.get("max_error_rate")
        self._by_params: dict[str, dict[str, Any]] = {}  # entry(): points by their params
        root = Path(out_dir or cfg.out_dir or "sweeps")
        # never a symlink out of the output folder (workbench.storage.rundir)
        self.dir = (contained_dir(root, sweep_id) if sweep_id
                    else fresh_sweep_dir(root, kind))
        spec_doc = json.loads(json.dumps(
            {**spec, "repeats": repeats, "slo": slo.to_dict() if slo else None,
             "mode": "virtual" if virtual else "live"}, default=str))
        self.sweep = self._open(kind, spec_doc, list(axes), label)
        self._pool: concurrent.futures.Executor | None = None

    def _open(self, kind: str, spec_doc: dict[str, Any], axes: list[str],
              label: str | None) -> Sweep:
        base = {k: v for k, v in self.cfg.to_dict().items() if k not in _PLACE_KEYS}
        base = json.loads(json.dumps(base, default=str))
        if (self.dir / SWEEP_MANIFEST).is_file():
            sweep = load_sweep(self.dir)
            m = sweep.manifest
            diffs = [k for k, a, b in (("kind", m.kind, kind), ("spec", m.spec, spec_doc),
                                       ("base_config", m.base_config, base)) if a != b]
            if diffs:
                raise ConfigError(
                    f"{self.dir / SWEEP_MANIFEST} holds a different sweep ({', '.join(diffs)} "
                    "differ): resume it with the same settings, or give a new sweep id"
                )
            m.status = "running"
            m.resumed = [*(m.resumed or []), dt.datetime.now(dt.UTC).isoformat()]
            log.info("resuming sweep %s", self.dir)
            return sweep
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = SweepManifest(
            sweep_id=self.dir.name,
            kind=kind,
            label=label or self.cfg.label,
            mode="virtual" if self.virtual else "live",
            target=self.cfg.target.url,
            axes=axes,
            spec=spec_doc,
            base_config=base,
            slo=self.slo.to_dict() if self.slo else None,
            slo_text=str(self.slo) if self.slo else None,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
            status="running",
        )
        sweep = Sweep(self.dir, manifest)
        write_sweep(sweep)
        return sweep

    def save(self) -> None:
        write_sweep(self.sweep)

    def entry(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest entry of ``params`` (created, pending, when new)."""
        key = json.loads(json.dumps(dict(params), default=str))
        points = self.sweep.manifest.points
        if len(self._by_params) != len(points):  # a resumed sweep's points, indexed once
            self._by_params = {}
            for p in points:
                self._by_params.setdefault(_params_key(p["params"]), p)
        # a dict, not a scan of every point per point: 10,000 points took ~15 s before
        # the first one ran, deaf to Ctrl-C (docs/config-bounds.md, "Plans")
        found = self._by_params.get(_params_key(key))
        if found is not None:
            return found
        entry = {"index": len(points), "params": key,
                 "label": spec_mod.label(key), "status": "pending", "runs": []}
        points.append(entry)
        self._by_params[_params_key(key)] = entry
        return entry

    @contextlib.contextmanager
    def ends_on_error(self) -> Iterator[None]:
        """The body of a sweep: an interruption finishes the sweep ``interrupted``, any other
        error ``failed``, and re-raises; a body that returns leaves it to ``finish``."""
        try:
            yield
        except (asyncio.CancelledError, KeyboardInterrupt):
            sweep = self.finish("interrupted")
            if self.on_interrupted is not None:
                self.on_interrupted(sweep)
            raise
        except BaseException:
            self.finish("failed")
            raise

    def finish(self, status: str) -> Sweep:
        self.sweep.manifest.status = status
        self.sweep.manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
        self.save()
        if self._pool is not None:
            if status == "interrupted":  # the points' processes stop as a simulate does:
                for proc in multiprocessing.active_children():  # their runs saved cancelled
                    proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        return self.sweep

    def _repeat_cfg(self, entry: Mapping[str, Any], rep: int) -> RunConfig:
        cfg = spec_mod.apply(self.cfg, entry["params"])
        return cfg.replace(out_dir=str(self.dir / RUNS), run_id=f"p{entry['index']:03d}-r{rep}",
                           seed=self.cfg.seed + rep, label=f"{entry['label']} #{rep}")

    async def check(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Every point's config is valid, before the first request; a long first point and
        the points whose releases span more than a day are announced, once for the sweep
        (docs/arrival.md, "How long a run takes", "Arrival span"). Ctrl-C stops a long
        check."""
        from workbench.replay.plan import release_span_ms
        from workbench.replay.prepare import load_workload

        workloads: dict[str, Any] = {}  # by the trace and context a point reads
        # a resumed sweep's points done before run no more: nothing to say of them
        entries = [e for e in entries if not _done(e, self.repeats)]
        spans: dict[str, float] = {}  # by what sets a point's release offsets
        long: list[tuple[str, float]] = []  # (point, span) past a day
        for i, e in enumerate(entries):
            cfg = self._repeat_cfg(e, 0)
            read = repr((cfg.trace, cfg.context))  # (dataclasses: their fields)
            a = cfg.arrival  # what release_offsets_ms reads, and the units
            released = repr((read, a.mode, a.rate, a.arrival_process(), cfg.seed))
            if released not in spans:
                if read not in workloads:
                    workloads[read] = load_workload(cfg)
                spans[released] = release_span_ms(cfg, workloads[read])
                if i == 0:  # how long the first point to run takes
                    first = (e, cfg, workloads[read])
            if spans[released] > ARRIVAL_SPAN_WARN_MS:
                long.append((e["label"], spans[released]))
            if i % CHECK_YIELD_EVERY == CHECK_YIELD_EVERY - 1:
                await asyncio.sleep(0)  # the loop's signal handlers may cancel us here
        if long:
            swept = all(spec_mod.RATE in e["params"] for e in entries)
            self._say(_span_sentence(long, SWEPT_SPAN_REMEDY if swept else SPAN_REMEDY),
                      logging.WARNING)
        if entries:
            self._announce_floor(*first, len(entries) * self.repeats)

    def _announce_floor(self, e: Mapping[str, Any], cfg: RunConfig, workload: Any,
                        runs: int) -> None:
        from workbench.durations import duration_text
        from workbench.replay.plan import LONG_RUN_MS, build_plan, run_floor

        floor = run_floor(build_plan(cfg, workload), cfg.arrival)
        if floor is None or floor.floor_ms <= LONG_RUN_MS:
            return
        total = ("" if self.virtual or runs < 2 else
                 f"; its {runs} runs one after another: at least "
                 f"{duration_text(runs * floor.floor_ms)} in all")
        who = "the first point" if e["index"] == 0 else f"the first point to run ({e['label']})"
        self._say(f"{who}: {floor.sentence(self.virtual)}{total}", logging.WARNING)

    def _reuse(self, run_dir: Path) -> bool:
        """True when the repeat is complete on disk; an incomplete one is set aside."""
        if run_complete(run_dir):
            return True
        if run_dir.exists():
            n = 0
            while (aside := run_dir.with_name(f"{run_dir.name}.interrupted-{n}")).exists():
                n += 1
            shutil.move(str(run_dir), aside)
            self._say(f"{run_dir.relative_to(self.dir)} was incomplete: kept as "
                      f"{aside.relative_to(self.dir)}, and run again", logging.WARNING)
        return False

    async def measure_many(self, entries: Sequence[dict[str, Any]]) -> None:
        """Run every missing repeat of ``entries`` (concurrently in virtual time when
        ``parallel`` > 1), then pool each point."""
        jobs: list[tuple[dict[str, Any], int, RunConfig]] = []
        for e in entries:
            have = {r["repeat"] for r in e["runs"]}
            for rep in range(self.repeats):
                cfg = self._repeat_cfg(e, rep)
                run_dir = self.dir / RUNS / str(cfg.run_id)
                if rep in have and run_complete(run_dir):
                    self._say(f"{e['label']} #{rep}: finished before, kept")
                    continue
                e["runs"] = [r for r in e["runs"] if r["repeat"] != rep]
                if self._reuse(run_dir):
                    self._record(e, rep, cfg, {"action": "none", "ok": True,
                                               "reason": "resumed: the run was already on disk"},
                                 point_metrics(run_dir, self.slo))
                    self._say(f"{e['label']} #{rep}: finished before, kept")
                    continue
                jobs.append((e, rep, cfg))
        if self.virtual:
            await self._run_virtual(jobs)
        else:
            for e, rep, cfg in jobs:
                await self._run_live(e, rep, cfg)
        for e in entries:
            self._pool_point(e)
        self.save()

    async def _run_live(self, e: dict[str, Any], rep: int, cfg: RunConfig) -> None:
        from workbench.executors.dispatch import run_async

        self._say(f"{e['label']} #{rep}: running")
        result = await run_async(cfg, announced=True,  # once, by ``check``
                                 max_error_rate=self.max_error_rate)
        flushed = result.manifest.cache_flush or {}  # the run's own reset
        if not flushed.get("ok"):
            log.warning("sweep: prefix cache not reset before %s: %s", cfg.run_id,
                        flushed.get("detail"))
        metrics = point_metrics(str(result.run_dir), self.slo, result)
        self._record(e, rep, cfg, flushed, metrics)
        self.save()

    async def _run_virtual(self, jobs: Sequence[tuple[dict[str, Any], int, RunConfig]]) -> None:
        loop = asyncio.get_running_loop()
        slo = self.slo.to_dict() if self.slo else None
        if self.parallel > 1 and len(jobs) > 1 and self._pool is None:
            # each point's process ends with this one, however it ends (die_with_parent)
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.parallel, mp_context=spawn_context(), initializer=die_with_parent,
                initargs=(os.getpid(), signal.SIGKILL))
        executor = self._pool if self.parallel > 1 and len(jobs) > 1 else None
        flushed = {"action": "none", "ok": True,
                   "reason": "virtual time: every run starts a fresh engine core"}
        if executor is None:  # one at a time, on this thread: simulate's SIGINT/SIGTERM
            try:  # handlers save the point's run, then stop the sweep
                for e, rep, cfg in jobs:
                    self._say(f"{e['label']} #{rep}: simulating")
                    _, metrics = simulate_and_measure(cfg.to_dict(), slo, self.max_error_rate)
                    self._record(e, rep, cfg, flushed, metrics)
                    self.save()
            finally:  # the trace its points shared is not held past the sweep
                forget_traces()
            return
        futures = []
        for e, rep, cfg in jobs:
            self._say(f"{e['label']} #{rep}: simulating")
            with children_start():  # a submit may start a process
                fut = loop.run_in_executor(executor, simulate_and_measure, cfg.to_dict(), slo,
                                           self.max_error_rate)
            # a point stopped after the sweep was (its KeyboardInterrupt) is nobody's news
            fut.add_done_callback(_retrieved)
            futures.append(fut)
        for (e, rep, cfg), fut in zip(jobs, futures, strict=True):
            _, metrics = await fut
            self._record(e, rep, cfg, flushed, metrics)
            self.save()

    def _record(self, e: dict[str, Any], rep: int, cfg: RunConfig, flushed: Mapping[str, Any],
                metrics: Mapping[str, Any]) -> None:
        e["runs"].append({"repeat": rep, "run_id": cfg.run_id, "run_dir": f"{RUNS}/{cfg.run_id}",
                          "seed": cfg.seed, "flush": dict(flushed), "metrics": dict(metrics)})
        e["runs"].sort(key=lambda r: r["repeat"])

    def _pool_point(self, e: dict[str, Any]) -> None:
        pooled = pool([r["metrics"] for r in e["runs"]])
        e["metrics"] = pooled
        e["status"] = "done"
        if self.slo is not None:
            values = {b.key: pooled.get(f"slo:{b.key}") for b in self.slo.bounds}
            e["slo"] = self.slo.verdict(values, pooled.get("ok_rate"), pooled.get("requests"),
                                        pooled.get("ok"))
            spread = self.slo.spread([r["metrics"] for r in e["runs"]], pooled)
            if spread:
                e["slo"]["spread"] = spread
        self._say(f"{e['label']}: " + (_held_text(e["slo"]) if self.slo else "done"))

    def _say(self, text: str, level: int = logging.INFO) -> None:
        """``text`` to the progress callback, else the log at ``level``: once, not both
        (the CLI prints the one and shows the other's warnings); a warning told the
        callback starts ``WARNING:``."""
        if self.progress is None:
            log.log(level, "sweep %s: %s", self.dir.name, text)
            return
        log.debug("sweep %s: %s", self.dir.name, text)
        self.progress(f"WARNING: {text}" if level >= logging.WARNING else text)


def _held_text(verdict: Mapping[str, Any]) -> str:
    """``SLO held``, ``SLO broken``, with what weakens it: ``SLO held — too few requests
    to show it ...``, ``SLO broken — 1 of 3 repeats held it ...``."""
    notes = [unmeasured_phrase(verdict), spread_phrase(verdict)]
    if verdict["held"]:
        notes.append(thin_phrase(verdict))
    text = ("SLO held" if verdict["held"] else "SLO not judged" if verdict.get("unmeasured")
            else "SLO broken")
    notes = [n for n in notes if n]
    return f"{text} — {'; '.join(notes)}" if notes else text


#: what to do about a long span when the points set the rate (``--rate`` is theirs)
SWEPT_SPAN_REMEDY = "sweep higher arrival.rate values (units/s)"
#: points named in the span warning, at most (then "and N more")
SPAN_NAMED = 6


def _span_sentence(long: Sequence[tuple[str, float]], remedy: str) -> str:
    """The one warning of the points whose releases span more than a day: ``arrivals span
    1.2 days (100,000,000 ms) at rate=1 and rate=2: the last unit ...``, each span once
    with the points that have it (``span_warning``'s words), ``SPAN_NAMED`` points at
    most, then ``, and N more points``."""
    by_span: dict[str, list[str]] = {}
    for label, span in long:
        by_span.setdefault(span_words(span), []).append(label)
    parts, named = [], 0
    for words, labels in by_span.items():
        if not (take := labels[:SPAN_NAMED - named]):
            break
        named += len(take)
        parts.append(f"{words} at {' and '.join(take) if len(take) < 3 else ', '.join(take)}")
    more = f", and {counted(len(long) - named, 'more point')}" if len(long) > named else ""
    return span_sentence(f"{', '.join(parts)}{more}", remedy)


def _done(entry: Mapping[str, Any], repeats: int) -> bool:
    """A point done, with every repeat recorded (a resumed sweep keeps it)."""
    return entry.get("status") == "done" and len(entry.get("runs") or ()) >= repeats


def _params_key(params: Mapping[str, Any]) -> str:
    """A point's parameters as one hashable text (sorted JSON: equal mappings, equal text)."""
    return json.dumps(params, sort_keys=True, default=str)
