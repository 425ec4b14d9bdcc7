"""``simulate``: a run in virtual time, through the one session lifecycle (docs/virtual-time.md).

Only the target (``replay.engine_target``: the engine on a ``VirtualClock``, no HTTP) and
the executor (every shard on the one virtual loop) differ from a live replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
from collections.abc import Callable, Iterator
from typing import Any

from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.executors.kinds import EXECUTORS
from workbench.records import RunResult, Workload
from workbench.replay.engine_target import EngineTarget
from workbench.replay.loops import run_anywhere
from workbench.replay.outcome import play_shard, play_shards
from workbench.replay.prepare import coerce_config, prepare
from workbench.replay.runner import build_runner
from workbench.replay.session import ReplaySession, watch_stop
from workbench.replay.shards import split_run
from workbench.replay.target import Target
from workbench.signals import SignalStop, stop_on_signals
from workbench.sim.cluster import split_knobs
from workbench.sim.config import EngineConfig
from workbench.sim.faults import Faults

GC_GEN0_THRESHOLD = 100_000  # allocations between young-generation collections
# Executor options that act on sockets or the loop, which virtual time has none of
VIRTUAL_NOT_APPLICABLE = ("uvloop", "pace_ms", "warm_connections", "address")


def simulate(
    cfg: RunConfig | dict[str, Any],
    *,
    engine: EngineConfig | dict[str, Any] | None = None,
    workload: Workload | None = None,
    on_cancelled: Callable[[RunResult], None] | None = None,
    announced: bool = False,
    max_error_rate: float | None = None,
) -> RunResult:
    """Replay ``cfg`` in virtual time against an ``EngineConfig`` (default: ``cfg.target.engine``):
    the records of a live replay, on virtual nanoseconds, with no socket and no sleep.
    ``announced``: the caller has said how long the run takes and how long its releases
    span (``prepare``);
    ``max_error_rate``: the threshold the run is judged by, recorded in its manifest
    (``RunManifest.max_error_rate``)."""
    if isinstance(engine, dict):  # the config says which engine ran (and so the digest)
        cfg = coerce_config(cfg)
        cfg = cfg.replace(**{"target.engine": {**cfg.target.engine, **engine}})
        engine = None
    run = prepare(cfg, workload, virtual=True, announced=announced)
    executor = virtual_executor(run.cfg, engine)
    # SIGINT/SIGTERM stop the run as a live one: saved as cancelled, then KeyboardInterrupt
    with stop_on_signals() as signalled:
        executor.signalled = signalled
        manifest = run.manifest(**executor.target.manifest_facts())
        manifest.max_error_rate = max_error_rate
        session = ReplaySession(run.cfg, run.plan, run.run_id, manifest, executor)
        session.on_cancelled = on_cancelled  # (a stopped run: told before the interrupt)
        with rare_collections():  # also from a running loop (a notebook cell)
            result = run_anywhere(session.run(None), virtual=True)
    if signalled.hit:  # saved as cancelled; now stop as replay does
        raise KeyboardInterrupt(f"signal {signalled.name}")
    return result


def virtual_executor(cfg: RunConfig, engine: EngineConfig | None = None) -> VirtualExecutor:
    """The virtual executor of ``cfg``: its target the engine given, or the one
    ``target.engine`` describes (and its cluster); a bad knob names itself before
    anything runs."""
    cluster = None
    if engine is None:
        try:
            knobs, cluster = split_knobs(cfg.target.engine)
            engine = EngineConfig.from_knobs(**knobs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"target.engine: {exc}") from None
    _refuse_faults(engine)
    return VirtualExecutor(EngineTarget(engine, cluster, release=bool(cfg.out_dir)))


def _refuse_faults(engine: EngineConfig) -> None:
    """A fault switch acts at the embedded engine's HTTP server (docs/embedded-engine.md,
    "Fault switches"), which a virtual-time run does not have: refused by name, not ignored."""
    faults = engine.faults
    if faults.active:
        default = Faults()
        names = [f.name for f in dataclasses.fields(faults)
                 if getattr(faults, f.name) != getattr(default, f.name)]
        raise ConfigError(
            f"target.engine.{', '.join(names)}: a fault switch acts at the embedded engine's "
            "HTTP server, and a virtual-time run (simulate, sweep, plan) has none: replay "
            "against `workbench sim serve` to test faults")


class VirtualExecutor:
    """The plan on the engine's virtual clock: one runner per shard (``replay.shards``), all
    on the one loop; the executor options act as live but for ``VIRTUAL_NOT_APPLICABLE``.
    No client self-measurement: no wall clock to measure by."""

    def __init__(self, target: EngineTarget) -> None:
        self.target = target
        #: SIGINT/SIGTERM caught around the run (``simulate``: ``stop_on_signals``)
        self.signalled = SignalStop()

    def open_files(self, session: ReplaySession) -> None:
        session.open_writers(per_turn=True)  # docs/virtual-time.md, "Record writes"

    async def play(self, session: ReplaySession, target: Target,
                   stop: asyncio.Event | None) -> None:
        s, engine, clock = session, self.target, self.target.clock
        ex = s.cfg.executor
        parts = split_run(s.plan, s.cfg.arrival.max_concurrency, s.cfg.arrival.warmup,
                          ex.workers)
        s.facts.virtual_executor = {
            "shards": ex.workers, "block_hashes": ex.block_hashes, "gc_freeze": ex.gc_freeze,
            "not_applicable": list(VIRTUAL_NOT_APPLICABLE),
        }  # fmt: skip
        # the plan's or the engine's, both in the manifest already: facts.block_size stays None
        block_size = await s.block_size(engine)
        assert engine.sender is not None  # the target is open
        engine.sender.bounds = bounds = s.cfg.arrival.virtual_bounds(s.cfg.backend.stream)
        if bounds != (None, None):  # (absent otherwise: such a run's manifest is unchanged)
            s.facts.virtual_executor["timeouts_applied"] = {
                "request_timeout_s": bounds[0], "stream_idle_timeout_s": bounds[1]}
        runners = []
        for part in parts:  # a shard is one worker with its share of the slots
            shard_cfg = s.cfg if ex.workers == 1 else s.cfg.replace(**{
                "arrival.max_concurrency": part.max_concurrency, "executor.workers": 1})
            runner = build_runner(
                shard_cfg, part.plan, run_id=s.run_id, sender=engine.sender, clock=clock,
                sink=s.on_record, lifecycle_sink=s.on_lifecycle, block_size=block_size,
                slot_offset=part.slot_offset,
            )
            runner.measure.series = False  # no client measurement in virtual time
            runners.append(runner)

        def stop_all() -> None:  # SIGINT/SIGTERM: stop as a live run stops
            for r in runners:
                r.stop("stopped")

        watchers = [asyncio.ensure_future(watch_stop(stop, r)) for r in runners if stop]
        await s.flush_cache(engine, {})
        sampler = s.sampler(engine, clock)
        assert sampler is not None  # the engine's counters are always sampled
        await sampler.start()
        t0 = clock.now_ns()
        self.signalled.arm(asyncio.get_running_loop(), stop_all)
        try:
            shards = [await play_shard(runners[0])] if len(runners) == 1 else \
                await play_shards(runners, clock.now_ns)
        finally:
            self.signalled.disarm()
            await sampler.stop()
            for w in watchers:
                w.cancel()
            s.keep_scrape(sampler)
        s.facts.virtual_duration_s = (clock.now_ns() - t0) / 1e9
        if self.signalled.hit:
            s.facts.stop_signal = self.signalled.name
        s.conclude([o for o in shards if o is not None], stopped=self.signalled.hit,
                   measured=False)


EXECUTORS.add("virtual", virtual_executor)


@contextlib.contextmanager
def rare_collections(gen0: int = GC_GEN0_THRESHOLD) -> Iterator[None]:
    """Run with the collector's first generation ``gen0`` allocations wide (CPython: 700),
    restored afterwards; cycles are still collected, in larger batches (docs/virtual-time.md)."""
    old = gc.get_threshold()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
