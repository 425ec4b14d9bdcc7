"""Process sharding: one run's units spread over N worker processes on this host
(docs/scale-out.md, "Worker processes on this host"). ``ShardedExecutor`` serves the Ray
launcher too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from workbench import safe_write as safe
from workbench.backends.base import make_codec
from workbench.backends.transport import Transport, TransportOptions
from workbench.clock import WallClock
from workbench.config import RunConfig
from workbench.context.tokens import run_pool
from workbench.errors import OutputWriteError, WorkbenchError
from workbench.executors.kinds import EXECUTORS
from workbench.records import RequestRecord
from workbench.replay.outcome import ShardOutcome, play_shard
from workbench.replay.prepare import run_on_fast_loop
from workbench.replay.runner import build_runner
from workbench.replay.session import ReplaySession, connection_warmer
from workbench.replay.shards import ShardPart, split_run
from workbench.replay.target import Target
from workbench.signals import die_with_parent
from workbench.spawning import children_start, spawn_context
from workbench.storage.rundir import RecordWriter, dumps_line, read_jsonl

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
EPOCH_LEAD_NS = 20_000_000  # t0 this far after the barrier: every worker is waiting by then
STOP_GRACE_S = 30.0
PROGRESS_EVERY_S = 0.2


class Launcher(Protocol):
    """Starts a sharded run's shards (worker processes, Ray actors) and waits for them."""

    async def launch(
        self, session: ReplaySession, shard_dir: Path, base_url: str, block_size: int | None,
        stop: asyncio.Event | None,
    ) -> None:  # fmt: skip
        """Play ``session.plan`` over the shards, each writing its files into ``shard_dir``."""


class ShardedExecutor:
    """The plan over N shards run by ``launcher``; this process owns target and scraper."""

    target = None  # the config's

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.shard_dir = Path()
        self._tmp: Path | None = None

    def open_files(self, session: ReplaySession) -> None:
        if session.run_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="workbench-shards-"))
            self.shard_dir = self._tmp
        else:  # claimed, with its manifest, by the session
            self.shard_dir = session.run_dir / "shards"
        safe.make_dir(self.shard_dir, parents=True)  # never a link out of the run

    async def play(
        self, session: ReplaySession, target: Target, stop: asyncio.Event | None
    ) -> None:
        s = session
        b = s.cfg.backend
        clock = WallClock()
        options = TransportOptions.of_run(s.cfg, target.base_url)
        async with Transport(options, clock) as transport:
            pool = run_pool(s.cfg.seed, b.token_salt, s.run_id)
            await s.check_target(transport, make_codec(b.name, **b.codec_options()), pool, target)
        block_size = await s.block_size(target)
        s.facts.block_size = block_size
        scraper = s.sampler(target, clock)
        if scraper is not None:
            await scraper.start()
        try:
            await self.launcher.launch(s, self.shard_dir, target.base_url, block_size, stop)
        finally:
            if scraper is not None:
                await scraper.stop()
                s.keep_scrape(scraper)
            self._merge(s)

    def _merge(self, s: ReplaySession) -> None:
        """Shard files → ``records`` / ``lifecycle`` in memory and in the run directory."""
        recs: list[RequestRecord] = []
        rows: list[dict[str, Any]] = []
        for f in sorted(self.shard_dir.glob("records-*.jsonl")):
            recs.extend(RequestRecord.from_dict(d) for d in read_jsonl(f))
        for f in sorted(self.shard_dir.glob("lifecycle-*.jsonl")):
            rows.extend(read_jsonl(f))
        recs.sort(key=lambda r: (r.end_ns or 0, r.unit_ordinal, r.round_idx))
        rows.sort(key=lambda r: (r.get("end_ns") or 0, r.get("unit_ordinal", 0)))
        s.records, s.lifecycle = recs, rows
        s.done = sum(1 for r in recs if not r.warmup)
        s.skipped = sum(1 for r in recs if not r.warmup and r.status == "skipped")
        if s.run_dir is not None:
            if s.write_error is not None:  # the shard files stay: they hold the records
                return
            for name, items in (("records", recs), ("lifecycle", rows)):
                target = s.run_dir / f"{name}.jsonl"
                try:  # NAME.tmp, never through a link, renamed into place (safe_write.py)
                    with safe.open_file(target, "wb", atomic=True) as fh:
                        fh.write(b"".join(dumps_line(x) for x in items))
                except OSError as exc:  # disk full: the shard files stay, the run fails
                    s.on_write_error(OutputWriteError(safe.temp_of(target), exc))
                    return
            shutil.rmtree(self.shard_dir, ignore_errors=True)
            if not s.keep:  # executor.keep_records: the merged files are the records
                s.records, s.lifecycle = [], []
        elif self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def shard_spec(s: ReplaySession, part: ShardPart, cfg: dict[str, Any], base_url: str,
               block_size: int | None) -> dict[str, Any]:
    """What a shard is sent: its config, its part of the plan, where the target is."""
    return {"cfg": cfg, "plan": part.plan, "run_id": s.run_id, "base_url": base_url,
            "block_size": block_size, "slot_offset": part.slot_offset}  # fmt: skip


