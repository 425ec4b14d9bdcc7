"""The one place that talks HTTP for a replay and reads the clock for requests.

Codecs build bodies and parse payloads; the HTTP client (``executor.http``) moves bytes
and stamps time; this module puts them together. Failures never raise out of ``send``:
each ends as a record with ``status="error"``; only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

import orjson

from workbench import redact
from workbench.backends.base import (
    BackendError,
    Codec,
    MissingUsage,
    WireRequest,
    json_body_error,
)
from workbench.backends.overrun import AfterDone, OverrunGuard
from workbench.backends.pace import DEFAULT_BUDGET_MS, Pacer
from workbench.backends.stream import (
    CONNECT_FAILED,
    RAW_MAX,
    RETRY_AFTER,
    ConnectError,
    ConnectTimeoutError,
    DisconnectedError,
    IdleTimeoutError,
    ResponseBody,
    StaleConnectionError,
    StreamState,
    WholeBody,
)
from workbench.backends.waits import note_stale_attempt
from workbench.clock import Clock, WallClock
from workbench.keepalive import CONNECTION_IDLE_S
from workbench.placement import placement_extra
from workbench.records import RequestRecord, Status
from workbench.redact import basic_authorization, register_url
from workbench.redact import register as register_secret

if TYPE_CHECKING:
    from collections.abc import Callable

    from workbench.backends.http1 import HttpToolsClient
    from workbench.backends.http_aiohttp import AiohttpClient

    #: the clients, one contract: ``open``/``close``, ``post``/``get``, the errors of stream.py
    HTTPClient = HttpToolsClient | AiohttpClient
    from workbench.config import RunConfig

__all__ = [
    "HTTP_CLIENTS",
    "HTTPStatusError",
    "Transport",
    "TransportOptions",
    "normalize_base_url",
    "with_query",
]

logger = logging.getLogger(__name__)

#: characters of a session id sent as they are in ``x-session-id``; others %-encoded
SESSION_SAFE = "-_.~:/@+=,;!$&'()*"

#: ``executor.http``: the client on the measured path (the first is the default)
HTTP_CLIENTS = ("httptools", "aiohttp")


@dataclass(frozen=True)
class TransportOptions:
    """Where to send and how long to wait (``max_connections`` 0: no limit)."""

    base_url: str
    api_key_env: str | None = "OPENAI_API_KEY"
    request_timeout_s: float | None = None
    stream_idle_timeout_s: float | None = 60.0
    max_connections: int = 0
    http: str = HTTP_CLIENTS[0]
    ssl_context: ssl.SSLContext | None = None
    pace_ms: float | Literal["auto"] = 0.0
    authorization: str | None = None  # from the target URL's user:password (redact.py)
    #: a pooled connection idle longer is not reused (docs/wire-protocols.md, "Idle connections")
    connection_idle_s: float | None = CONNECTION_IDLE_S

    @classmethod
    def of_run(cls, cfg: RunConfig, base_url: str) -> TransportOptions:
        """A run's options: its backend's key, its arrival timeouts, its executor's client."""
        a = cfg.arrival
        # non-streaming: only the request timeout applies (docs/wire-protocols.md)
        idle = a.stream_idle_timeout_s if cfg.backend.stream else None
        cfg.register_secrets()  # every process that sends keeps its credentials out of outputs
        register_url(base_url)  # the URL as given to this process (its query values)
        return cls(
            base_url=base_url,
            api_key_env=cfg.backend.api_key_env,
            request_timeout_s=a.request_timeout_s,
            stream_idle_timeout_s=idle,
            http=cfg.executor.http,
            pace_ms=cfg.executor.pace_ms,
            authorization=basic_authorization(cfg.target.url),
            connection_idle_s=cfg.executor.connection_idle_s,
        )


