"""The Ray executor: a sharded run's shards on Ray actors, records streamed back to the driver.

``executor: {kind: ray, workers: N, address: ...}``. The split, the driver owning the
target, the NTP-style clock offsets, the one epoch and the streaming back are
docs/scale-out.md's; Ray is optional (``pip install 'workbench[ray]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from pathlib import Path
from typing import Any

from workbench.config import RunConfig
from workbench.errors import ConfigError, WorkbenchError
from workbench.executors.kinds import EXECUTORS
from workbench.executors.processes import (
    ShardedExecutor,
    play_spec,
    shard_facts,
    shard_spec,
    worker_cfg,
)
from workbench.records import RequestRecord
from workbench.replay.outcome import ShardOutcome
from workbench.replay.session import ReplaySession
from workbench.replay.shards import ShardPart, split_run
from workbench.storage.rundir import RecordWriter

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'workbench[ray]'  (or: pip install 'ray>=2.9')"
ACTOR_CPUS = 1.0  # logical CPUs each actor asks Ray for (placement, not a limit)
CLOCK_SAMPLES = 8
READY_TIMEOUT_S = 180.0
EPOCH_LEAD_NS = 100_000_000  # start this far after the barrier (Ray call latency ≪ this)
POLL_S = 0.05
STOP_GRACE_S = 30.0


def require_ray() -> Any:
    """The ``ray`` module, or a ConfigError naming the pip command."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"executor.kind 'ray' needs Ray: {INSTALL_HINT}") from None
    return ray


