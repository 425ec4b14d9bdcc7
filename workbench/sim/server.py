"""HTTP face of the embedded engine: an aiohttp app and ``serve_sim``.

The four wire protocols of docs/wire-protocols.md plus the endpoints, the
``/debug/requests`` truth and the stream behaviour of docs/embedded-engine.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import os
import random
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from workbench import __version__
from workbench import safe_write as safe
from workbench.clock import Clock, WallClock
from workbench.errors import ListenError, OutputWriteError
from workbench.placement import placement_extra
from workbench.sim.cluster import AnyRequest, Cluster, ClusterConfig, split_knobs
from workbench.sim.config import COST_KNOBS, EngineConfig
from workbench.sim.encoders import ENCODERS, WireEncoder, dumps
from workbench.sim.engine import Engine
from workbench.sim.front_end import Admission
from workbench.sim.metrics import SIM_GPU_PATH, exposition, make_gpu_registry, make_registry
from workbench.sim.wire import (
    LENGTH_CHECKED,
    MODEL_CHECKED,
    PARSERS,
    GenRequest,
    Json,
    WireError,
    chat_prompt,
    check_model,
    messages_as_chat,
    now_s,
    prompt_ids,
    vllm_length_rules,
)
from workbench.sim_card import SIM_CARD_KEY, SIM_OWNER
from workbench.tokenizer import get_tokenizer

log = logging.getLogger(__name__)

DEBUG_LOG_SIZE = 10_000
#: set to a directory, the engine serves POST /start_profile and /stop_profile and writes the
#: requests it answered in between there as one JSON file (docs/real-engines.md, "Profiling")
PROFILE_DIR_ENV = "WORKBENCH_SIM_PROFILE_DIR"
MAX_BODY_BYTES = 64 * 2**20
OVERRUN_FLUSH_EVENTS = 16  # overrun faults: events per write
MAX_REQUEST_ID = 512  # characters; a longer id is refused with a 400
SERVER_KEY: web.AppKey[SimServer] = web.AppKey("sim_server")
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
#: the engine knobs the card states: the model, the clock's speed, the cost model
CARD_KNOBS = ("model", "mode", "speedup", "preset", "zero_cost", *COST_KNOBS)


def sim_card_engine(cfg: EngineConfig) -> dict[str, Any]:
    """The knobs of ``cfg`` a ``/v1/models`` card states (``CARD_KNOBS``)."""
    d = dataclasses.asdict(cfg)
    return {k: list(d[k]) if isinstance(d[k], tuple) else d[k] for k in CARD_KNOBS}


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=dumps(obj), status=status, content_type="application/json", headers=headers
    )


class SimServer:
    """Route handlers over one ``Engine`` or a ``Cluster`` of them (then every response
    names its worker in ``x-workbench-worker``); ``app`` is the aiohttp application."""

    def __init__(self, engine: Engine | Cluster) -> None:
        self.engine = engine
        self.config = engine.config
        self.admission = Admission(engine.config, engine.clock)
        self.faults = engine.config.faults
        self.tok = get_tokenizer()
        self._dice = random.Random(engine.config.seed)  # error_rate: one draw a request
        self._ids = itertools.count()
        stats = [w.stats for w in engine.workers] if isinstance(engine, Cluster) else []
        self._gpu_registry = make_gpu_registry(stats or [engine.stats])
        # a cluster: one series per worker, labelled engine="<index>"
        self._registry = make_registry(self.config, stats or engine.stats,
                                       list(range(len(stats))) if stats else None)
        self._worker_registries = [make_registry(self.config, [f], [i])
                                   for i, f in enumerate(stats)]
        self.debug_log: deque[Json] = deque(maxlen=DEBUG_LOG_SIZE)
        # the "profiler", as vLLM's: only when PROFILE_DIR_ENV is set, 404 otherwise
        self.profile_dir = os.environ.get(PROFILE_DIR_ENV) or None
        self._profile_from: int | None = None  # requests answered when the profile started
        self._profile_started = 0.0
        self._answered = 0
        # long contexts: 131k token ids as JSON pass 1 MiB, aiohttp's default body limit
        self.app = web.Application(client_max_size=MAX_BODY_BYTES)
        self.app.add_routes(self._routes())

    def _routes(self) -> list[web.RouteDef]:
        def gen(protocol: str) -> Any:
            return functools.partial(self._generate, protocol=protocol)

        return [
            web.post("/v1/completions", gen("completions")),
            web.post("/v1/chat/completions", gen("chat")),
            web.post("/inference/v1/generate", gen("generate")),
            web.post("/generate", gen("sglang")),
            web.post("/v1/messages", gen("messages")),
            web.post("/v1/responses", gen("responses")),
            web.post("/v1/messages/count_tokens", self._count_tokens),
            web.get("/v1/models", self._models),
            web.post("/tokenize", self._tokenize),
            web.get("/health", self._health),
            web.get("/metrics", self._metrics),
            web.get(SIM_GPU_PATH, self._gpu_metrics),
            web.post("/reset_prefix_cache", self._reset),
            web.post("/flush_cache", self._reset),
            web.get("/debug/requests", self._debug),
            *([web.post("/start_profile", self._start_profile),
               web.post("/stop_profile", self._stop_profile)] if self.profile_dir else []),
        ]

    async def _start_profile(self, request: web.Request) -> web.Response:
        self._profile_from, self._profile_started = self._answered, now_s()
        return web.Response(status=200)

    async def _stop_profile(self, request: web.Request) -> web.Response:
        """Write the requests answered since the start as one JSON trace in the directory,
        whole or not at all (``safe_write``: a full disk is a 500 naming the path and the
        errno, no partial file; a link there is refused)."""
        if self._profile_from is None:
            return _json(WireError(409, "the profiler is not running").body(), 409)
        n = min(self._answered - self._profile_from, len(self.debug_log))
        rows = list(self.debug_log)[len(self.debug_log) - n:]
        self._profile_from = None
        where = Path(self.profile_dir or ".")
        doc = {"started_at": self._profile_started, "stopped_at": now_s(), "requests": rows}
        try:
            try:
                safe.make_dir(where, parents=True)
            except OSError as exc:
                raise OutputWriteError(where, exc) from None
            safe.write_atomic(where / f"sim-profile-{os.getpid()}-{now_s()}.json", dumps(doc))
        except (OutputWriteError, safe.LinkRefused) as err:
            log.error("profile not written: %s", err)
            return _json(WireError(500, str(err), "InternalServerError").body(), 500)
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        """vLLM's model card, owned by ``workbench-sim`` and saying what it simulates
        (``SIM_CARD_KEY``), so a client that did not start it can tell a simulated engine
        from a real one (docs/embedded-engine.md, "Which step times")."""
        cfg = self.config
        card = {
            "id": cfg.model, "object": "model", "created": now_s(), "owned_by": SIM_OWNER,
            "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len,
            SIM_CARD_KEY: {"version": __version__, "engine": sim_card_engine(cfg)},
        }  # fmt: skip
        return _json({"object": "list", "data": [card]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /tokenize`` (docs/embedded-engine.md): the ids it would prefill."""
        try:
            body = await _json_body(request)
            check_model(body, self.config.model)
            if "messages" in body:
                ids = chat_prompt(body["messages"], self.tok)
            else:
                ids = prompt_ids(body.get("prompt"), self.tok)
        except WireError as err:
            return _json(err.body(), status=err.status)
        return _json({"count": len(ids), "max_model_len": self.config.max_model_len,
                      "tokens": ids, "token_strs": None})

    async def _count_tokens(self, request: web.Request) -> web.Response:
        """Anthropic's ``POST /v1/messages/count_tokens``: the prompt ``/v1/messages`` would
        prefill for the same request (docs/wire-protocols.md, "Anthropic Messages")."""
        try:
            ids = chat_prompt(messages_as_chat(await _json_body(request)), self.tok)
        except WireError as err:
            return _json(err.anthropic_body(), status=err.status)
        return _json({"input_tokens": len(ids)})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _metrics(self, request: web.Request) -> web.Response:
        registry = self._registry
        worker = request.query.get("worker")
        if worker is not None:  # one worker of a cluster: /metrics?worker=<index>
            n = len(self._worker_registries)
            if not worker.isdigit() or int(worker) >= n:
                return _json(WireError(404, f"no worker {worker!r} (workers: {n})").body(), 404)
            registry = self._worker_registries[int(worker)]
        return _prometheus(registry)

    async def _gpu_metrics(self, request: web.Request) -> web.Response:
        """The simulated GPU exporter's page (``sim.metrics.GpuExporterCollector``)."""
        return _prometheus(self._gpu_registry)

    async def _reset(self, request: web.Request) -> web.Response:
        ok = self.engine.reset_prefix_cache()
        return _json({"success": ok}, status=200 if ok else 409)

    async def _debug(self, request: web.Request) -> web.Response:
        rid = request.query.get("request_id")
        rows = [r for r in self.debug_log if rid is None or r["request_id"] == rid]
        return _json(rows)

    def _request_id(self, request: web.Request, body: Json) -> str:
        rid = request.headers.get("x-request-id") or body.get("request_id") or body.get("rid")
        if rid is not None and not isinstance(rid, str | int):
            raise WireError(400, f"request id must be a string, got {type(rid).__name__}")
        rid = str(rid) if rid else f"sim-{next(self._ids)}"
        if len(rid) > MAX_REQUEST_ID:
            raise WireError(400, f"request id is {len(rid)} characters; at most {MAX_REQUEST_ID}")
        return rid

    async def _parse(self, request: web.Request, protocol: str) -> GenRequest:
        body = await _json_body(request)
        if protocol in MODEL_CHECKED:
            check_model(body, self.config.model)
        rid = self._request_id(request, body)
        gen = PARSERS[protocol](body, rid, self.tok, self.config.model)
        if protocol in LENGTH_CHECKED:
            vllm_length_rules(gen, self.config.max_model_len)
        return gen

    async def _generate(self, request: web.Request, protocol: str) -> web.StreamResponse:
        try:
            gen = await self._parse(request, protocol)
            if self.faults.error_rate > 0 and self._dice.random() < self.faults.error_rate:
                msg = "injected fault: error_rate"
                if self.faults.error_echo_auth:  # what a header-echoing proxy puts in errors
                    msg += f" (Authorization: {request.headers.get('Authorization', '')})"
                raise WireError(self.faults.error_status, msg, "InternalServerError")
            headers: dict[str, str] = {}
            await self.admission.wait()  # the per-request overhead (docs/calibration.md)
            try:
                if isinstance(self.engine, Cluster):
                    session = request.headers.get("x-session-id") or gen.request_id
                    where, ereq = self.engine.submit(
                        gen.request_id, gen.prompt_ids, gen.max_tokens, session=session
                    )
                    headers = where.headers()
                else:
                    ereq = self.engine.submit(gen.request_id, gen.prompt_ids, gen.max_tokens)
            except ValueError as exc:
                raise WireError(400, str(exc)) from None
        except WireError as err:
            body = err.anthropic_body() if protocol == "messages" else err.body()
            return _json(body, status=err.status)
        encoder = ENCODERS[protocol](gen, self.config.model, self.tok, self.faults)
        entry = _entry(protocol, ereq)
        entry.update(placement_extra(headers))
        peer = request.transport.get_extra_info("peername") if request.transport else None
        entry["peer"] = f"{peer[0]}:{peer[1]}" if peer else None  # which client connection
        try:
            if gen.stream:
                return await self._stream(request, encoder, ereq, entry, headers)
            return await self._unary(request, encoder, ereq, entry, headers)
        except ConnectionResetError:
            # The client closed its socket and a write hit the closing transport
            # before aiohttp cancelled this handler: the same abort, not a server error.
            log.debug("client of %s went away mid-response", ereq.request_id)
            return _drop_connection(request)
        finally:
            if not ereq.finished:
                ereq.abort()  # client gone (handler cancelled) or fault: free the blocks
            self.debug_log.append(_finish_entry(entry, ereq))
            self._answered += 1

    async def _stream(
        self, request: web.Request, encoder: WireEncoder, ereq: AnyRequest, entry: Json,
        headers: dict[str, str],
    ) -> web.StreamResponse:  # fmt: skip
        resp = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        await resp.prepare(request)
        buf = encoder.head_bytes()
        writer = _Writer(resp, entry, self)
        if writer.due_disconnect():
            return await writer.drop(request, buf)
        extra = self.faults.extra_tokens  # overrun faults: the finish reason moves past them
        async for batch in ereq.batches():
            for out in batch:
                if not out.token_ids:
                    continue  # engine stopped: end the stream without usage
                reason = None if extra else out.finish_reason
                buf.append(encoder.token_bytes(out.token_ids, reason, ereq.cached_tokens))
                writer.pending += len(out.token_ids)
                if writer.due_disconnect():
                    return await writer.drop(request, buf)
                if writer.due_stall():
                    await writer.flush(buf)
                    await self.sleep(self.faults.stall_s)
            await writer.flush(buf)
        if extra and ereq.output_ids:
            await self._overrun(writer, encoder, ereq, extra)
        tail = encoder.usage_chunk(ereq.cached_tokens) if ereq.finish_reason == "length" else None
        await resp.write(encoder.end_bytes(tail))
        await resp.write_eof()
        return resp

    async def _overrun(
        self, writer: _Writer, encoder: WireEncoder, ereq: AnyRequest, extra: int
    ) -> None:
        """Stream ``extra`` output tokens past the engine's last one (``overrun_tokens``,
        ``never_stop``), one per event, flushed in small batches; the last carries the
        finish reason. A client that cuts the stream ends it (the write fails)."""
        token = ereq.output_ids[-1]
        buf: list[bytes] = []
        for k in range(extra):
            last = k == extra - 1
            reason = ereq.finish_reason if last else None
            buf.append(encoder.token_bytes([token], reason, ereq.cached_tokens))
            writer.pending += 1
            if len(buf) >= OVERRUN_FLUSH_EVENTS or last:
                await writer.flush(buf)
                await asyncio.sleep(0)  # let the loop serve the other streams

    async def _unary(
        self, request: web.Request, encoder: WireEncoder, ereq: AnyRequest, entry: Json,
        headers: dict[str, str],
    ) -> web.StreamResponse:  # fmt: skip
        limit = self.faults.disconnect_after_tokens
        if limit is not None:
            async for _ in ereq.batches():
                if ereq.completion_tokens >= limit:
                    return _drop_connection(request)
        await ereq.wait()
        if self.faults.stall_after_tokens is not None:
            await self.sleep(self.faults.stall_s)
        body = encoder.final_body(ereq.output_ids, ereq.finish_reason, ereq.cached_tokens)
        entry["sent_ns"] = [self.engine.clock.now_ns()] * ereq.completion_tokens
        return _json(body, headers=headers)

    async def sleep(self, seconds: float) -> None:
        clock = self.engine.clock
        await clock.sleep_until(clock.now_ns() + round(seconds * 1e9))