def shard_facts(parts: list[ShardPart]) -> dict[str, Any]:
    """The manifest's ``executor`` facts of a split: each shard's concurrency and units."""
    return {"shard_concurrency": [p.max_concurrency for p in parts],
            "shard_units": [len(p.plan.units) for p in parts]}  # fmt: skip


async def play_spec(
    cfg: RunConfig,
    spec: dict[str, Any],
    *,
    sink: Callable[[RequestRecord], None],
    lifecycle_sink: Callable[[dict[str, Any]], None],
    ready: Callable[[], Awaitable[int | None]],
    started: Callable[[Any], None],
) -> ShardOutcome | None:
    """A shard plays ``spec``'s part on its own transport (``started`` gets its runner)."""
    clock = WallClock()
    async with Transport(TransportOptions.of_run(cfg, spec["base_url"]), clock) as transport:
        runner = build_runner(
            cfg,
            spec["plan"],
            run_id=spec["run_id"],
            sender=transport,
            clock=clock,
            sink=sink,
            lifecycle_sink=lifecycle_sink,
            block_size=spec["block_size"],
            slot_offset=spec["slot_offset"],
        )
        started(runner)
        return await play_shard(runner, warm=connection_warmer(cfg, transport), ready=ready)


def worker_cfg(cfg: RunConfig, part: ShardPart) -> dict[str, Any]:
    """A shard's config: its share of concurrency and warm-up, one worker, no run directory."""
    d = cfg.to_dict()
    d["arrival"]["max_concurrency"] = part.max_concurrency
    d["arrival"]["warmup"] = part.warmup
    d["executor"]["workers"] = 1
    d["out_dir"] = None
    # a real target's URL stays: its credentials go out and are registered in the worker
    d["target"] = {"url": "http://placeholder" if cfg.target.is_sim else cfg.target.url}
    return d


class ProcessLauncher:
    """Shards as worker processes on this host (``executor.kind = "processes"``)."""

    async def launch(
        self, session: ReplaySession, shard_dir: Path, base_url: str, block_size: int | None,
        stop: asyncio.Event | None,
    ) -> None:  # fmt: skip
        s = session
        n = s.cfg.executor.workers
        parts = split_run(s.plan, s.cfg.arrival.max_concurrency, s.cfg.arrival.warmup, n)
        ctx = spawn_context()
        pool = _Workers()
        try:
            for k, part in enumerate(parts):
                spec = shard_spec(s, part, worker_cfg(s.cfg, part), base_url, block_size)
                pool.start(ctx, {**spec, "shard": k, "shard_dir": str(shard_dir),
                                 "parent_pid": os.getpid()})  # fmt: skip
            await pool.gather("ready", READY_TIMEOUT_S)
            t0 = time.perf_counter_ns() + EPOCH_LEAD_NS
            pool.send(("start", t0))
            s.facts.executor = {"workers": n, "epoch_ns": t0, **shard_facts(parts)}
            results = await pool.until_done(stop, s.report_progress)
        finally:
            await pool.close()
        if pool.write_failed is not None:
            path, errno, reason = pool.write_failed
            s.on_write_error(OutputWriteError(path, OSError(errno, reason)))
        s.conclude([ShardOutcome.from_dict(results[k]) for k in sorted(results)],
                   stopped=pool.stopped)
        if len(results) < n:
            raise WorkbenchError(f"{n - len(results)} of {n} worker processes failed (see log)")


