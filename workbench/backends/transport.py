"""The one place that talks HTTP and reads the clock for requests.

Codecs build bodies and parse payloads; this module dispatches, frames the SSE
stream and stamps time, so TTFT and token-event bookkeeping exist exactly once.

Timing rules (SPEC §5): ``dispatch_ns`` is read when the request's bytes are
handed to the socket (``stamps.StampedRequest``; before the POST if they never are), so
TTFT starts when the server can first see the request and the client's own
preparation shows up as release lag, not as server latency; each network read
is stamped once, as the event loop hands it to aiohttp's protocol
(``stamps.RxStampedHandler``), and every event it completes shares that stamp; an
event counts as a *token event* only if the codec found at least one output
token id in it (role-only, empty and usage chunks do not); ``end_ns`` is
the read that carried ``[DONE]``, or the end of the body when a server omits it.

Failures never raise out of ``send``: an HTTP error (with the body text), a
refused connection, a disconnect mid-stream (token events so far are kept), an
idle stream, a request timeout, bad JSON or missing usage all end as a record
with ``status="error"`` and a clear ``error``. Only cancellation propagates,
after the record is marked ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Literal

import aiohttp
import orjson
import yarl

from workbench.backends.base import BackendError, Codec, StreamParser, WireRequest
from workbench.backends.overrun import AFTER_DONE_MAX_BYTES, OverrunGuard
from workbench.backends.pace import DEFAULT_BUDGET_MS, Pacer
from workbench.backends.sse import DONE, SSEDecoder
from workbench.backends.stamps import RxStampedHandler, StampedRequest, read_log, stamped_reads
from workbench.clock import Clock, WallClock
from workbench.records import RequestRecord, Status

if TYPE_CHECKING:
    from workbench.config import RunConfig

__all__ = ["HTTPStatusError", "Transport", "TransportOptions", "normalize_base_url"]

logger = logging.getLogger(__name__)

_ERROR_BODY_CHARS = 2000


@dataclass(frozen=True)
class TransportOptions:
    """Where to send and how long to wait.

    ``api_key_env`` names an environment variable holding a bearer token; the
    token itself is never stored. ``stream_idle_timeout_s`` bounds the silence
    between two reads (including the wait for response headers);
    ``request_timeout_s`` bounds the whole request. ``max_connections`` 0 means
    the connector is unlimited (admission is the runner's job, not the pool's).
    ``pace_ms``: the pacer's budget (``backends/pace.py``; ``executor.pace_ms``): 0
    off, ``"auto"`` 1 ms while responses stream.
    """

    base_url: str
    api_key_env: str | None = "OPENAI_API_KEY"
    request_timeout_s: float | None = None
    stream_idle_timeout_s: float | None = 60.0
    max_connections: int = 0
    pace_ms: float | Literal["auto"] = 0.0

    @classmethod
    def of_run(cls, cfg: RunConfig, base_url: str) -> TransportOptions:
        """A run's options: its backend's key, its arrival timeouts, its executor's pacing."""
        a = cfg.arrival
        return cls(
            base_url=base_url,
            api_key_env=cfg.backend.api_key_env,
            request_timeout_s=a.request_timeout_s,
            stream_idle_timeout_s=a.stream_idle_timeout_s,
            pace_ms=cfg.executor.pace_ms,
        )


_CLAMP_HINT = (
    "vLLM clamps max_tokens to max_model_len − prompt when prompt + max_tokens exceeds "
    "the context; set context.max_model_len to the server's so the context guard skips "
    "such rounds before they are sent"
)