class _Writer:
    """Flushes buffered SSE events and tracks sent tokens for the fault switches."""

    def __init__(self, resp: web.StreamResponse, entry: Json, server: SimServer) -> None:
        self.resp, self.entry, self.server = resp, entry, server
        self.sent = 0
        self.pending = 0
        self.stalled = False

    async def flush(self, buf: list[bytes]) -> None:
        if not buf:
            return
        data = b"".join(buf)
        buf.clear()
        await self.resp.write(data)
        now = self.server.engine.clock.now_ns()
        self.entry["sent_ns"].extend([now] * self.pending)
        self.sent += self.pending
        self.pending = 0

    def due_disconnect(self) -> bool:
        limit = self.server.faults.disconnect_after_tokens
        return limit is not None and self.sent + self.pending >= limit

    def due_stall(self) -> bool:
        limit = self.server.faults.stall_after_tokens
        if limit is None or self.stalled or self.sent + self.pending < limit:
            return False
        self.stalled = True
        return True

    async def drop(self, request: web.Request, buf: list[bytes]) -> web.StreamResponse:
        await self.flush(buf)
        _drop_connection(request)
        return self.resp


def _prometheus(registry: CollectorRegistry) -> web.Response:
    return web.Response(body=exposition(registry),
                        headers={"Content-Type": "text/plain; version=0.0.4"})


