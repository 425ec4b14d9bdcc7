"""The embedded engine in this process as a run's ``Target``, under the virtual clock:
a sender straight into the engine (``EngineSender``), its own cache reset as the
flush, its counters sampled under vLLM's names (``EngineSampler``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from workbench import heap
from workbench.backends.base import Codec, MessagesCodec, WireRequest
from workbench.backends.flush import FlushOutcome
from workbench.catalogs.series import VLLM
from workbench.clock import Clock, VirtualClock
from workbench.config import RunConfig
from workbench.records import RequestRecord
from workbench.segments import Segments
from workbench.sim.cluster import Cluster, ClusterConfig
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine
from workbench.sim.front_end import Admission
from workbench.sim.wire import chat_prompt
from workbench.tokenizer import get_tokenizer


class EngineTarget:
    """The engine of ``engine_cfg`` (a cluster with ``cluster_cfg``) on a fresh virtual clock;
    ``release``: on close, drop the engine and give the heap back before the summary reads
    the records (docs/virtual-time.md, "Streamed runs")."""

    base_url = ""  # no request goes over a wire
    preflight = False

    def __init__(self, engine_cfg: EngineConfig, cluster_cfg: ClusterConfig | None = None,
                 *, release: bool = False) -> None:
        self.engine_cfg, self.cluster_cfg, self.release = engine_cfg, cluster_cfg, release
        self.clock = VirtualClock()
        self.engine: Engine | Cluster | None = None
        self.sender: EngineSender | None = None

    def manifest_facts(self) -> dict[str, Any]:
        """What the prologue records of the engine: its config and the cluster's."""
        cluster = None if self.cluster_cfg is None else self.cluster_cfg.to_dict()
        return {"engine": self.engine_cfg.to_dict(), "cluster": cluster}

    def facts(self) -> None:
        return None  # the manifest's engine (and cluster) say what ran

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[EngineTarget]:
        if self.cluster_cfg is None:
            self.engine = Engine(self.engine_cfg, self.clock)
            self.sender = EngineSender(self.engine, self.clock)
        else:
            self.engine = Cluster(self.engine_cfg, self.cluster_cfg, self.clock)
            self.sender = ClusterSender(self.engine, self.clock)
        await self.engine.start()
        try:
            yield self
        finally:
            await self.engine.stop()
            if self.release:  # (no full collection here: it found nothing, issue 44)
                self.engine = self.sender = None
                heap.trim()

    async def flush(self, mode: bool | str, backend: str, headers: Mapping[str, str]
                    ) -> FlushOutcome:
        """The engine's own reset (a fresh engine: only recorded, as a live run's is)."""
        assert self.engine is not None
        ok = self.engine.reset_prefix_cache()
        return FlushOutcome(True, ok, "engine.reset_prefix_cache()", None, None if ok else "busy")

    async def block_size(self, headers: Mapping[str, str] | None = None) -> int | None:
        return self.engine_cfg.block_size

    def sampler(self, cfg: RunConfig, clock: Clock,
                headers: Mapping[str, str] | None = None) -> EngineSampler:
        assert self.engine is not None and self.sender is not None
        return EngineSampler(self.engine, self.clock, cfg.backend.scrape_interval_s,
                             self.sender)


class EngineSampler:
    """The engine's counters and gauges at the run's start and end, and on the
    ``backend.scrape_interval_s`` grid between (``_sample``)."""

    def __init__(self, engine: Engine | Cluster, clock: Clock, interval_s: float | None,
                 sender: EngineSender) -> None:
        self.engine, self.clock, self.interval_s, self.sender = engine, clock, interval_s, sender
        self.timeline: list[dict[str, Any]] = []
        self._task: asyncio.Future[None] | None = None

    async def start(self) -> None:
        self.timeline.append(_engine_sample(self.clock.now_ns(), self.engine.stats()))
        self._task = asyncio.ensure_future(_sample(
            self.engine, self.clock, self.interval_s, self.timeline, self.sender))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.timeline.append(_engine_sample(self.clock.now_ns(), self.engine.stats()))

    def describe(self) -> None:
        return None  # the engine's own series only


