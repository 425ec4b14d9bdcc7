"""One run's lifecycle, live or virtual, and the executor interface (docs/executors.md).

A ``ReplaySession`` owns the run directory, manifest and summary, opens its ``Target``,
has its ``Executor`` play the plan, and offers the steps executors share. The manifest's
other writers are ``replay.prepare`` and ``replay.outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from workbench import heap, redact
from workbench.backends.extras import resolve_headers
from workbench.backends.flush import NOT_ASKED, FlushOutcome
from workbench.backends.preflight import preflight_prefix_cache
from workbench.backends.served import (
    ServedContext,
    listed_models,
    served_context,
    simulated_engine,
)
from workbench.backends.transport import Transport
from workbench.clock import Clock
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool
from workbench.errors import ConfigError, OutputWriteError
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.replay.outcome import RunOutcome, ShardOutcome
from workbench.replay.plan import Plan
from workbench.replay.runner import Runner
from workbench.replay.target import HttpTarget, Sampler, Target
from workbench.signals import held, stop_signal_name
from workbench.storage.rundir import RecordWriter, claim_run_dir, write_manifest

if TYPE_CHECKING:
    from workbench.metrics.columns import RecordTables

log = logging.getLogger(__name__)

WARM_MAX = 1024  # keep-alive connections opened before a run (executor.warm_connections)


@dataclass
class RunFacts:
    """What an executor reports of how it played the run, written into the manifest at the end."""

    block_size: int | None = None  # the block size the client hashed with
    executor: dict[str, Any] | None = None  # a sharded run's split, epoch, clocks
    virtual_executor: dict[str, Any] | None = None  # virtual time: shards and options
    virtual_duration_s: float | None = None
    stop_signal: str | None = None  # the signal that stopped a virtual run (live: _finalize)


class Executor(Protocol):
    """Where a session's plan is played (``workbench.executors``)."""

    @property
    def target(self) -> Target | None:
        """The executor's own target (virtual time: the engine); None: ``HttpTarget``."""

    def open_files(self, session: ReplaySession) -> None:
        """Prepare where records and lifecycle rows go before the target opens."""

    async def play(
        self, session: ReplaySession, target: Target, stop: asyncio.Event | None
    ) -> None:
        """Play ``session.plan`` against the opened ``target`` (each shard through
        ``replay.outcome.play_shard``); outcomes to ``session.conclude``, facts to
        ``session.facts``."""


