"""One live replay's resources, opened and closed in order, and the executor interface.

Target (the embedded engine is started here when ``target.url == "sim"``) →
run directory → the executor plays the plan (``Executor.play``: transport, preflight,
``/metrics`` scraper, runner or runners) → manifest and summary. Whatever ends the run
(completion, ``stop``, task cancellation, Ctrl-C), the records already written stay on
disk and the manifest and summary say how it ended.

A ``ReplaySession`` is composed with one ``Executor`` (``workbench.executors``: in this
process, worker processes, Ray actors); the session owns the target, the run directory,
the manifest and the summary, and offers the steps every executor shares (preflight,
cache flush, block size, scraper, record sinks).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from workbench import heap, redact
from workbench.backends.transport import Transport
from workbench.clock import WallClock
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool
from workbench.errors import ConfigError, OutputWriteError, WorkbenchError
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.redact import strip_url_credentials
from workbench.replay.outcome import RunOutcome, ShardOutcome
from workbench.replay.plan import Plan
from workbench.replay.runner import Runner

log = logging.getLogger(__name__)

WARM_MAX = 1024  # keep-alive connections opened before a run (executor.warm_connections)


@contextlib.asynccontextmanager
async def open_target(cfg: RunConfig) -> AsyncIterator[dict[str, Any]]:
    """Yield ``{"base_url": ..., "kind": "sim"|"url", "engine": {...}}``."""
    if cfg.target.is_sim and not cfg.target.in_process:
        from workbench.sim.process import serve_sim_process

        async with serve_sim_process(**cfg.target.engine) as proc:
            yield {"base_url": proc.base_url, "kind": "sim", "engine": proc.config,
                   "engine_process": {"pid": proc.pid, "own_process": True}}
    elif cfg.target.is_sim:
        from workbench.sim.server import serve_sim

        async with serve_sim(**cfg.target.engine) as handle:
            yield {
                "base_url": handle.base_url,
                "kind": "sim",
                "engine": _engine_info(handle),
                "engine_process": {"pid": None, "own_process": False},
            }
    else:
        # user:password@ goes into an Authorization header (TransportOptions.of_run), never
        # into the URL that is stored, logged and used for requests
        url = strip_url_credentials(cfg.target.url)
        yield {"base_url": url.rstrip("/"), "kind": "url", "engine": None}


def _engine_info(handle: Any) -> dict[str, Any]:
    import dataclasses

    config = getattr(handle, "config", None)
    if config is not None and dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {k: v for k, v in dataclasses.asdict(config).items() if _jsonable(v)}
    return {}


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | dict)


class Executor(Protocol):
    """Where a session's plan is played (``workbench.executors``)."""

    def open_files(self, session: ReplaySession) -> None:
        """Prepare where records and lifecycle rows go before the target opens."""

    async def play(
        self, session: ReplaySession, target: dict[str, Any], stop: asyncio.Event | None
    ) -> None:
        """Play ``session.plan`` against the opened ``target`` (each shard through
        ``replay.outcome.play_shard``); records reach the run directory, and the shards'
        outcomes go to ``session.conclude``, which writes them into the manifest and sets
        ``session.cancelled``."""