class EngineSender:
    """The runner's sender for virtual time: submits to the engine core directly;
    ``in_flight`` and ``activity`` (set on each send) let the sampler sleep while idle."""

    in_flight = 0
    activity: asyncio.Event | None = None
    #: the runner builds prompts as ``Segments`` (workbench.segments): the engine derives
    #: its block hashes from their parts and no token id is drawn (docs/virtual-time.md)
    takes_segments = True
    paced_turns = 0  # no pacer: nothing waits for a turn in virtual time
    resent_stale = 0  # no connection to go stale
    #: (request, stream idle) timeouts applied in virtual time, s; None: not applied
    #: (``ArrivalSpec.virtual_bounds``, docs/arrival.md "Timeouts in virtual time")
    bounds: tuple[float | None, float | None] = (None, None)

    @property
    def after_done(self) -> dict[str, int]:
        return {}  # no HTTP: no body held after [DONE]

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
        """``openai-chat`` as the embedded server takes it: the codec's messages in the
        server's chat template (``sim.wire.chat_prompt``), the reply re-encoded and
        remembered as a streamed one (docs/virtual-time.md)."""
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
        """Submit, wait once for the end, then copy the engine's per-token times (one stream
        event a token, as the HTTP server sends); not ``stream``ing: none, TTFT = E2E."""
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
            timed_out = await self._wait(ereq, rec.dispatch_ns)
        except asyncio.CancelledError:
            ereq.abort()
            rec.status = "cancelled"
            raise
        times = ereq.token_ns
        if timed_out is not None:
            self._timed_out(rec, timed_out, times, stream)
            return None
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


    async def _wait(self, ereq: Any, dispatch_ns: int) -> str | None:
        """Wait for the request's end; past a bound (``bounds``), abort it at the engine
        (its KV freed, as a client that gives up) at that virtual time. The bound that cut
        it (``request``, ``idle``), or None if it ended on its own."""
        req_s, idle_s = self.bounds
        if req_s is None and idle_s is None:
            await ereq.wait()  # no timer: a run without bounds is as it always was
            return None
        loop = asyncio.get_running_loop()
        t0 = dispatch_ns / 1e9
        deadline = None if req_s is None else t0 + req_s
        why: list[str] = []
        handle: asyncio.TimerHandle | None = None

        def check() -> None:  # at a deadline: the request's, or the idle one's
            nonlocal handle
            now = loop.time()
            if deadline is not None and now >= deadline:
                why.append("request")
                ereq.abort()
                return
            due = deadline
            if idle_s is not None:
                times = ereq.token_ns
                quiet_until = (times[-1] / 1e9 if times else t0) + idle_s
                if now >= quiet_until:
                    why.append("idle")
                    ereq.abort()
                    return
                due = quiet_until if due is None else min(due, quiet_until)
            handle = loop.call_at(due, check)  # type: ignore[arg-type]  # (never None here)

        first = min(x for x in (deadline, None if idle_s is None else t0 + idle_s)
                    if x is not None)
        handle = loop.call_at(first, check)
        try:
            await ereq.wait()
        finally:
            handle.cancel()  # the current timer (``check`` replaces it)
        # cut by the bound, not ended on its own at the same instant
        return why[0] if why and ereq.finish_reason == "abort" else None

    def _timed_out(self, rec: RequestRecord, why: str, times: list[int], stream: bool) -> None:
        """The record of a request cut by a bound: as a live run's client timeout records it
        (backends/transport.py: the message, the token events so far, no usage)."""
        rec.end_ns = self.clock.now_ns()
        req_s, idle_s = self.bounds
        if stream:
            rec.http_status = 200  # the stream's head had come, as a live server sends it
            rec.token_times_ns = times
            rec.token_counts = [1] * len(times)
            rec.first_token_ns = times[0] if times else None
            rec.last_token_ns = times[-1] if times else None
        where = f" after {len(times)} token events" if stream else ""
        rec.status = "error"
        rec.error = (f"request timed out after {req_s}s{where}" if why == "request"
                     else f"stream idle for more than {idle_s}s{where}")

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
        rec.extra.update(where.extra())
        return ereq


def _prompt(req: WireRequest) -> Sequence[int] | Segments:
    return req.segments if req.segments is not None else req.prompt_ids


async def _sample(
    engine: Engine | Cluster, clock: Clock, interval_s: float | None,
    timeline: list[dict[str, Any]], sender: EngineSender | None = None,
) -> None:  # fmt: skip
    """``backend.scrape_interval_s`` in virtual time: the engine's counters on the grid, a
    sample kept only when they changed, and no wakeup while nothing is in flight
    (``sender.in_flight``) until the next send (docs/virtual-time.md)."""
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


def _engine_sample(t_ns: int, stats: dict[str, Any]) -> dict[str, Any]:
    """An engine snapshot under the vLLM names the embedded engine exports
    (``workbench.catalogs.series``)."""
    row: dict[str, Any] = {"t_ns": t_ns}
    for s in (*VLLM.embedded("counter"), *VLLM.embedded("gauge")):
        row[s.name] = stats.get(s.stat or "", 0)
    return row