def _client(
    options: TransportOptions, now: Callable[[], int], headers: dict[str, str]
) -> HTTPClient:
    cls: type[HTTPClient]
    if options.http == "httptools":
        from workbench.backends.http1 import HttpToolsClient as cls
    elif options.http == "aiohttp":
        from workbench.backends.http_aiohttp import AiohttpClient as cls
    else:
        raise ValueError(f"unknown HTTP client {options.http!r}; valid: {', '.join(HTTP_CLIENTS)}")
    return cls(
        now,
        headers=headers,
        request_timeout_s=options.request_timeout_s,
        idle_s=options.stream_idle_timeout_s,
        max_connections=options.max_connections,
        ssl_context=options.ssl_context,
        connection_idle_s=options.connection_idle_s,
    )


_CLAMP_HINT = (
    "when prompt + max_tokens exceeds the context, vLLM clamps max_tokens to max_model_len "
    "− prompt and llama.cpp stops at the full context; set context.max_model_len to the "
    "server's so the context guard skips such rounds before they are sent"
)


class HTTPStatusError(BackendError):
    """The server answered with a non-200 status."""

    def __init__(self, status: int, body: str, retry_after: str | None = None) -> None:
        self.status = status
        self.body = body
        text = redact.excerpt(body.strip(), RAW_MAX) or "(empty body)"
        # vLLM's /v1/completions clamps max_tokens, then rejects our min_tokens: say why
        hint = f" ({_CLAMP_HINT})" if status == 400 and "min_tokens must be" in text else ""
        if retry_after:  # a wait the server asked for (docs/wire-protocols.md, "Errors")
            wait = redact.excerpt(" ".join(retry_after.split()), 64)
            hint += (f" (the server asked to retry after {wait}; not retried: a replay keeps "
                     "its schedule)")
        super().__init__(f"HTTP {status}: {text}{hint}")


def normalize_base_url(url: str) -> str:
    """The server root: scheme added if missing; query, trailing ``/`` and ``/v1`` dropped."""
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    url = url.partition("?")[0].rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    return url


def with_query(url: str, base_url: str) -> str:
    """``url`` with the query of the target URL ``base_url`` (if any) appended."""
    query = base_url.partition("?")[2]
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