class HTTPStatusError(BackendError):
    """The server answered with a non-200 status."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        text = body.strip()[:_ERROR_BODY_CHARS] or "(empty body)"
        # vLLM's /v1/completions clamps max_tokens first, then rejects our min_tokens
        # ("min_tokens must be less than or equal to max_tokens=8, got 32"): say why.
        hint = f" ({_CLAMP_HINT})" if status == 400 and "min_tokens must be" in text else ""
        super().__init__(f"HTTP {status}: {text}{hint}")


def _clamped(req: WireRequest, completion: int | None, finish: str | None) -> bool:
    """Fewer output tokens than pinned, ended for length: the server cut ``max_tokens``.

    vLLM does this silently (HTTP 200, ``finish_reason`` "length") on its native
    ``/inference/v1/generate`` even when ``min_tokens`` is sent. The record stays
    ``ok`` (the tokens did stream) but carries ``extra["output_clamped"]`` and a
    warning is logged, because the output no longer follows the plan.
    """
    return completion is not None and completion < req.max_tokens and finish == "length"


#: parse kept reads once this many are pending, or this many bytes (bounds memory per
#: stream). Small batches keep the parsing spread over the stream: deferring it all to
#: the end piled it up exactly when a wave of streams ended and new requests went out.
PARSE_BATCH_READS = 8
PARSE_BATCH_BYTES = 64 * 1024


class _StreamState:
    """SSE decoding and parsing of one response, fed (stamp, bytes) reads in order."""

    __slots__ = ("counts", "decoder", "done", "feed_all", "guard", "rec", "times")

    def __init__(self, parser: StreamParser, rec: RequestRecord, guard: OverrunGuard) -> None:
        self.decoder = SSEDecoder()
        self.feed_all = getattr(parser, "feed_all", None) or partial(_feed_each, parser)
        self.rec = rec
        self.times, self.counts = rec.token_times_ns, rec.token_counts
        self.done = False
        self.guard = guard  # output overrun: cuts a stream past max_tokens + margin

    def parse(self, reads: list[tuple[int, bytes]]) -> None:
        decode, feed_all, times, counts = self.decoder.feed, self.feed_all, self.times, self.counts
        nbytes = 0
        for t, chunk in reads:
            nbytes += len(chunk)
            if self.done:
                return
            payloads = decode(chunk)
            if not payloads:
                continue
            if DONE in payloads:
                payloads = payloads[: payloads.index(DONE)]
                self.done = True
                self.rec.end_ns = t
            if payloads:
                for n in feed_all(payloads):
                    times.append(t)
                    counts.append(n)
        self.guard.check_unfinished(self.decoder.pending)
        self.guard.check(counts, nbytes)

    def close(self, t: int) -> None:
        """End of body without ``[DONE]``: flush the decoder (a last unterminated event)."""
        payloads = self.decoder.close()
        if DONE in payloads:
            payloads = payloads[: payloads.index(DONE)]
        for n in self.feed_all(payloads) if payloads else ():
            self.times.append(t)
            self.counts.append(n)
        self.rec.end_ns = t


def _feed_each(parser: StreamParser, payloads: list[bytes]) -> list[int]:
    """``feed_all`` for parsers without one: the id count of each token event."""
    counts = []
    for data in payloads:
        ids = parser.feed(data)
        if ids:
            counts.append(len(ids))
    return counts


def normalize_base_url(url: str) -> str:
    """The server root: scheme added if missing, trailing ``/`` and ``/v1`` dropped.

    Codecs append their own paths, and the native token routes live outside
    ``/v1``, so a user-supplied ``.../v1`` must not leak into them.
    """
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    return url


class Transport:
    """One ``aiohttp.ClientSession`` per run; ``send`` one request at a time per call."""

    def __init__(self, options: TransportOptions, clock: Clock | None = None) -> None:
        self.options = options
        self.clock: Clock = clock if clock is not None else WallClock()
        self.root = normalize_base_url(options.base_url)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}
        # one request class per transport: its stamps and clock are this run's
        self._stamps: dict[str, RequestRecord] = {}
        self._request_class = type(
            "StampedRequest", (StampedRequest,), {"stamps": self._stamps, "clock": self.clock}
        )
        # executor.pace_ms: sends, and what follows a closed record, wait their turn (pace.py)
        pace = options.pace_ms
        self._pacer: Pacer | None = (
            Pacer(DEFAULT_BUDGET_MS, auto=True) if pace == "auto"
            else Pacer(float(pace)) if pace > 0
            else None
        )  # fmt: skip
        # a wall clock is time.perf_counter_ns itself: one C call per read
        stamp = time.perf_counter_ns if type(self.clock) is WallClock else self.clock.now_ns
        self._handler_class = type("RxStampedHandler", (RxStampedHandler,), {"now": stamp})

    async def __aenter__(self) -> Transport:
        opts = self.options
        headers: dict[str, str] = {}
        key = os.environ.get(opts.api_key_env) if opts.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        connector = aiohttp.TCPConnector(limit=max(0, opts.max_connections))
        # aiohttp builds every connection's protocol through the connector's factory
        connector._factory = partial(self._handler_class, loop=asyncio.get_running_loop())
        self._session = aiohttp.ClientSession(
            # a load generator keeps no cookies: one jar shared by every unit would
            # pin them all to one backend of a sticky balancer (and it filtered cookies per request)
            cookie_jar=aiohttp.DummyCookieJar(),
            connector=connector,
            headers=headers,
            request_class=self._request_class,
            timeout=aiohttp.ClientTimeout(
                total=opts.request_timeout_s, sock_read=opts.stream_idle_timeout_s
            ),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def paced_turns(self) -> int:
        """Stream ends and sends that waited for their turn (``executor.pace_ms``)."""
        return self._pacer.deferred if self._pacer is not None else 0

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Transport is not open: use 'async with Transport(...)'")
        return self._session

    def _url(self, codec: Codec) -> yarl.URL:
        """The codec's endpoint, parsed once (aiohttp parsed the string per request)."""
        url = self._urls.get(codec.name)
        if url is None:
            url = self._urls[codec.name] = yarl.URL(codec.url(self.root))
        return url

    async def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Fail fast, with one clear message, when nothing answers at the target.

        Any HTTP answer (even 404) proves a server is there; only a refused,
        unresolvable or silent address raises.
        """
        url = f"{self.root}/v1/models"
        try:
            async with self.session.get(
                url, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                await resp.read()
        except (TimeoutError, aiohttp.ClientConnectionError, OSError) as exc:
            raise BackendError(
                f"cannot reach the target {self.root} ({type(exc).__name__}: {exc}); "
                "is the server running, and is the URL its root (http://HOST:PORT)?"
            ) from None

    async def warm(self, n: int, timeout_s: float = 10.0) -> int:
        """Open up to ``n`` keep-alive connections now (``n`` concurrent ``GET /v1/models``).

        Otherwise the first wave of a run pays TCP connection setup inside its
        measured TTFT, and in a burst: 32 new connections at once put ~9 ms
        between dispatch and the server seeing the request, against ~2 ms on a
        pooled connection. Failures are ignored (the run reports its own).
        Returns how many answered.
        """
        if n <= 0:
            return 0
        url = f"{self.root}/v1/models"
        timeout = aiohttp.ClientTimeout(total=timeout_s)

        async def one() -> bool:
            try:
                async with self.session.get(url, timeout=timeout) as resp:
                    await resp.read()
                    return True
            except (TimeoutError, aiohttp.ClientError, OSError):
                return False

        return sum(await asyncio.gather(*(one() for _ in range(n))))

    async def send(self, codec: Codec, req: WireRequest, rec: RequestRecord) -> list[int] | None:
        """Dispatch ``req``, stream the answer into ``rec``; output ids or ``None``.

        Returns the codec's output ids (exact when ``codec.returns_token_ids``)
        only when the request succeeded.
        """
        session = self.session
        rec.sent_prompt_tokens = len(req.prompt_ids)
        try:
            if self._pacer is not None and (turn := self._pacer.turn()) is not None:
                await self._pacer.wait(turn)
            ids = await self._exchange_once_more_if_stale(session, codec, req, rec)
        except asyncio.CancelledError:
            self._close_record(rec, "cancelled", "cancelled")
            raise
        except Exception as exc:
            self._close_record(rec, "error", self._describe(exc, rec))
            return None
        self._close_record(rec, "ok", None)
        if self._pacer is not None and (turn := self._pacer.turn()) is not None:
            # the record is whole (a cancel from here on leaves it ok): what follows,
            # the runner's bookkeeping and the unit's next request, may wait its turn
            await self._pacer.wait(turn)
        return ids

    async def _exchange_once_more_if_stale(
        self, session: aiohttp.ClientSession, codec: Codec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | None:
        """``_exchange``, sent once more when a pooled connection turns out to be dead.

        Some servers (llama.cpp's ``llama-server``) close the connection after every
        stream while their headers say keep-alive; the next request on it fails
        before any response byte. Only that case is retried, once, and flagged in
        ``rec.extra``; a refused connection or any failure after the status line is not.
        """
        try:
            return await self._exchange(session, codec, req, rec)
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if rec.http_status is not None:
                raise
            rec.extra["stale_connection_retry"] = True
            return await self._exchange(session, codec, req, rec)

    async def _exchange(
        self, session: aiohttp.ClientSession, codec: Codec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | None:
        payload = orjson.dumps(codec.body(req))
        parser = codec.parser(req)
        guard = OverrunGuard(rec, req.max_tokens, by_events=not codec.returns_token_ids,
                             prompt_tokens=len(req.prompt_ids))
        headers = {"Content-Type": "application/json", "x-request-id": req.request_id}
        rec.dispatch_ns = self.clock.now_ns()  # replaced when the bytes go out
        self._stamps[req.request_id] = rec
        try:
            async with session.post(self._url(codec), data=payload, headers=headers) as resp:
                rec.http_status = resp.status
                if resp.status != 200:
                    raise HTTPStatusError(resp.status, await resp.text(errors="replace"))
                await self._stream(resp, parser, rec, guard)
        finally:
            self._stamps.pop(req.request_id, None)
        out = parser.finish()
        rec.prompt_tokens = out.prompt_tokens
        rec.completion_tokens = out.completion_tokens
        rec.cached_tokens = out.cached_tokens
        rec.cached_tokens_reported = out.cached_tokens_reported
        rec.echoed_prompt_tokens = out.echoed_prompt_tokens
        rec.finish_reason = out.finish_reason
        rec.server_request_id = out.server_request_id
        guard.flag(out.completion_tokens)
        if out.server_metrics:
            rec.extra["server_metrics"] = out.server_metrics
        if _clamped(req, out.completion_tokens, out.finish_reason):
            rec.extra["output_clamped"] = {
                "planned": req.max_tokens, "generated": out.completion_tokens
            }
            logger.warning(
                "%s: the server generated %s of %s output tokens and ended for length: %s",
                req.request_id, out.completion_tokens, req.max_tokens, _CLAMP_HINT,
            )
        return out.output_ids

    async def _stream(
        self,
        resp: aiohttp.ClientResponse,
        parser: StreamParser,
        rec: RequestRecord,
        guard: OverrunGuard,
    ) -> None:
        """Read to the end of the body, feeding events to ``parser`` until ``[DONE]``.

        Reads carry the protocol's stamps (``stamps.RxStampedHandler``; a stamp taken
        here when the connection's protocol is not ours).
        *Stamp now, parse later*: each read is only stamped and kept; its events
        are decoded and parsed in batches (every ``PARSE_BATCH_READS`` reads, at the
        end of the body, or when the stream fails). When hundreds of streams get a token in
        the same loop iteration, the k-th stream's stamp then waits only for the
        k−1 stamps before it, not for k−1 JSON parses; every event still gets the
        stamp of the read that completed it. Reading on past ``[DONE]`` lets the
        connection return to the pool; a failure after ``[DONE]`` changes nothing
        that was measured.
        """
        now = self.clock.now_ns
        state = _StreamState(parser, rec, guard)
        rx = read_log(resp)
        pending: list[tuple[int, bytes]] = []
        pos = size = reads = after_done = 0
        try:
            async for chunk in resp.content.iter_any():
                reads += 1
                if state.done:
                    after_done += len(chunk)
                    if after_done > AFTER_DONE_MAX_BYTES:
                        break  # a server still sending after [DONE]: it never stops
                    continue
                if rx is None:
                    pending.append((now(), chunk))
                else:
                    pending.extend(stamped_reads(rx, pos, chunk, now()))
                    pos += len(chunk)
                size += len(chunk)
                if len(pending) >= PARSE_BATCH_READS or size >= PARSE_BATCH_BYTES:
                    state.parse(pending)
                    pending, size = [], 0
        except (aiohttp.ClientError, TimeoutError):
            state.parse(pending)  # keep the token events that did arrive
            if not state.done:
                raise
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                state.parse(pending)
            raise
        state.parse(pending)
        if not state.done:
            state.close(now())
        if self._pacer is not None:
            self._pacer.observe(reads)

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
        if isinstance(exc, aiohttp.SocketTimeoutError):
            return f"stream idle for more than {opts.stream_idle_timeout_s}s{where}"
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return f"timed out connecting to {self.root}"
        if isinstance(exc, TimeoutError):
            return f"request timed out after {opts.request_timeout_s}s{where}"
        if isinstance(exc, aiohttp.ClientConnectorError):
            return f"cannot connect to {self.root}: {exc}"
        if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
            return f"server disconnected mid-stream{where}: {exc}"
        if isinstance(exc, aiohttp.ClientError):
            return f"{type(exc).__name__}{where}: {exc}"
        logger.debug("request %s failed unexpectedly", rec.request_id, exc_info=exc)
        return f"unexpected {type(exc).__name__}{where}: {exc}"
