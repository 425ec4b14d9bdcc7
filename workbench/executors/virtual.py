"""``simulate``: replay a workload through the embedded engine core in virtual time.

Same plan, same runner, same arrival and admission semantics as a live replay
(sessions closed-loop with tool waits); only the clock (``VirtualClock``) and the
sender (straight into the engine, no HTTP) differ. Same input and seed ⇒ the same
virtual timestamps, so ``canonical_report`` has a stable sha256 digest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import gc
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from workbench import heap
from workbench.backends.base import Codec, MessagesCodec, WireRequest
from workbench.catalogs.series import VLLM
from workbench.clock import Clock, VirtualClock, run_virtual
from workbench.config import RunConfig
from workbench.errors import ConfigError, OutputWriteError
from workbench.placement import placement_extra
from workbench.records import RequestRecord, RunManifest, RunResult, Workload
from workbench.replay.outcome import RunOutcome, play_shard, play_shards
from workbench.replay.plan import Plan
from workbench.replay.prepare import coerce_config, prepare
from workbench.replay.runner import build_runner
from workbench.replay.session import RecordSinks
from workbench.replay.shards import split_run
from workbench.segments import Segments
from workbench.signals import SignalStop, stop_on_signals, wait_result
from workbench.sim.cluster import Cluster, ClusterConfig, split_knobs
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine
from workbench.sim.front_end import Admission
from workbench.sim.wire import chat_prompt
from workbench.storage.rundir import claim_run_dir
from workbench.tokenizer import get_tokenizer

GC_GEN0_THRESHOLD = 100_000  # allocations between young-generation collections

class EngineSender:
    """The runner's sender for virtual time: submits to the engine core directly.

    ``in_flight`` counts the requests sent and not yet ended, ``activity`` (if set) is
    set whenever one is sent: with none in flight the engine cannot change, so the
    metrics sampler sleeps until the next send (``_sample``)."""

    in_flight = 0
    activity: asyncio.Event | None = None
    #: the runner builds prompts as ``Segments`` (workbench.segments): the engine derives
    #: its block hashes from their parts and no token id is drawn (docs/virtual-time.md)
    takes_segments = True
    paced_turns = 0  # no pacer: nothing waits for a turn in virtual time

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.admission = Admission(engine.config, clock)
        self.clock = clock

    async def send(
        self, codec: Codec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | Segments | None:
        self.in_flight += 1
        if self.activity is not None:
            self.activity.set()
        try:
            if codec.sends_messages:
                return await self._send_chat(cast(MessagesCodec, codec), req, rec)
            return await self._send(req, rec, codec.stream)
        finally:
            self.in_flight -= 1

    async def _send_chat(
        self, codec: MessagesCodec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | None:
        """``openai-chat`` as the embedded server takes it: the codec's messages (the
        conversation so far, its overhead options applied), the server's chat template
        around them (``sim.wire.chat_prompt``), and the reply remembered as the codec
        remembers a streamed one, its text re-encoded. So the engine sees the prompt a
        live run's server would, template tokens included (docs/virtual-time.md)."""
        messages = codec.messages(req)
        tok = get_tokenizer()
        templated = dataclasses.replace(req, prompt_ids=chat_prompt(messages, tok),
                                        segments=None)
        out = await self._send(templated, rec, codec.stream)
        rec.sent_prompt_tokens = req.prompt_len  # the ids the client sent, as text
        if out is None or isinstance(out, Segments):  # (ids in, so ids out)
            return None
        if rec.status != "ok":
            return out
        reply = tok.decode(out)
        reply_ids = tok.encode(reply)
        codec.remember(req, messages, reply, reply_ids)
        return reply_ids

    async def _send(
        self, req: WireRequest, rec: RequestRecord, stream: bool = True
    ) -> list[int] | Segments | None:
        """Submit, wait once for the end (no wakeup per step), then copy the engine's
        per-token emission times: each step emits one token per request, so each
        token is one stream event, as the HTTP server would send it. Non-streaming
        (``stream`` False, ``backend.stream``): no token event, the output arrives
        with the end, as the server's one JSON answer does (TTFT = E2E)."""
        rec.dispatch_ns = self.clock.now_ns()
        if req.on_sent is not None:
            req.on_sent(rec.dispatch_ns)
        rec.sent_prompt_tokens = req.prompt_len
        await self.admission.wait()  # the per-request overhead (docs/calibration.md)
        try:
            ereq = self._submit(req, rec)
        except ValueError as exc:  # what the HTTP server answers with a 400 (sim/server.py)
            rec.end_ns = self.clock.now_ns()
            rec.http_status = 400
            rec.status, rec.error = "error", f"HTTP 400: {exc}"
            return None
        try:
            await ereq.wait()
        except asyncio.CancelledError:
            ereq.abort()
            rec.status = "cancelled"
            raise
        times = ereq.token_ns
        ids = ereq.output_segments() if req.segments is not None else ereq.output_ids
        rec.end_ns = self.clock.now_ns()
        if stream:
            rec.token_times_ns = times
            rec.token_counts = [1] * len(times)
            rec.first_token_ns = times[0] if times else None
            rec.last_token_ns = times[-1] if times else None
        elif times:  # the whole answer: its tokens come with its end (docs/wire-protocols.md)
            rec.first_token_ns = rec.last_token_ns = rec.end_ns
        rec.http_status = 200
        rec.finish_reason = ereq.finish_reason
        rec.prompt_tokens = ereq.prompt_tokens
        rec.completion_tokens = len(ids)
        rec.cached_tokens = ereq.cached_tokens
        rec.cached_tokens_reported = True
        rec.extra["preemptions"] = ereq.preemptions  # the engine's own count (no wire has it)
        if ereq.host_cached_tokens:  # of cached_tokens, from the host KV tier (SGLang's split)
            rec.extra["host_cached_tokens"] = ereq.host_cached_tokens
        if ereq.finish_reason not in (None, "length", "stop"):
            rec.status, rec.error = "error", f"engine finished with {ereq.finish_reason}"
        return ids


    def _submit(self, req: WireRequest, rec: RequestRecord) -> Any:
        return self.engine.submit(req.request_id, _prompt(req), req.max_tokens)