def host_id() -> str:
    """Hostname + kernel boot id: equal ids share one CLOCK_MONOTONIC."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{socket.gethostname()}/{boot}"


def shift_ns(row: dict[str, Any], shift: int) -> dict[str, Any]:
    """Every ``*_ns`` integer (and the token-time list) of a row moved by ``shift`` ns."""
    if not shift:
        return row
    for key, value in row.items():
        if key.endswith("_ns") and isinstance(value, int) and not isinstance(value, bool):
            row[key] = value + shift
    if isinstance(row.get("token_times_ns"), list):
        row["token_times_ns"] = [t + shift for t in row["token_times_ns"]]
    return row


class ShardActor:
    """One shard's runner inside a Ray actor (an async actor: one asyncio loop)."""

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._lifecycle: list[dict[str, Any]] = []
        self._done = 0
        self._runner: Any = None
        self._task: asyncio.Future[Any] | None = None
        self._warmed: asyncio.Future[bool] | None = None  # the warm-up is done
        self._barrier: asyncio.Future[int] | None = None  # the epoch, from begin()

    def clock(self) -> tuple[int, str]:
        return time.time_ns(), host_id()

    async def prepare(self, spec: dict[str, Any]) -> bool:
        """Start the shard; return once its warm-up is done and it waits for ``begin``."""
        self._barrier = asyncio.get_running_loop().create_future()
        self._warmed = asyncio.get_running_loop().create_future()
        play = play_spec(
            RunConfig.from_dict(spec["cfg"]),
            spec,
            sink=self._on_record,
            lifecycle_sink=self._lifecycle.append,
            ready=self._at_barrier,
            started=self._started,
        )
        self._task = asyncio.ensure_future(play)
        await asyncio.wait({self._warmed, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():  # the warm-up failed: say so here
            self._task.result()
        return True

    async def _at_barrier(self) -> int | None:
        """``play_shard``'s barrier: tell ``prepare`` the warm-up is done, wait for ``begin``."""
        assert self._warmed is not None and self._barrier is not None
        self._warmed.set_result(True)
        return int(await self._barrier)

    def _started(self, runner: Any) -> None:
        self._runner = runner

    def _on_record(self, rec: RequestRecord) -> None:
        self._records.append(rec.to_dict())
        self._done += 0 if rec.warmup else 1

    async def begin(self, t0_perf_ns: int | None, t0_wall_ns: int) -> int:
        """Start from the epoch (the driver's ``perf_counter`` on its host, else a corrected wall
        time); return it on this actor's ``perf_counter``."""
        t0 = t0_perf_ns
        if t0 is None:
            t0 = time.perf_counter_ns() + (t0_wall_ns - time.time_ns())
        assert self._barrier is not None
        self._barrier.set_result(t0)
        return t0

    async def finish(self) -> dict[str, Any]:
        """Wait for the shard to end; its client self-measurement and stop reason."""
        outcome = await self._task if self._task is not None else None
        return (outcome or ShardOutcome.of(self._runner)).to_dict()

    def take_finished(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """Records and lifecycle rows finished since the last call, and the done count."""
        recs, rows = self._records[:], self._lifecycle[:]
        self._records.clear()
        self._lifecycle.clear()
        return recs, rows, self._done

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.stop("stopped")


class RayLauncher:
    """Shards on Ray actors (``executor.kind = "ray"``), for a ``ShardedExecutor``."""

    def __init__(self) -> None:
        self._started_ray = False
        self._stopped = False

    async def launch(
        self, session: ReplaySession, shard_dir: Path, base_url: str, block_size: int | None,
        stop: asyncio.Event | None,
    ) -> None:  # fmt: skip
        s = session
        ray = require_ray()
        self._connect(ray, s.cfg)
        n = s.cfg.executor.workers
        parts = split_run(s.plan, s.cfg.arrival.max_concurrency, s.cfg.arrival.warmup, n)
        remote = ray.remote(max_concurrency=64)(ShardActor)
        actors = [
            remote.options(num_cpus=ACTOR_CPUS, scheduling_strategy="SPREAD").remote()
            for _ in range(n)
        ]
        try:
            clocks = [await _measure_clock(a) for a in actors]
            specs = [shard_spec(s, p, actor_cfg(s.cfg, p), base_url, block_size) for p in parts]
            ready = [_aw(a.prepare.remote(spec)) for a, spec in zip(actors, specs, strict=True)]
            await asyncio.wait_for(asyncio.gather(*ready), READY_TIMEOUT_S)
            results = await self._run_shards(s, shard_dir, actors, clocks, stop)
        finally:
            for a in actors:
                with contextlib.suppress(Exception):
                    ray.kill(a)
            if self._started_ray:
                ray.shutdown()
        s.facts.executor = {
            "kind": "ray", "workers": n, "address": getattr(s.cfg.executor, "address", None),
            **shard_facts(parts), "epoch_ns": s.t0_ns, "clocks": clocks,
        }  # fmt: skip
        s.conclude([ShardOutcome.from_dict(r) for r in results], stopped=self._stopped)

    def _connect(self, ray: Any, cfg: RunConfig) -> None:
        address = getattr(cfg.executor, "address", None)
        if address:
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False)
        elif not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
            self._started_ray = True

    async def _run_shards(
        self, s: ReplaySession, shard_dir: Path, actors: list[Any], clocks: list[dict[str, Any]],
        stop: asyncio.Event | None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Start every actor on one epoch, stream their records to shard files until done."""
        flush = s.cfg.executor.record_flush_ms or None
        writers = [
            (RecordWriter(shard_dir / f"records-{k}.jsonl", max_delay_ms=flush),
             RecordWriter(shard_dir / f"lifecycle-{k}.jsonl", max_delay_ms=flush))
            for k in range(len(actors))
        ]  # fmt: skip
        t0_perf, t0_wall = time.perf_counter_ns() + EPOCH_LEAD_NS, time.time_ns() + EPOCH_LEAD_NS
        s.t0_ns = t0_perf
        starts = [
            _aw(a.begin.remote(t0_perf if c["same_host"] else None, t0_wall + c["offset_ns"]))
            for a, c in zip(actors, clocks, strict=True)
        ]
        for c, t0_local in zip(clocks, await asyncio.gather(*starts), strict=True):
            c["shift_ns"] = t0_perf - t0_local  # 0 on the driver's host
        runs = [_aw(a.finish.remote()) for a in actors]
        pending, stopped = set(runs), False
        try:
            while pending:
                _, pending = await asyncio.wait(pending, timeout=POLL_S)
                if stop is not None and stop.is_set() and not stopped:
                    stopped = True
                    for a in actors:
                        a.stop.remote()
                await self._collect(s, actors, clocks, writers)
            results = [r.result() for r in runs]
        except asyncio.CancelledError:
            for a in actors:
                a.stop.remote()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*runs), STOP_GRACE_S)
            await self._collect(s, actors, clocks, writers)
            raise
        finally:
            for rw, lw in writers:
                rw.close()
                lw.close()
        self._stopped = stopped
        return results

    async def _collect(
        self, s: ReplaySession, actors: list[Any], clocks: list[dict[str, Any]],
        writers: list[tuple[Any, Any]],
    ) -> None:  # fmt: skip
        """The actors' finished rows, shifted onto the driver's clock, into the shard files."""
        batches = await asyncio.gather(*(_aw(a.take_finished.remote()) for a in actors))
        done = 0
        for (recs, rows, n), c, (rw, lw) in zip(batches, clocks, writers, strict=True):
            shift = c["shift_ns"]
            for rec in recs:
                rw.write(shift_ns(rec, shift))
            for row in rows:
                lw.write(shift_ns(row, shift))
            done += n
        s.report_progress(done)


def actor_cfg(cfg: RunConfig, part: ShardPart) -> dict[str, Any]:
    """A shard's config on an actor: a worker's (``processes.worker_cfg``), run locally."""
    d = worker_cfg(cfg, part)
    d["executor"].update(kind="local", address=None)
    return d


def _aw(ref: Any) -> asyncio.Future[Any]:
    """A Ray ObjectRef as an asyncio future."""
    return asyncio.wrap_future(ref.future())


async def _measure_clock(actor: Any) -> dict[str, Any]:
    """Min-RTT estimate of ``actor wall clock − driver wall clock`` (error ≤ RTT/2)."""
    best: tuple[int, int, str] | None = None
    for _ in range(CLOCK_SAMPLES):
        t1 = time.time_ns()
        actor_ns, host = await _aw(actor.clock.remote())
        t2 = time.time_ns()
        rtt, offset = t2 - t1, actor_ns - (t1 + t2) // 2
        if best is None or rtt < best[0]:
            best = (rtt, offset, host)
    if best is None:
        raise WorkbenchError("no clock sample from a Ray actor")
    rtt, offset, host = best
    same = host == host_id()
    return {"host": host, "same_host": same, "offset_ns": 0 if same else offset,
            "measured_offset_ns": offset, "rtt_ns": rtt}  # fmt: skip


EXECUTORS.add("ray", lambda _cfg: ShardedExecutor(RayLauncher()))