class RecordSinks:
    """Where a run's records and lifecycle rows go: memory unless ``executor.keep_records``
    keeps them on disk only, and ``run_dir``'s JSONL files once ``open_writers`` ran.
    ``done``/``skipped`` count measured records; a failed write calls ``on_stop``."""

    def __init__(
        self, cfg: RunConfig, run_dir: Path | None, n_requests: int, manifest: RunManifest,
        *, progress: Callable[[int, int], None] | None = None,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.run_dir = run_dir
        self.progress = progress
        self.records: list[RequestRecord] = []
        self.lifecycle: list[dict[str, Any]] = []
        self._writers: dict[str, Any] = {}
        #: ``records.parquet`` written as ``records.jsonl`` is (``open_writers``), not read
        #: back from it after the run (None: read back)
        self.tables: RecordTables | None = None
        self._total = n_requests
        self.done = 0  # measured requests ended (warm-up excluded)
        self.skipped = 0
        self.write_error: OutputWriteError | None = None  # the first failed write
        self.profiler: Any = None  # backend.profile: started before the measured requests
        self.on_stop: Callable[[], Any] = lambda: None
        self.keep, why = cfg.keeps_records(n_requests)
        manifest.records_kept, manifest.records_kept_reason = self.keep, why
        if not self.keep:  # memory flat in the run's size: see workbench/heap.py
            heap.prepare()

    def open_writers(self, *, per_turn: bool = False) -> None:
        """``records.jsonl`` and ``lifecycle.jsonl`` written as the run goes (in-process):
        each line as it comes, or ``per_turn`` (virtual time) the lines of one loop turn in
        one write at the next turn, before the loop's next step (``RecordWriter``)."""
        if self.run_dir is None:
            return
        from workbench.metrics.columns import RecordTables, available
        from workbench.storage.columnar import PARQUET

        self.tables = RecordTables(self.run_dir / PARQUET) if available() else None
        flush_ms = self.cfg.executor.record_flush_ms
        for name in ("records", "lifecycle"):
            self._writers[name] = RecordWriter(
                self.run_dir / f"{name}.jsonl", max_delay_ms=flush_ms or None,
                per_turn=per_turn, on_error=self.on_write_error,
            )

    def close_writers(self) -> None:
        for w in self._writers.values():
            w.close()

    def on_write_error(self, err: OutputWriteError) -> None:
        """The first failed write stops the run (docs/run-directory.md, "A failed write")."""
        if self.write_error is None:
            self.write_error = err
            self.on_stop()

    def on_record(self, rec: RequestRecord) -> None:
        if self.keep:
            self.records.append(rec)
        if "records" in self._writers:
            line = self._writers["records"].write_line(rec)
            if self.tables is not None:
                self.tables.add(rec, line)
        if not rec.warmup:
            self.done += 1
            self.skipped += rec.status == "skipped"
            if not self.keep and self.done % heap.TRIM_EVERY == 0:
                heap.trim()
            self.report_progress(self.done)

    def on_lifecycle(self, row: dict[str, Any]) -> None:
        if self.keep:
            self.lifecycle.append(row)
        if "lifecycle" in self._writers:
            self._writers["lifecycle"].write(row)

    def report_progress(self, done: int) -> None:
        if self.progress is not None:
            self.progress(done, self._total)


class ReplaySession(RecordSinks):
    def __init__(
        self,
        cfg: RunConfig,
        plan: Plan,
        run_id: str,
        manifest: RunManifest,
        executor: Executor,
        *,
        progress: Callable[[int, int], None] | None = None,
        phase: Callable[[str], None] | None = None,
    ) -> None:
        self.executor = executor
        self.target: Target = executor.target or HttpTarget(cfg)
        self.facts = RunFacts()
        self.plan = plan
        self.run_id = run_id
        self.manifest = manifest
        self.phase = phase
        # the run's secrets are redacted from every file and log record from now on
        cfg.register_secrets()
        redact.install_log_redaction()
        self.timeline: list[dict[str, Any]] = []
        super().__init__(cfg, Path(cfg.out_dir) / run_id if cfg.out_dir else None, plan.n_rounds,
                         manifest, progress=progress)
        self.cancelled = False
        #: the server's context and the plan's rounds over it (``check_context``)
        self.server_context: dict[str, Any] | None = None
        #: what the server is sent besides requests (reset, /metrics): the user's headers
        #: and the run's credentials (``check_target``)
        self.server_headers: dict[str, str] = {}
        self.summary: dict[str, Any] | None = None  # what summary.json says, once written
        self.t0_ns: int | None = None  # a shard's common epoch (workbench.executors.processes)
        self.halt: asyncio.Event | None = None
        #: told the saved result of a run stopped from outside (a signal, a cancel), before
        #: the interrupt goes on: the command prints its headline (``commands/replay.py``)
        self.on_cancelled: Callable[[RunResult], None] | None = None

    def claim_dir(self) -> None:
        """``out_dir/<run_id>`` claimed with a ``running`` manifest (``rundir.claim_run_dir``)."""
        if self.run_dir is None:
            return
        self.run_dir = claim_run_dir(self.run_dir.parent, self.run_id, self.manifest.to_dict(),
                                     overwrite=self.cfg.overwrite)

    def tell(self, phase: str) -> None:
        """Where the run is, to whoever asked (``run_async(phase=...)``)."""
        if self.phase is not None:
            self.phase(phase)

    # -- the run ------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event | None) -> RunResult:
        self.claim_dir()
        # the executors stop on ``halt``: the caller's ``stop``, or a failed write
        self.halt = halt = asyncio.Event()
        self.on_stop = halt.set
        relay = asyncio.ensure_future(_relay(stop, halt)) if stop is not None else None
        self.executor.open_files(self)
        status = "failed"
        try:
            self.tell("starting")
            async with self.target.open() as target:
                self.manifest.target = target.facts()
                self.tell("running")
                try:
                    await self.executor.play(self, target, halt)
                finally:
                    await self.stop_profile()
            completion = self._completion()
            status = "cancelled" if self.cancelled else completion
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "cancelled"
            raise
        finally:
            if relay is not None:
                relay.cancel()
            self.tell("finalizing")
            with held():  # a second Ctrl-C waits for the save (docs/run-directory.md)
                self._finalize("failed" if self.write_error else status)
                if self.on_cancelled is not None and self.manifest.status == "cancelled":
                    self.on_cancelled(self.result)
        if self.write_error is not None:
            raise self.write_error
        return self.result

    def _completion(self) -> str:
        """``completed`` or ``partial`` (planned rounds skipped or never sent), recorded."""
        done = self.plan.completion(self.done, self.skipped, looped=self.cfg.loops_until_deadline)
        self.manifest.completion = done
        if done["status"] != "completed" and not self.cancelled:
            log.warning("run %s is partial: %s", self.run_id, done)
        return str(done["status"])

    def conclude(self, shards: list[ShardOutcome], *, stopped: bool = False,
                 measured: bool = True) -> None:
        """The shards' outcomes into the manifest, with the pooled client measurement unless
        not ``measured`` (virtual time); ``stopped``: stopped from outside."""
        from workbench.metrics.summary import client_stats

        outcome = RunOutcome.of(shards, stopped=stopped)
        self.cancelled = outcome.cancelled
        cap = self.cfg.arrival.max_concurrency
        outcome.write(self.manifest, client_stats(outcome.clients, cap) if measured else None)

    async def check_target(self, transport: Transport, codec: Any, pool: TokenPool,
                           target: Target) -> None:
        """Before the plan is sent (live): reachable, preflight, cache flush, profiler."""
        status, models = await transport.check_reachable()
        facts = self.manifest.target or {}
        if status == 200 and facts.get("kind") != "sim" and (sim := simulated_engine(models)):
            # a separately started `workbench sim serve`: the headline says the engine was
            # simulated, and with which step times (docs/embedded-engine.md)
            self.manifest.target = {**facts, "simulated": sim}
        if self.preflight_on(target) and status == 200:
            model = self.cfg.backend.options.get("model")
            listed = listed_models(models)
            if model and listed and model not in listed:  # llama.cpp serves it anyway
                log.warning("--model %r is not among the models the server lists (%s): a "
                            "server that serves one model may answer under any name "
                            "(llama.cpp), another refuses it (vLLM: HTTP 404)", model,
                            ", ".join(listed))
            self.check_context(served_context(models, model))
        await self.preflight(transport, codec, pool, target)
        # the user's --header values (a gateway's routing or auth header) and the run's own
        # credentials (URL or key): the reset reaches the server the requests reach
        user = resolve_headers(self.cfg.backend.options.get("headers") or {})
        self.server_headers = headers = {**user, **transport.auth_headers()}
        await self.flush_cache(target, headers)
        await self.start_profile(target, headers)

    def preflight_on(self, target: Target) -> bool:
        """``backend.preflight``, by default on against a real server."""
        enabled = self.cfg.backend.preflight
        return bool(target.preflight if enabled is None else enabled)

    def check_context(self, served: ServedContext | None) -> None:
        """The plan against the server's context (``GET /v1/models``), before any request:
        a ``ConfigError`` naming the rounds that cannot fit, unless ``context.max_model_len``
        (at most the server's) skips them (docs/real-engines.md, "Prompts longer than the
        server's context")."""
        if served is None:
            return
        limit, guard = served.tokens, self.cfg.context.max_model_len
        fit = self.plan.over_context(limit)
        self.server_context = {**served.to_dict(), **fit}
        if not fit["rounds_over"] or (guard is not None and guard <= limit):
            return
        over, units = fit["rounds_over"], fit["units_over"]
        where = f"GET /v1/models: {served.field} of {served.model!r}"
        guard_text = "" if guard is None else (
            f"; context.max_model_len {guard} is above it, so the context guard lets them "
            "through")
        raise ConfigError(
            f"the server's context is {limit} tokens ({where}), and {over} of "
            f"{fit['rounds']} planned requests (in {units} of {fit['units']} units) need "
            f"more: prompt + max tokens ≥ {limit}, the longest {fit['longest']}{guard_text}. "
            "The server would refuse them (HTTP 400) or cut their output. Replay what fits "
            f"with --max-model-len {limit} (context.max_model_len: each such round is skipped "
            "and ends its session), fewer or other units (--max-items, --offset), shorter "
            "outputs (--output-len), or serve a model with a longer context"
        )

    async def preflight(self, transport: Any, codec: Any, pool: TokenPool, target: Target
                        ) -> None:
        if not self.preflight_on(target):
            return
        result = await preflight_prefix_cache(transport, codec, pool.tail(8192))
        found = redact.obj(getattr(result, "__dict__", str(result)))
        if self.server_context is not None and isinstance(found, dict):
            found["server_context"] = self.server_context
        self.manifest.preflight = found

    async def flush_cache(self, target: Target, headers: Mapping[str, str]) -> None:
        """``backend.flush_cache`` after the preflight, before any request of the plan;
        told in the manifest's ``cache_flush`` (docs/cache-isolation.md)."""
        mode = self.cfg.backend.flush_cache
        if mode is False:
            self.manifest.cache_flush = {"mode": False, **FlushOutcome(detail=NOT_ASKED).to_dict()}
            return
        outcome = await target.flush(mode, self.cfg.backend.name, headers)
        # the server's answer may echo the request's headers: redacted before it is kept
        self.manifest.cache_flush = redact.obj({"mode": mode, **outcome.to_dict()})
        if outcome.ok:
            log.info("prefix cache reset (%s)", outcome.endpoint)
        elif mode is True:
            raise ConfigError(
                f"backend.flush_cache true, but the server's prefix cache was not reset: "
                f"{outcome.detail}. Start vLLM with VLLM_SERVER_DEV_MODE=1 (SGLang serves "
                "/flush_cache), or set backend.flush_cache 'auto' and backend.token_salt "
                "'run' to isolate this run by its tokens instead"
            )
        else:
            log.warning("prefix cache not reset before the run: %s", outcome.detail)

    async def start_profile(self, target: Target, headers: Mapping[str, str]) -> None:
        """``backend.profile``: start the engine's profiler (``stop_profile`` ends it)."""
        if not self.cfg.backend.profile:
            return
        from workbench.backends.profile import Profiler

        self.profiler = Profiler(target.base_url, self.cfg.backend.name, headers,
                                 self.cfg.backend.profile_dir)
        try:
            await self.profiler.start()
        finally:
            self.manifest.profile = redact.obj(self.profiler.info)

    async def stop_profile(self) -> None:
        """Stop the profiler; the manifest's ``profile`` says what the server answered."""
        profiler, self.profiler = self.profiler, None
        if profiler is not None and profiler.started_at is not None:
            self.manifest.profile = info = redact.obj(await profiler.stop())
            log.info("profile: %s", info.get("where"))

    async def block_size(self, target: Target) -> int | None:
        """The plan's block size, else the target's."""
        return self.plan.block_size or await target.block_size(self.server_headers)

    def sampler(self, target: Target, clock: Clock) -> Sampler | None:
        """The target's server sampling (``backend.scrape_interval_s``), not yet started."""
        return target.sampler(self.cfg, clock, self.server_headers)

    def keep_scrape(self, sampler: Sampler) -> None:
        """A stopped sampler's rows as the timeline, its description as ``metrics_scrape``."""
        self.timeline = list(sampler.timeline)
        self.manifest.metrics_scrape = sampler.describe()

    # -- closing ------------------------------------------------------------------------
    @property
    def result(self) -> RunResult:
        return RunResult(
            self.run_id, self.records, manifest=self.manifest.copy(), lifecycle=self.lifecycle,
            metrics_timeline=self.timeline,
            run_dir=str(self.run_dir) if self.run_dir else None,
            cancelled=self.manifest.status == "cancelled", summary=self.summary,
        )

    def _finalize(self, status: str) -> None:
        m, f = self.manifest, self.facts
        m.block_size, m.executor, m.virtual_executor = f.block_size, f.executor, f.virtual_executor
        m.virtual_duration_s, m.stop_signal = f.virtual_duration_s, f.stop_signal
        if status == "cancelled" and m.stop_signal is None:  # a live run's signal, if one came
            m.stop_signal = stop_signal_name()
        self.manifest.status = status
        self.manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
        self.close_writers()
        if self.run_dir is None:
            return
        try:
            self._write_outputs()
        except OutputWriteError as exc:
            self.on_write_error(exc)
        finally:
            if self.tables is not None:  # not finished (a failed write): its temporary goes
                self.tables.off()
        if self.write_error is not None:  # say so in the manifest, if it can be written
            self.manifest.status = "failed"
            self.manifest.failure = str(self.write_error)
            with contextlib.suppress(OutputWriteError):
                write_manifest(self.run_dir, self.manifest)

    def _write_outputs(self) -> None:
        """Timeline, manifest, ``records.parquet`` and summary (none after a failed write)."""
        from workbench.metrics.files import finish

        assert self.run_dir is not None
        if self.write_error is not None:
            return
        if self.timeline:
            with RecordWriter(self.run_dir / "metrics_timeline.jsonl") as tw:
                tw.write_all(self.timeline)
        write_manifest(self.run_dir, self.manifest)
        # records not kept: the summary reads them from disk (the columns of records.parquet);
        # the result carries the summary written (its SLO: the manifest's, the config's)
        result = self.result
        written = self.tables is not None and self.tables.finish()
        finish(result, self.run_dir, parquet_written=written)
        self.summary = result.summary


def connection_warmer(cfg: RunConfig, transport: Transport) -> Callable[[], Awaitable[Any]] | None:
    """``executor.warm_connections``: opens up to the shard's concurrency (``WARM_MAX`` at
    most) of keep-alive connections before the start (``play_shard``); None when off."""
    if not cfg.executor.warm_connections:
        return None
    n = min(cfg.arrival.max_concurrency or 0, WARM_MAX)
    return lambda: transport.warm(n)


async def _relay(stop: asyncio.Event, halt: asyncio.Event) -> None:
    await stop.wait()
    halt.set()


async def watch_stop(stop: asyncio.Event, runner: Runner) -> None:
    """``runner.stop("stopped")`` once ``stop`` is set."""
    await stop.wait()
    runner.stop("stopped")