def _drop_connection(request: web.Request) -> web.Response:
    """Close the socket under the client (``disconnect_after_tokens`` fault)."""
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response(status=499)


def _entry(protocol: str, ereq: AnyRequest) -> Json:
    return {
        "request_id": ereq.request_id,
        "protocol": protocol,
        "arrival_ns": ereq.arrival_ns,
        "prompt_tokens": ereq.prompt_tokens,
        "max_tokens": ereq.max_tokens,
        "sent_ns": [],
    }


#: what a finished request adds to its debug-log entry (the engine request's own names)
FINISHED = ("cached_tokens", "completion_tokens", "first_token_ns", "finish_ns",
            "finish_reason", "token_ns")


def _finish_entry(entry: Json, ereq: AnyRequest) -> Json:
    entry.update({name: getattr(ereq, name) for name in FINISHED})
    return entry


class _BadRequestLog(logging.Filter):
    """aiohttp answers a malformed request (a 100k-character header line, a broken
    request line) with a 400 itself, then logs it at ERROR with a traceback. For a
    server under test that is the client's mistake, not the server's: one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import BadHttpMessage

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BadHttpMessage):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = f"bad request answered 400: {exc.message:.200}", None
            record.exc_info = record.exc_text = None
        return True


_BAD_REQUEST_LOG = _BadRequestLog()


def create_app(engine: Engine | Cluster) -> web.Application:
    """The aiohttp application serving ``engine`` (the caller starts/stops the engine)."""
    server = SimServer(engine)
    server.app[SERVER_KEY] = server
    logging.getLogger("aiohttp.server").addFilter(_BAD_REQUEST_LOG)  # idempotent
    return server.app


@dataclass(frozen=True, slots=True)
class SimHandle:
    """A running embedded engine: where it listens and what it runs."""

    base_url: str
    host: str
    port: int
    engine: Engine | Cluster
    config: EngineConfig
    app: web.Application

    def debug_requests(self) -> list[Json]:
        """The server's per-request truth (same rows as ``GET /debug/requests``)."""
        return list(self.app[SERVER_KEY].debug_log)