class RecordSinks:
    """Where a run's records and lifecycle rows go, for a live run (``ReplaySession``) and a
    virtual one (``executors.virtual``) alike: memory (``records``, ``lifecycle``) unless
    ``executor.keep_records`` keeps them on disk only (then the manifest says why, and the
    heap is kept flat: ``workbench.heap``), and ``records.jsonl`` / ``lifecycle.jsonl`` in
    ``run_dir`` as they end once ``open_writers`` was called. ``done`` and ``skipped``
    count the measured records (warm-up left out) for the run's completion; the first
    failed write is ``write_error`` and calls ``on_stop`` (the run stops)."""

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
        self._total = n_requests
        self.done = 0  # measured requests ended (warm-up excluded)
        self.skipped = 0
        self.write_error: OutputWriteError | None = None  # the first failed write
        self.on_stop: Callable[[], Any] = lambda: None
        # executor.keep_records False, or "auto" over a large plan: records live on disk
        # only (memory flat in the run's size); the manifest says which and why
        self.keep, why = cfg.keeps_records(n_requests)
        manifest.records_kept, manifest.records_kept_reason = self.keep, why
        if not self.keep:  # memory flat in the run's size: see workbench/heap.py
            heap.prepare()

    def open_writers(self) -> None:
        """``records.jsonl`` and ``lifecycle.jsonl`` written as the run goes (in-process)."""
        if self.run_dir is None:
            return
        from workbench.storage.rundir import RecordWriter

        flush_ms = self.cfg.executor.record_flush_ms
        for name in ("records", "lifecycle"):
            self._writers[name] = RecordWriter(
                self.run_dir / f"{name}.jsonl", max_delay_ms=flush_ms or None,
                on_error=self.on_write_error,
            )

    def close_writers(self) -> None:
        for w in self._writers.values():
            w.close()

    def on_write_error(self, err: OutputWriteError) -> None:
        """The first failed write of the run's files stops the run: no new request is
        sent, the manifest says ``failed`` (if it can still be written) and the run
        raises ``err`` (exit code ``WRITE_FAILED``)."""
        if self.write_error is None:
            self.write_error = err
            self.on_stop()

    def on_record(self, rec: RequestRecord) -> None:
        if self.keep:
            self.records.append(rec)
        if "records" in self._writers:
            self._writers["records"].write(rec)
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
        self.t0_ns: int | None = None  # a shard's common epoch (workbench.executors.processes)
        self.halt: asyncio.Event | None = None

    def claim_dir(self) -> None:
        """``out_dir/<run_id>`` made this run's own, with a ``running`` manifest, before
        anything is sent (``workbench.storage.rundir.claim_run_dir``: exclusive, never
        through a symlink, an existing run replaced only with ``overwrite``)."""
        if self.run_dir is None:
            return
        from workbench.storage.rundir import claim_run_dir

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
            async with open_target(self.cfg) as target:
                # the URL that is stored: no user:password@, no query value (redact.safe_url)
                self.manifest.target = {**target, "base_url": redact.safe_url(target["base_url"])}
                self.tell("running")
                await self.executor.play(self, target, halt)
            status = "cancelled" if self.cancelled else self._completion()
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "cancelled"
            raise
        finally:
            if relay is not None:
                relay.cancel()
            self.tell("finalizing")
            self._finalize("failed" if self.write_error else status)
        if self.write_error is not None:
            raise self.write_error
        return self.result

    def _completion(self) -> str:
        """``completed`` or ``partial`` (planned rounds skipped or never sent), recorded."""
        done = self.plan.completion(self.done, self.skipped, looped=self.cfg.loops_until_deadline)
        self.manifest.completion = done
        if done["status"] != "completed":
            log.warning("run %s is partial: %s", self.run_id, done)
        return str(done["status"])

    def conclude(self, shards: list[ShardOutcome], *, stopped: bool = False) -> None:
        """The shards' outcomes into the manifest (``RunOutcome.write``, with the pooled
        client self-measurement); ``stopped``: the run was stopped from outside."""
        from workbench.metrics.summary import client_stats

        outcome = RunOutcome.of(shards, stopped=stopped)
        self.cancelled = outcome.cancelled
        cap = self.cfg.arrival.max_concurrency
        outcome.write(self.manifest, client_stats(outcome.clients, cap))

    async def check_target(self, transport: Transport, codec: Any, pool: TokenPool,
                           target: dict[str, Any]) -> None:
        """Before anything of the plan is sent, in every live executor: the target answers,
        the prefix-cache preflight, then the cache flush."""
        await transport.check_reachable()
        await self.preflight(transport, codec, pool, target)
        await self.flush_cache(transport, target)

    async def preflight(self, transport: Any, codec: Any, pool: TokenPool, target: dict) -> None:
        enabled = self.cfg.backend.preflight
        if enabled is None:
            enabled = target["kind"] != "sim"
        if not enabled:
            return
        from workbench.backends.preflight import preflight_prefix_cache

        result = await preflight_prefix_cache(transport, codec, pool.tail(8192))
        self.manifest.preflight = redact.obj(getattr(result, "__dict__", str(result)))

    async def flush_cache(self, transport: Transport, target: dict[str, Any]) -> None:
        """``backend.flush_cache``: reset the server's prefix cache after the preflight
        (which fills it) and before the warm-up and the measured requests; the
        manifest's ``cache_flush`` says what was done (docs/cache-isolation.md)."""
        from workbench.backends.flush import NOT_ASKED, FlushOutcome, flush_prefix_cache

        mode = self.cfg.backend.flush_cache
        if mode is False:
            skipped = FlushOutcome(detail=NOT_ASKED).to_dict()
            self.manifest.cache_flush = {"mode": False, **skipped}
            return

        outcome = await flush_prefix_cache(
            target["base_url"], backend=self.cfg.backend.name,
            headers=transport.auth_headers(),  # the run's own credentials (URL or key)
        )  # fmt: skip
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

    async def block_size(self, target: dict[str, Any]) -> int | None:
        if self.plan.block_size:
            return self.plan.block_size
        engine = target.get("engine") or {}
        if engine.get("block_size"):
            return int(engine["block_size"])
        try:
            from workbench.backends.scrape import detect_block_size

            return await detect_block_size(target["base_url"])
        except (TimeoutError, WorkbenchError, OSError) as exc:
            log.info("block size not detected: %s", exc)
            return None

    def scraper(self, target: dict[str, Any], clock: WallClock) -> Any:
        interval = self.cfg.backend.scrape_interval_s
        if not interval:
            return None
        from workbench.backends.scrape import MetricsScraper

        b = self.cfg.backend
        return MetricsScraper(
            target["base_url"], interval, clock, extra_urls=b.metrics_urls,
            patterns=b.metrics_series,
        )

    def keep_scrape(self, scraper: Any) -> None:
        """After the scraper stopped: its rows become the run's timeline, and what it kept
        beyond the engine's own series goes in the manifest's ``metrics_scrape``."""
        self.timeline = list(scraper.timeline)
        self.manifest.metrics_scrape = scraper.describe()

    # -- closing ------------------------------------------------------------------------
    @property
    def result(self) -> RunResult:
        return RunResult(
            self.run_id, self.records, manifest=self.manifest.to_dict(), lifecycle=self.lifecycle,
            metrics_timeline=self.timeline,
            run_dir=str(self.run_dir) if self.run_dir else None,
            cancelled=self.manifest.status == "cancelled",
        )

    def _finalize(self, status: str) -> None:
        self.manifest.status = status
        self.manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
        self.close_writers()
        if self.run_dir is None:
            return
        try:
            self._write_outputs()
        except OutputWriteError as exc:
            self.on_write_error(exc)
        if self.write_error is not None:  # say so in the manifest, if it can be written
            self.manifest.status = "failed"
            self.manifest.failure = str(self.write_error)
            from workbench.storage.rundir import write_manifest

            with contextlib.suppress(OutputWriteError):
                write_manifest(self.run_dir, self.manifest)

    def _write_outputs(self) -> None:
        """Timeline, manifest, ``records.parquet`` and summary of an ended run (none after
        a failed write: the records are incomplete and the disk is the problem)."""
        from workbench.metrics.files import finish
        from workbench.storage.rundir import RecordWriter, write_manifest

        assert self.run_dir is not None
        if self.write_error is not None:
            return
        if self.timeline:
            with RecordWriter(self.run_dir / "metrics_timeline.jsonl") as tw:
                for row in self.timeline:
                    tw.write(row)
        write_manifest(self.run_dir, self.manifest)
        # records not kept: the summary reads them from disk (the columns of records.parquet)
        finish(self.result, self.run_dir, self.cfg.slo)


def connection_warmer(cfg: RunConfig, transport: Transport) -> Callable[[], Awaitable[Any]] | None:
    """``executor.warm_connections``: a step that opens the shard's keep-alive connections (up
    to its concurrency, at most ``WARM_MAX``), played after the warm-up and before the start
    (``replay.outcome.play_shard``); None when the option is off."""
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
