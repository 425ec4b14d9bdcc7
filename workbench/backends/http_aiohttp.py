"""The portable fallback client (``executor.http: aiohttp``), on aiohttp's public API only.

Same contract and records as ``http1.HttpToolsClient``, coarser timing: dispatch is
stamped when aiohttp reports the body sent, each read when the stream's task gets it.
"""

from __future__ import annotations

import asyncio
import ssl
from types import SimpleNamespace
from typing import Any, NoReturn

import aiohttp

from workbench.backends.overrun import (
    AFTER_DONE_MAX_BYTES,
    DRAIN_S,
    HELD_AFTER_DONE_S,
    AfterDone,
    HeldJudgement,
)
from workbench.backends.stream import (
    ERROR_BODY_MAX,
    HEAD_MAX,
    HEAD_TOO_LARGE,
    ClientSettings,
    ConnectError,
    ConnectTimeoutError,
    DisconnectedError,
    IdleTimeoutError,
    ResponseBody,
    StaleConnectionError,
    inflater_for,
    kept_header,
    malformed,
    sent_at,
)
from workbench.backends.waits import connect_began, note_connect_wait, note_held_wait
from workbench.bodies import read_body
from workbench.records import RequestRecord

__all__ = ["AiohttpClient"]

# aiohttp >= 3.10 names the two read/connect timeouts; 3.9 raises ServerTimeoutError for both
_SOCK_READ_TIMEOUT = getattr(aiohttp, "SocketTimeoutError", aiohttp.ServerTimeoutError)
_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", None)