class ClusterSender(EngineSender):
    """``EngineSender`` for a simulated cluster: the router places each request by
    its session, and the record names the serving worker (as the HTTP header does)."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.admission = Admission(cluster.config, clock)
        self.clock = clock

    def _submit(self, req: WireRequest, rec: RequestRecord) -> Any:
        where, ereq = self.cluster.submit(
            req.request_id, _prompt(req), req.max_tokens, session=req.session_id
        )
        rec.extra.update(placement_extra(where.headers()))
        return ereq


def _prompt(req: WireRequest) -> Sequence[int] | Segments:
    return req.segments if req.segments is not None else req.prompt_ids


def simulate(
    cfg: RunConfig | dict[str, Any],
    *,
    engine: EngineConfig | dict[str, Any] | None = None,
    workload: Workload | None = None,
) -> RunResult:
    """Replay ``cfg`` in virtual time against an ``EngineConfig`` (default: ``cfg.target.engine``).

    No sockets, no sleeping: a one-hour trace takes seconds. The result has the
    same records a live replay produces, on virtual nanoseconds.
    """
    if isinstance(engine, dict):  # the config says which engine ran (and so the digest)
        cfg = coerce_config(cfg)
        cfg = cfg.replace(**{"target.engine": {**cfg.target.engine, **engine}})
        engine = None
    run = prepare(cfg, workload, virtual=True)
    cfg, plan, run_id = run.cfg, run.plan, run.run_id
    cluster = None
    if engine is None:
        try:  # before anything runs: a bad knob names itself
            knobs, cluster = split_knobs(cfg.target.engine)
            engine = EngineConfig.from_knobs(**knobs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"target.engine: {exc}") from None
    manifest = run.manifest()
    manifest.mode = "virtual"
    manifest.engine = dataclasses.asdict(engine)
    if cluster is not None:
        manifest.cluster = cluster.to_dict()
    run_dir = None
    # SIGINT/SIGTERM (from here on) stop the run as they stop a live one: what finished
    # is saved, the manifest says cancelled, then KeyboardInterrupt (exit code 130)
    with stop_on_signals() as signalled:
        try:
            # the run's own directory, claimed as a live run's is (exclusive, never through
            # a symlink), with a "running" manifest naming this process
            if cfg.out_dir:
                run_dir = claim_run_dir(cfg.out_dir, run_id, manifest.to_dict(),
                                        overwrite=cfg.overwrite)
            result = _run_virtual_anywhere(
                _simulate(cfg, plan, engine, run_id, manifest, cluster, signalled))
            if run_dir is not None:  # as every live run's: records, manifest, parquet, summary
                from workbench.metrics.files import save

                _release_engine()
                with rare_collections():  # the records read back: dicts, no cycles
                    result.run_dir = str(save(result, run_dir))
        except BaseException as exc:  # the manifest says how it ended, if it can be written
            if run_dir is not None:
                _mark_ended(run_dir, manifest, exc)
            raise
    if signalled.hit:  # saved as cancelled; now stop as replay does
        raise KeyboardInterrupt(f"signal {signalled.name}")
    return result


def _release_engine() -> None:
    """The run is over and its engine unreferenced: collect it now (its workers and
    handles hold reference cycles, which the run's rare collections leave) and give the
    freed heap back, before the summary reads the records (docs/virtual-time.md,
    "Streamed runs")."""
    gc.collect()
    heap.trim()


def _mark_ended(run_dir: Path, manifest: RunManifest, exc: BaseException) -> None:
    from workbench.storage.rundir import write_manifest

    if manifest.status == "running":
        interrupted = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
        manifest.status = "cancelled" if interrupted else "failed"
    if isinstance(exc, OutputWriteError):
        manifest.status, manifest.failure = "failed", str(exc)
    with contextlib.suppress(OutputWriteError):
        write_manifest(run_dir, manifest)


def _run_virtual_anywhere(coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    """``run_virtual``, also from inside a running loop (a notebook cell): then the
    virtual loop runs in a worker thread and this call waits for it."""
    with rare_collections():
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run_virtual(coro)
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="simulate") as pool:
            return wait_result(pool.submit(run_virtual, coro))


@contextlib.contextmanager
def rare_collections(gen0: int = GC_GEN0_THRESHOLD) -> Iterator[None]:
    """Run with the cyclic garbage collector's first generation ``gen0`` allocations
    wide (CPython's default: 700), restored afterwards.

    A virtual replay allocates millions of short-lived objects (token lists, block
    hashes, records) that reference counting frees; with the default threshold the
    collector still walks the young generation every 700 allocations and the older
    ones as they fill, a sixth of a whole-Mooncake point (docs/virtual-time.md, "What
    a virtual replay costs"). Garbage cycles are still collected, only in
    larger batches.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


async def _simulate(
    cfg: RunConfig, plan: Plan, engine_cfg: EngineConfig, run_id: str, manifest: RunManifest,
    cluster_cfg: ClusterConfig | None = None, signalled: SignalStop | None = None,
) -> RunResult:  # fmt: skip
    """One engine (or a simulated cluster, ``cluster_cfg``), one virtual clock; the plan
    played by one runner, or by one runner per shard as ``executor.workers`` splits a
    live run (units round-robin, concurrency divided, routing slots stacked): the
    executor options act as in a live run."""
    clock = VirtualClock()
    engine: Engine | Cluster
    sender: EngineSender
    if cluster_cfg is None:
        engine = Engine(engine_cfg, clock)
        sender = EngineSender(engine, clock)
    else:
        engine = Cluster(engine_cfg, cluster_cfg, clock)
        sender = ClusterSender(engine, clock)
    sinks = RecordSinks(cfg, Path(cfg.out_dir) / run_id if cfg.out_dir else None, plan.n_rounds,
                        manifest)  # the run directory is claimed by simulate()
    if not sinks.keep:  # records on disk only, as in a live run (kept ones: save() at the end)
        sinks.open_writers()
    ex = cfg.executor
    n = ex.workers if ex.workers > 1 or ex.kind != "local" else 1
    parts = split_run(plan, cfg.arrival.max_concurrency, cfg.arrival.warmup, n)
    manifest.virtual_executor = {
        "shards": n, "block_hashes": ex.block_hashes, "gc_freeze": ex.gc_freeze,
        "not_applicable": list(VIRTUAL_NOT_APPLICABLE),
    }  # fmt: skip
    runners = []
    for part in parts:
        # a shard is one worker with its share of the slots (as a worker process's config)
        shard_cfg = cfg if n == 1 else cfg.replace(**{
            "arrival.max_concurrency": part.max_concurrency, "executor.workers": 1})
        runner = build_runner(
            shard_cfg, part.plan, run_id=run_id, sender=sender, clock=clock,
            sink=sinks.on_record, lifecycle_sink=sinks.on_lifecycle,
            block_size=plan.block_size or engine_cfg.block_size, slot_offset=part.slot_offset,
        )
        runner.measure.series = False  # no client measurement in virtual time (below)
        runners.append(runner)
    timeline: list[dict[str, Any]] = []

    def stop_all() -> None:  # SIGINT/SIGTERM or a failed write: stop as a live run stops
        for r in runners:
            r.stop("stopped")

    sinks.on_stop = stop_all
    await engine.start()
    try:
        manifest.cache_flush = _flush(engine, cfg.backend.flush_cache)
        t0 = clock.now_ns()
        timeline.append(_engine_sample(t0, engine.stats()))
        sampler = asyncio.ensure_future(
            _sample(engine, clock, cfg.backend.scrape_interval_s, timeline, sender)
        )
        signalled = signalled or SignalStop()
        signalled.arm(asyncio.get_running_loop(), stop_all)
        try:  # one shard: its warm-up, then the run's origin; shards: every warm-up first,
            # then one epoch (as workbench.executors.processes)
            shards = [await play_shard(runners[0])] if n == 1 else await play_shards(
                runners, clock.now_ns)
        finally:
            signalled.disarm()
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        timeline.append(_engine_sample(clock.now_ns(), engine.stats()))
    finally:
        await engine.stop()
        sinks.close_writers()
    if sinks.write_error is not None:  # the manifest says failed (simulate writes it), then raise
        manifest.status, manifest.failure = "failed", str(sinks.write_error)
        raise sinks.write_error
    manifest.completion = plan.completion(
        sinks.done, sinks.skipped, looped=cfg.loops_until_deadline)
    manifest.status = manifest.completion["status"]
    outcome = RunOutcome.of([s for s in shards if s is not None], stopped=signalled.hit)
    if outcome.cancelled:  # what finished is kept, in-flight requests recorded as cancelled
        manifest.status = "cancelled"
    if signalled.hit:
        manifest.stop_signal = signalled.name
    manifest.virtual_duration_s = (clock.now_ns() - t0) / 1e9
    outcome.write(manifest, client=None)  # no wall clock to measure the client by
    return RunResult(run_id, sinks.records, manifest=manifest.to_dict(), lifecycle=sinks.lifecycle,
                     metrics_timeline=timeline,
                     run_dir=None if sinks.keep or sinks.run_dir is None else str(sinks.run_dir),
                     cancelled=outcome.cancelled)  # fmt: skip


# Executor options that act on sockets or the loop, which virtual time has none of
VIRTUAL_NOT_APPLICABLE = ("uvloop", "pace_ms", "warm_connections", "address")


async def _sample(
    engine: Engine | Cluster, clock: Clock, interval_s: float | None,
    timeline: list[dict[str, Any]], sender: EngineSender | None = None,
) -> None:  # fmt: skip
    """``backend.scrape_interval_s`` in virtual time: the engine's counters and gauges
    on the interval's grid, as the live scraper takes them from ``/metrics`` — but a
    sample is kept only when the engine's state changed since the last one kept, and
    while no request is in flight (``sender.in_flight``: then nothing in the engine can
    change) the sampler does not wake at all until the next request is sent; it then
    resumes at the next grid point. Virtual time so costs per event, not per idle
    second: a 71.8-day trace of 19 rounds used to take 6.2 M samples of an idle engine
    (1.8 GB, 5 min); docs/virtual-time.md."""
    if not interval_s:
        return
    step = max(1, round(interval_s * 1e9))
    t0 = clock.now_ns()
    k = 0
    last: dict[str, Any] | None = None
    woken = asyncio.Event()
    if sender is not None:
        sender.activity = woken
    while True:
        k += 1
        await clock.sleep_until(t0 + k * step)
        stats = engine.stats()
        if stats != last:
            timeline.append(_engine_sample(clock.now_ns(), stats))
            last = stats
        if sender is not None and not sender.in_flight:
            woken.clear()
            await woken.wait()  # the engine is idle until the next send
            k = (clock.now_ns() - t0) // step  # then on to the next grid point


def _flush(engine: Engine | Cluster, mode: bool | str) -> dict[str, Any]:
    """``backend.flush_cache`` in virtual time: the engine core's own reset (it is fresh,
    so this only records, like a live run's manifest, what was done)."""
    from workbench.backends.flush import NOT_ASKED, FlushOutcome

    if mode is False:
        return {"mode": False, **FlushOutcome(detail=NOT_ASKED).to_dict()}
    ok = engine.reset_prefix_cache()
    out = FlushOutcome(True, ok, "engine.reset_prefix_cache()", None, None if ok else "busy")
    return {"mode": mode, **out.to_dict()}


def _engine_sample(t_ns: int, stats: dict[str, Any]) -> dict[str, Any]:
    """An engine snapshot under the vLLM names the embedded engine exports
    (``workbench.catalogs.series``)."""
    row: dict[str, Any] = {"t_ns": t_ns}
    for s in (*VLLM.embedded("counter"), *VLLM.embedded("gauge")):
        row[s.name] = stats.get(s.stat or "", 0)
    return row