class _Workers:
    """The worker processes and their pipes, read on the event loop (no threads)."""

    def __init__(self) -> None:
        self.procs: dict[int, Any] = {}
        self.conns: dict[int, Connection] = {}
        self.stopped = False
        self.write_failed: tuple[str, int, str] | None = None  # (path, errno, reason)

    def start(self, ctx: Any, spec: dict[str, Any]) -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, spec), daemon=True)
        with children_start():
            proc.start()
        child.close()
        self.procs[spec["shard"]] = proc
        self.conns[spec["shard"]] = parent

    def send(self, msg: Any) -> None:
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.send(msg)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.send(("stop", None))

    async def _messages(self, timeout_s: float) -> list[tuple[int, Any]]:
        """Every message ready now, waiting up to ``timeout_s`` for the first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            got = []
            for k, conn in list(self.conns.items()):
                try:
                    while conn.poll():
                        got.append((k, conn.recv()))
                except (EOFError, OSError):
                    got.append((k, ("died", None)))
                    del self.conns[k]
            if got:
                return got
            await asyncio.sleep(0.005)
        return []

    async def gather(self, kind: str, timeout_s: float) -> None:
        waiting = set(self.conns)
        deadline = time.monotonic() + timeout_s
        while waiting:
            left = deadline - time.monotonic()
            msgs = await self._messages(max(0.0, left)) if left > 0 else []
            if not msgs:
                raise WorkbenchError(f"worker processes {sorted(waiting)} not {kind} in time")
            for k, (what, payload) in msgs:
                if what == kind:
                    waiting.discard(k)
                elif what in ("error", "died"):
                    raise WorkbenchError(f"worker {k} failed before the start: {payload}")

    async def until_done(self, stop: asyncio.Event | None, progress: Any) -> dict[int, Any]:
        results: dict[int, Any] = {}
        done_counts = dict.fromkeys(self.conns, 0)
        while len(results) + self._lost(results) < len(self.procs):
            if stop is not None and stop.is_set():
                self.stop()
            try:
                msgs = await self._messages(0.5)
            except asyncio.CancelledError:
                self.stop()
                raise
            for k, (what, payload) in msgs:
                if what == "progress":
                    done_counts[k] = payload
                    progress(sum(done_counts.values()))
                elif what == "done":
                    results[k] = payload
                elif what == "write_failed":  # one shard's disk is everyone's: stop all
                    self.write_failed = self.write_failed or payload
                    self.stop()
                elif what in ("error", "died") and k not in results:
                    log.error("worker %d failed: %s", k, payload or "process ended")
                    self.procs[k].join(timeout=0)
        return results

    def _lost(self, results: dict[int, Any]) -> int:
        return sum(1 for k in self.procs if k not in results and k not in self.conns)

    async def close(self) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs.values():
            while proc.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if proc.is_alive():
                self.send(("stop", None))
                proc.terminate()
            proc.join(timeout=5)
        for conn in self.conns.values():
            conn.close()


def worker_main(conn: Connection, spec: dict[str, Any]) -> None:
    """Entry point of a worker process (spawned: nothing inherited but ``spec``)."""
    die_with_parent(spec["parent_pid"], signal.SIGKILL)

    cfg = RunConfig.from_dict(spec["cfg"])
    try:
        run_on_fast_loop(_worker(conn, spec, cfg), cfg.executor.uvloop)
    except BaseException as exc:  # report, never hang the parent
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


async def _worker(conn: Connection, spec: dict[str, Any], cfg: RunConfig) -> None:
    k, shard_dir = spec["shard"], Path(spec["shard_dir"])
    flush = cfg.executor.record_flush_ms or None
    runner: Any = None

    def failed(err: OutputWriteError) -> None:  # the first failed write stops the run
        if runner is not None:
            runner.stop("write failed")
        with contextlib.suppress(OSError):
            conn.send(("write_failed", (err.path, err.errno, err.reason)))

    recs = RecordWriter(shard_dir / f"records-{k}.jsonl", max_delay_ms=flush, on_error=failed)
    life = RecordWriter(shard_dir / f"lifecycle-{k}.jsonl", max_delay_ms=flush, on_error=failed)
    done = 0

    def on_record(rec: RequestRecord) -> None:
        nonlocal done
        recs.write(rec)
        done += 0 if rec.warmup else 1

    watcher: asyncio.Future[None] | None = None

    async def ready() -> int | None:  # the barrier: the parent's epoch, or a stop
        nonlocal watcher
        conn.send(("ready", None))
        t0 = await _wait_start(conn)
        if t0 is not None:  # from now on the pipe is the watcher's
            watcher = asyncio.ensure_future(_watch_pipe(conn, runner, lambda: done))
        return t0

    def started(r: Any) -> None:
        nonlocal runner
        runner = r

    try:
        outcome = await play_spec(
            cfg, spec, sink=on_record, lifecycle_sink=life.write, ready=ready, started=started
        )
        if outcome is not None:
            conn.send(("done", outcome.to_dict()))
    finally:
        if watcher is not None:
            watcher.cancel()
        recs.close()
        life.close()


async def _wait_start(conn: Connection) -> int | None:
    """Block (politely) until the parent's ``start`` (the epoch) or ``stop``."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if conn.poll():
                what, payload = conn.recv()
                return int(payload) if what == "start" else None
        except (EOFError, OSError):  # the parent is gone
            return None
        await asyncio.sleep(0.001)
    return None


async def _watch_pipe(conn: Connection, runner: Any, done: Any) -> None:
    """Forward ``stop`` to the runner; report progress every ``PROGRESS_EVERY_S``."""
    last = -1
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        n = done()
        try:
            if n != last:
                conn.send(("progress", n))
                last = n
            if conn.poll():
                what, _ = conn.recv()
                if what == "stop":
                    runner.stop("stopped")
        except (EOFError, OSError):  # EOF: the parent is gone; stop sending its plan
            runner.stop("parent gone")
            return


EXECUTORS.add("processes", lambda _cfg: ShardedExecutor(ProcessLauncher()))