class AiohttpClient(ClientSettings):
    _session: aiohttp.ClientSession | None = None
    #: a request sent once more goes on a new connection: a session that never reuses one
    #: (made at the first resend; docs/wire-protocols.md, "Idle connections")
    _fresh: aiohttp.ClientSession | None = None

    def __post_init__(self) -> None:
        #: bodies read on to their end after the request ended at [DONE] (see ``_drain``):
        #: their connections are busy until then (docs/wire-protocols.md, "HTTP framing")
        self._drains: set[asyncio.Task[bool]] = set()
        self._waiting = 0  # requests waiting for a drain to end
        self.after_done = AfterDone()
        #: whether the server is taken to hold its streams open after [DONE]
        self._judgement = HeldJudgement(self.after_done)
        #: while it is: the one body read on after [DONE] as evidence (bounded by
        #: ``HELD_AFTER_DONE_S``; no request waits for it)
        self._probe: asyncio.Task[bool] | None = None
        #: connections back in aiohttp's pool, as far as its public API shows: bodies read
        #: to their end on a kept-alive answer, less the reuses aiohttp traced. aiohttp pools
        #: a connection at its body's end, before the reader counts it, so a reuse may come
        #: first (the count dips below 0 until then); a connection aiohttp opened shows the
        #: pool was empty, so the count falls to 0 (one the server closed idle is gone)
        self._idle = 0
        self._active = 0  # requests between their send and their answer's end

    async def open(self) -> None:
        self._session = self._new_session(fresh=False)

    def _new_session(self, *, fresh: bool) -> aiohttp.ClientSession:
        """The client's session; ``fresh``: one whose every request has a new connection."""
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(self._body_sent)
        trace.on_connection_reuseconn.append(self._reused)
        trace.on_connection_create_start.append(self._opening)
        trace.on_connection_create_end.append(self._opened)
        # an idle connection past connection_idle_s is closed, not reused (aiohttp's own
        # default keeps one 15 s, longer than the engines' servers do)
        reuse: dict[str, Any] = (
            {"force_close": True} if fresh else {"keepalive_timeout": self.connection_idle_s})
        connector = aiohttp.TCPConnector(
            limit=max(0, self.max_connections),
            # an explicit context: aiohttp 3.9.0 did not verify with ``ssl=True``
            ssl=self.ssl_context if self.ssl_context is not None else ssl.create_default_context(),
            **reuse,
        )
        return aiohttp.ClientSession(
            # no cookies: one shared jar would pin every unit to one backend of a balancer
            cookie_jar=aiohttp.DummyCookieJar(),
            connector=connector,
            headers=self.headers,
            trace_configs=[trace],
            # stream.Inflater inflates piece by piece (aiohttp would inflate a whole read)
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(
                total=self.request_timeout_s, sock_connect=self.idle_s, sock_read=self.idle_s
            ),
        )

    async def close(self) -> None:
        await self._drop_drains(probe=True)
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the HTTP client is not open")
        return self._session

    async def _reused(
        self, session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        self._idle -= 1
        req = ctx.trace_request_ctx  # a kept-alive connection carries this request
        if isinstance(req, _Sent):
            req.reused = True

    async def _opening(
        self, session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        req = ctx.trace_request_ctx  # a new connection for this request: timed to its end
        if isinstance(req, _Sent):
            req.began = connect_began(req.state.rec, self.now())

    async def _opened(
        self, session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        self._idle = min(self._idle, 0)  # aiohttp found none alive in its pool
        req = ctx.trace_request_ctx  # the connect's time is the server's, not the client's
        if isinstance(req, _Sent) and req.began is not None:
            note_connect_wait(req.state.rec, req.began, self.now())
            req.began = None

    async def _body_sent(
        self, session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        req = ctx.trace_request_ctx  # the record's dispatch is when its body is first out
        if isinstance(req, _Sent) and not req.sent:
            req.sent = True
            sent_at(req.state, self.now())

    async def post(
        self,
        url: str,
        payload: bytes,
        request_id: str,
        rec: RequestRecord,
        state: ResponseBody,
        extra_headers: dict[str, str] | None = None,
        fresh: bool = False,
    ) -> tuple[int, bytes]:
        # identity: a compressed stream would reach us in compressor-sized bursts
        headers = {
            "Content-Type": "application/json", "Accept-Encoding": "identity",
            "x-request-id": request_id,
        }  # fmt: skip
        if extra_headers:
            headers.update(extra_headers)
        now = self.now
        # a connection reading its body's end is waited for only when none is idle
        if self._idle <= 0 and len(self._drains) > self._waiting:
            t0 = now()
            try:
                await self._drain_or_drop()
            finally:
                note_held_wait(rec, now() - t0)
        probe = self._probe
        if (probe is not None and 0 < self.max_connections
                <= self._active + len(self._drains) + 1):  # fmt: skip
            probe.cancel()  # a request needs the probe's slot: the evidence gives way
        rec.dispatch_ns = now()  # replaced when aiohttp reports the body sent
        head_due = asyncio.timeout(self.idle_s)
        sent = _Sent(state)
        session = self.session
        if fresh:  # sent once more: on a new connection
            session = self._fresh = self._fresh or self._new_session(fresh=True)
        self._active += 1
        try:
            try:
                # the head is due within the idle timeout of sending (as in http1)
                async with head_due:
                    resp = await session.post(
                        url, data=payload, headers=headers, trace_request_ctx=sent
                    )
            except TimeoutError:
                if not head_due.expired():
                    raise
                raise IdleTimeoutError(f"no whole response head within {self.idle_s}s") from None
            drain = False
            try:
                rec.http_status = resp.status
                head = sum(len(k) + len(v) + 4 for k, v in resp.raw_headers)
                if head > HEAD_MAX:  # as http1 refuses it (aiohttp bounds only each line)
                    raise malformed(HEAD_TOO_LARGE)
                state.headers.update(
                    (k.lower(), v) for k, v in resp.headers.items()
                    if kept_header(k.lower())
                )
                inflater = inflater_for(resp.headers.get("Content-Encoding", ""))
                if resp.status != 200:
                    body = await read_body(resp, ERROR_BODY_MAX, inflater)
                    return resp.status, body.data
                if resp.content_type == "application/json" and not state.takes_json:
                    # not a stream: an error body (a whole answer is read as such below)
                    state.json_body = True
                    body = await read_body(resp, ERROR_BODY_MAX, inflater)
                    return 200, body.data
                # a body delimited by the close is whole at [DONE] (see http1)
                by_close = "Content-Length" not in resp.headers and not resp.headers.get(
                    "Transfer-Encoding"
                )
                try:
                    async for chunk in resp.content.iter_any():
                        t = now()
                        for piece in (inflater.pieces(chunk) if inflater else (chunk,)):
                            state.feed(t, piece)
                            if state.cut or (by_close and state.done):
                                # overrun, or the end: drop the connection, read no more
                                resp.close()
                                return 200, b""
                            if state.done and not resp.content.is_eof():
                                # [DONE] before the body's end: the request ends here; the
                                # body's end is read on in the background (as in http1)
                                if fresh:  # a resend's connection is never reused
                                    resp.close()
                                elif self._judgement.holds and self._probe is not None:
                                    resp.close()  # this server holds it open: no drain
                                    self.after_done.dropped_at_done += 1
                                else:
                                    drain = True
                                return 200, b""
                except (aiohttp.ClientError, TimeoutError):
                    if not state.done or state.error is not None:
                        raise
                    return 200, b""  # failed after [DONE]: what was measured stands
                state.close(now())
                self._judgement.ended_promptly()
                return 200, b""
            finally:
                if drain:
                    self._start_drain(resp)
                else:  # as ``async with resp`` ends
                    # before a close is seen (it ends the body too); a fresh session pools none
                    pooled = not fresh and _pooled(resp)
                    resp.release()
                    await resp.wait_for_close()
                    if pooled:
                        self._idle += 1
        except Exception as exc:
            _translate(exc, rec, reused=sent.reused)
        finally:
            self._active -= 1

    def _start_drain(self, resp: aiohttp.ClientResponse) -> None:
        """Read ``resp``'s body on to its end in the background; while the server is taken
        to hold its streams, as the one probe, bounded by ``HELD_AFTER_DONE_S``, and so
        under ``max_connections`` (a request may wait in aiohttp's connector for its slot,
        unseen: docs/metrics.md, "Client")."""
        probe = self._judgement.holds
        short = probe or self.max_connections > 0
        task = asyncio.get_running_loop().create_task(
            _drain(resp, HELD_AFTER_DONE_S if short else self.idle_s or DRAIN_S))
        if probe:
            self._probe = task
        else:
            self._drains.add(task)
        task.add_done_callback(lambda t: self._drain_ended(t, resp))

    def _drain_ended(self, task: asyncio.Task[bool], resp: aiohttp.ClientResponse) -> None:
        self._drains.discard(task)
        if task.cancelled():  # maybe before it ran at all (the client closing): no leak
            resp.close()
        whole = not task.cancelled() and task.result()
        if whole and _pooled(resp):
            self._idle += 1  # back in aiohttp's pool
        if task is self._probe:
            self._probe = None
            if whole:  # the body ended within HELD_AFTER_DONE_S: the server ends them again
                self._judgement.ended_promptly()
        elif not whole and not task.cancelled() and self.max_connections > 0:
            self._judgement.held()  # its HELD_AFTER_DONE_S bound, under max_connections

    async def _drain_or_drop(self) -> None:
        """A connection is still reading its body's end after [DONE]: wait for it (it comes
        back a moment after, as a server's last chunk does) or, past
        ``HELD_AFTER_DONE_S``, take the server to hold its streams open and drop the
        drains, so the connections open never outnumber the requests that need them."""
        self._waiting += 1
        try:
            done, _ = await asyncio.wait(
                set(self._drains), timeout=HELD_AFTER_DONE_S,
                return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            self._waiting -= 1
        if not done:
            self._judgement.held()
            await self._drop_drains()

    async def _drop_drains(self, probe: bool = False) -> None:
        drains = set(self._drains)
        if probe and self._probe is not None:
            drains.add(self._probe)
        for task in drains:
            task.cancel()
        if drains:
            await asyncio.gather(*drains, return_exceptions=True)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        try:
            async with self.session.get(
                url, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                inflater = inflater_for(resp.headers.get("Content-Encoding", ""))
                body = await read_body(resp, ERROR_BODY_MAX, inflater)
            if _pooled(resp):
                self._idle += 1  # back in aiohttp's pool (at its body's end)
            return resp.status, body.data
        except Exception as exc:
            _translate(exc, None, reused=False)


def _pooled(resp: aiohttp.ClientResponse) -> bool:
    """aiohttp put the answer's connection back in its pool: the body was read to its end
    (whatever the reader made of it) and the answer leaves it open (HTTP/1.1, no close)."""
    return resp.content.is_eof() and resp.version is not None and (
        tuple(resp.version) >= (1, 1) and resp.headers.get("Connection", "").lower() != "close")


async def _drain(resp: aiohttp.ClientResponse, bound_s: float) -> bool:
    """Read a body on to its end after its request ended at [DONE], so its connection goes
    back to the pool; dropped past ``AFTER_DONE_MAX_BYTES``, ``bound_s`` or when cancelled.
    Whether the body ended."""
    whole = False
    try:
        read = 0
        async with asyncio.timeout(bound_s):
            async for chunk in resp.content.iter_any():
                read += len(chunk)
                if read > AFTER_DONE_MAX_BYTES:
                    return False
        whole = True
    except (aiohttp.ClientError, TimeoutError, OSError):
        pass
    finally:
        if whole:
            resp.release()  # back to the pool
        else:
            resp.close()
    return whole


class _Sent:
    """One POST's trace context: its state, whether its body went out and on a reused
    connection, and when the new connection it is making began (None: none is)."""

    __slots__ = ("began", "reused", "sent", "state")

    def __init__(self, state: ResponseBody) -> None:
        self.state, self.sent, self.reused = state, False, False
        self.began: tuple[int, int] | None = None  # waits.connect_began


def _translate(exc: BaseException, rec: RequestRecord | None, *, reused: bool) -> NoReturn:
    """Raise aiohttp's failure as the common errors of ``backends/stream.py`` (others as is)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        raise ConnectError(str(exc)) from exc
    if isinstance(exc, aiohttp.ClientResponseError) and not isinstance(
        exc, aiohttp.ClientPayloadError | aiohttp.ContentTypeError
    ):
        # aiohttp's parser refused the response (we never call raise_for_status)
        first = str(exc.message).splitlines()[0] if exc.message else type(exc).__name__
        raise malformed(first) from exc
    if _CONNECT_TIMEOUT is not None and isinstance(exc, _CONNECT_TIMEOUT):
        raise ConnectTimeoutError(str(exc)) from exc
    if isinstance(exc, _SOCK_READ_TIMEOUT):
        raise IdleTimeoutError(str(exc)) from exc
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) and (
        rec is not None and rec.http_status is None and reused
    ):
        # before the status line on a kept-alive connection: sent once more, as in http1
        raise StaleConnectionError(str(exc) or type(exc).__name__) from exc
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError) or (
        isinstance(exc, aiohttp.ClientOSError) and rec is not None
    ):
        raise DisconnectedError(str(exc) or type(exc).__name__) from exc
    raise exc