@asynccontextmanager
async def serve_sim(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: EngineConfig | None = None,
    clock: Clock | None = None,
    cluster: ClusterConfig | None = None,
    **engine_knobs: Any,
) -> AsyncIterator[SimHandle]:
    """Run the embedded engine behind HTTP on ``host:port`` (port 0: any free port).
    ``engine_knobs`` are ``EngineConfig`` fields and fault switch names
    (``serve_sim(block_size=32, error_rate=0.1)``), or pass a whole ``config``; the
    cluster knobs (``workers``, ``router``, ...) or a ``cluster`` serve a simulated cluster.
    """
    knobs, asked = split_knobs(engine_knobs)
    if config is not None and knobs:
        raise ValueError("pass either config= or engine knobs, not both")
    cluster = cluster or asked
    cfg = config or EngineConfig.from_knobs(**knobs)
    engine: Engine | Cluster
    if cluster is None:
        engine = Engine(cfg, clock or WallClock())
    else:
        engine = Cluster(cfg, cluster, clock or WallClock())
    await engine.start()
    app = create_app(engine)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:  # unresolvable, not this machine's, in use: ListenError
            raise ListenError(host, port, exc) from None
        bound = runner.addresses[0][1]
        url_host = f"[{host}]" if ":" in host else host
        log.info("embedded engine listening on http://%s:%d", url_host, bound)
        yield SimHandle(f"http://{url_host}:{bound}", host, bound, engine, cfg, app)
    finally:
        await engine.stop()
        await runner.cleanup()


async def serve_forever(
    host: str, port: int, config: EngineConfig, ready: Any = None,
    cluster: ClusterConfig | None = None,
) -> None:  # fmt: skip
    """Serve until cancelled; ``ready(handle)`` is called once listening (the CLI prints)."""
    async with serve_sim(host, port, config=config, cluster=cluster) as handle:
        if ready is not None:
            ready(handle)
        await asyncio.Event().wait()


async def _json_body(request: web.Request) -> dict[str, Any]:
    """A request's body as a JSON object, else a 400 ``WireError`` saying why."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise WireError(400, f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise WireError(400, "body must be a JSON object")
    return body