class Transport:
    """One HTTP client per run (``executor.http``); ``send`` one request per call."""

    takes_segments = False  # a wire carries token ids (or their text)

    def __init__(self, options: TransportOptions, clock: Clock | None = None) -> None:
        self.options = options
        self.clock: Clock = clock if clock is not None else WallClock()
        self.root = normalize_base_url(options.base_url)
        self._urls: dict[str, str] = {}
        # a wall clock is time.perf_counter_ns itself: one C call per read
        self._now = time.perf_counter_ns if type(self.clock) is WallClock else self.clock.now_ns
        self._client: HTTPClient | None = None
        #: requests sent once more after a reused connection died before any byte came
        self.resent_stale = 0
        self._after_done: AfterDone | None = None  # the client's, kept after it closes
        # executor.pace_ms: sends, and what follows a closed record, wait their turn (pace.py)
        pace = options.pace_ms
        self._pacer: Pacer | None = (
            Pacer(DEFAULT_BUDGET_MS, auto=True) if pace == "auto"
            else Pacer(float(pace)) if pace > 0
            else None
        )  # fmt: skip

    @property
    def paced_turns(self) -> int:
        """Stream ends and sends that waited for their turn (``executor.pace_ms``)."""
        return self._pacer.deferred if self._pacer is not None else 0

    @property
    def after_done(self) -> dict[str, int]:
        """What the client did about streams whose body did not end with ``[DONE]``
        (``overrun.AfterDone``; zeros before the client opens)."""
        return (self._after_done or AfterDone()).as_dict()

    def auth_headers(self) -> dict[str, str]:
        """The target URL's own credentials, else the bearer key of ``api_key_env``, else none."""
        opts = self.options
        if opts.authorization:  # the target URL's own credentials win over the env key
            return {"Authorization": opts.authorization}
        key = os.environ.get(opts.api_key_env) if opts.api_key_env else None
        if key:
            register_secret(key)
            return {"Authorization": f"Bearer {key}"}
        return {}

    async def __aenter__(self) -> Transport:
        client = _client(self.options, self._now, self.auth_headers())
        await client.open()
        self._client = client
        self._after_done = client.after_done
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def client(self) -> HTTPClient:
        if self._client is None:
            raise RuntimeError("Transport is not open: use 'async with Transport(...)'")
        return self._client

    def _url(self, codec: Codec) -> str:
        url = self._urls.get(codec.name)
        if url is None:
            url = self._urls[codec.name] = with_query(codec.url(self.root), self.options.base_url)
        return url

    async def check_reachable(self, timeout_s: float = 10.0) -> tuple[int, bytes]:
        """``GET /v1/models``'s ``(status, body)``; ``BackendError`` when nothing answers
        at the target (any HTTP status will do)."""
        try:
            return await self.client.get(
                with_query(f"{self.root}/v1/models", self.options.base_url), timeout_s)
        except (TimeoutError, OSError, BackendError) as exc:
            raise BackendError(
                f"cannot reach the target {self.root} ({type(exc).__name__}: {exc}); "
                "is the server running, and is the URL its root (http://HOST:PORT)?"
            ) from None

    async def warm(self, n: int, timeout_s: float = 10.0) -> int:
        """Open up to ``n`` keep-alive connections now (``GET /v1/models``); how many answered."""
        if n <= 0:
            return 0
        url = with_query(f"{self.root}/v1/models", self.options.base_url)
        client = self.client

        async def one() -> bool:
            try:
                await client.get(url, timeout_s)
                return True
            except (TimeoutError, OSError, BackendError):
                return False

        return sum(await asyncio.gather(*(one() for _ in range(n))))

    async def send(self, codec: Codec, req: WireRequest, rec: RequestRecord) -> list[int] | None:
        """Dispatch ``req``, stream the answer into ``rec``; the output ids (None if it failed)."""
        client = self.client
        rec.sent_prompt_tokens = len(req.prompt_ids)
        pacer = self._pacer
        try:
            if pacer is not None and (turn := pacer.turn()) is not None:
                await pacer.wait(turn)
            ids = await self._exchange_once_more_if_stale(client, codec, req, rec)
        except asyncio.CancelledError:
            self._close_record(rec, "cancelled", "cancelled")
            raise
        except Exception as exc:
            if isinstance(exc, ConnectError | ConnectTimeoutError):  # never reached the server
                timed_out = isinstance(exc, TimeoutError)
                rec.extra[CONNECT_FAILED] = "timeout" if timed_out else "refused"
                rec.dispatch_ns = None  # (aiohttp's stamp before its connect) nothing went out
            self._close_record(rec, "error", self._describe(exc, rec))
            return None
        self._close_record(rec, "ok", None)
        if pacer is not None and (turn := pacer.turn()) is not None:
            # the record is whole: what follows (bookkeeping, the next request) waits its turn
            await pacer.wait(turn)
        return ids

    async def _exchange_once_more_if_stale(
        self, client: HTTPClient, codec: Codec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | None:
        """``_exchange``, once more on a new connection (flagged, counted) when a reused one
        died before any byte of the answer."""
        try:
            return await self._exchange(client, codec, req, rec)
        except StaleConnectionError:
            # the server closed the connection idle: it never answered, nor read, the
            # request (docs/wire-protocols.md, "Idle connections"); timed from the resend
            rec.extra["stale_connection_retry"] = True
            self.resent_stale += 1
            # the first attempt, from its dispatch to here, is counted apart from the
            # release lag (backends/waits.py)
            first = rec.dispatch_ns
            note_stale_attempt(rec, 0 if first is None else self._now() - first)
            return await self._exchange(client, codec, req, rec, fresh=True)

    async def _exchange(
        self, client: HTTPClient, codec: Codec, req: WireRequest, rec: RequestRecord,
        fresh: bool = False,
    ) -> list[int] | None:
        payload = orjson.dumps(codec.body(req))
        parser = codec.parser(req)
        guard = OverrunGuard(rec, req.max_tokens, by_events=not codec.returns_token_ids,
                             prompt_tokens=len(req.prompt_ids))
        whole = not codec.stream  # backend.stream false: one JSON answer
        state: ResponseBody = (
            WholeBody(parser, rec, guard.event_limit) if whole
            else StreamState(parser, rec, guard, self.options.stream_idle_timeout_s)
        )  # fmt: skip
        state.on_sent = req.on_sent
        headers = dict(codec.request_headers(req) or {})  # backends/extras.py
        if req.session_id:  # routers key session affinity on it (docs/cluster.md)
            headers.setdefault("x-session-id", quote(req.session_id, safe=SESSION_SAFE))
        status, body = await client.post(
            self._url(codec), payload, req.request_id, rec, state, headers or None, fresh
        )
        if state.headers:  # a simulated cluster's worker (docs/cluster.md)
            rec.extra.update(placement_extra(state.headers))
        if status != 200:
            raise HTTPStatusError(status, body.decode("utf-8", errors="replace"),
                                  state.headers.get(RETRY_AFTER))
        if state.json_body and not whole:  # a 200 whose body is JSON: an error body
            raise json_body_error(body[:RAW_MAX])
        if state.error is not None:
            raise state.error
        if (not_a_stream := state.not_a_stream()) is not None:
            raise not_a_stream
        if self._pacer is not None:
            self._pacer.observe(state.reads)
        try:
            out = parser.finish()
        except MissingUsage:
            if not isinstance(state, StreamState) or state.saw_done:
                raise
            # no [DONE] either: the stream was cut short, whatever the server does with usage
            raise BackendError("stream ended before [DONE] and without a usage block (cut "
                               "short by the server or a proxy)") from None
        rec.prompt_tokens = out.prompt_tokens
        rec.completion_tokens = out.completion_tokens
        rec.cached_tokens = out.cached_tokens
        rec.cached_tokens_reported = out.cached_tokens_reported
        rec.echoed_prompt_tokens = out.echoed_prompt_tokens
        rec.finish_reason = out.finish_reason
        rec.server_request_id = out.server_request_id
        guard.flag(out.completion_tokens)
        if whole:  # the output came at once, with the end of the body: TTFT = E2E
            rec.first_token_ns = rec.last_token_ns = rec.end_ns
        if out.server_metrics:
            rec.extra["server_metrics"] = out.server_metrics
        done = out.completion_tokens
        if done is not None and done < req.max_tokens and out.finish_reason == "length":
            # fewer output tokens than pinned, ended for length: the server cut max_tokens
            rec.extra["output_clamped"] = {"planned": req.max_tokens, "generated": done}
            logger.warning(
                "%s: the server generated %s of %s output tokens and ended for length: %s",
                req.request_id,
                done,
                req.max_tokens,
                _CLAMP_HINT,
            )
        return out.output_ids

    def _close_record(self, rec: RequestRecord, status: Status, error: str | None) -> None:
        if rec.end_ns is None:
            rec.end_ns = self.clock.now_ns()
        rec.status = status
        rec.error = error
        if rec.token_times_ns:
            rec.first_token_ns = rec.token_times_ns[0]
            rec.last_token_ns = rec.token_times_ns[-1]

    def _describe(self, exc: BaseException, rec: RequestRecord) -> str:
        """One line saying what failed, in the user's terms, with the progress made."""
        opts = self.options
        events = len(rec.token_times_ns)
        where = f" after {events} token events" if rec.http_status is not None else ""
        if isinstance(exc, BackendError):
            return str(exc) + (where if events else "")
        if isinstance(exc, IdleTimeoutError):
            return f"stream idle for more than {opts.stream_idle_timeout_s}s{where}"
        if isinstance(exc, ConnectTimeoutError):
            return f"timed out connecting to {self.root}"
        if isinstance(exc, TimeoutError):
            return f"request timed out after {opts.request_timeout_s}s{where}"
        if isinstance(exc, ConnectError):
            return f"cannot connect to {self.root}: {exc}"
        if isinstance(exc, DisconnectedError):
            return f"server disconnected mid-stream{where}: {exc}"
        if isinstance(exc, OSError):
            return f"{type(exc).__name__}{where}: {exc}"
        logger.debug("request %s failed unexpectedly", rec.request_id, exc_info=exc)
        return f"unexpected {type(exc).__name__}{where}: {exc}"
