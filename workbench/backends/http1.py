"""The measured request path: a small HTTP/1.1 client on ``asyncio.Protocol`` over httptools
(docs/design-notes.md, "The measured request path"; docs/wire-protocols.md, "HTTP framing").
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import httptools

from workbench.backends.base import BackendError
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
    Inflater,
    ResponseBody,
    StaleConnectionError,
    inflater_for,
    kept_header,
    malformed,
    sent_at,
)
from workbench.backends.waits import connect_began, note_connect_wait, note_held_wait
from workbench.records import RequestRecord

__all__ = ["HttpToolsClient"]

#: the error of a ``101 Switching Protocols`` answer (docs/wire-protocols.md, "HTTP framing")
UPGRADE_REFUSED = ("HTTP 101: Switching Protocols, an upgrade no request asked for "
                   "(the connection was dropped)")
USER_AGENT = b"workbench"


class Endpoint:
    """One URL, parsed once: where to connect and the request line's target."""

    __slots__ = ("host", "host_header", "key", "port", "ssl", "target")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendError(f"not an http(s) URL: {url!r}")
        self.ssl = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.ssl else 80)
        default = self.port == (443 if self.ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = (host if default else f"{host}:{self.port}").encode("idna")
        path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
        self.target = (path + (f"?{parts.query}" if parts.query else "")).encode("ascii")
        self.key = (parts.scheme, self.host, self.port)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight on it."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.now = pool.now
        self.pieces: list[bytes] = []  # body bytes of the read being parsed
        # httptools calls ``on_body`` once per HTTP chunk: the list's own append, no frame
        self.on_body = self.pieces.append
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.served = 0  # responses completed on this connection
        self.idle_since = 0.0  # the loop's time when it last went back to the pool
        self.timer: asyncio.TimerHandle | None = None
        #: the request ended at [DONE], the body's end is still to come: read on (bounded)
        #: so the connection goes back to the pool; it counts as busy meanwhile
        self.draining = False
        self.drained = 0  # bytes read while draining
        self.drain_ns = 0  # when the drain began (the request's [DONE])
        #: the client's connection bound, held while draining (released at the drain's end)
        self.slot: _Slots | None = None
        self._clear()

    def _clear(self) -> None:
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.state: ResponseBody | None = None
        self.rec: RequestRecord | None = None
        self.status = 0
        self.streaming = False  # status 200 with a StreamState: body goes to it
        self.pieces.clear()
        self.body: list[bytes] = []  # a non-streamed body (errors, GETs)
        self.body_size = 0
        self.complete = False
        self.keep = False
        self.delimited = False  # Content-Length or Transfer-Encoding seen
        self.got = False  # any byte of this response came
        self.last_ns = 0
        self.sent_ns = 0  # when the request was written (the head is due within idle_s)
        self.head_read = 0  # bytes read before the head was whole
        self.head_bytes = 0  # bytes of the head as parsed (status line and headers)
        self.interim = False  # a 1xx answer is being parsed (skipped)
        self.encoding = b""  # Content-Encoding of the answer
        self.inflate: Inflater | None = None  # a gzip/deflate body, inflated piece by piece
        self.refused: BackendError | None = None  # why a callback stopped the parser

    def start(
        self, data: bytes, state: ResponseBody | None, rec: RequestRecord | None
    ) -> asyncio.Future[tuple[int, bytes]]:
        """Write one request; the future ends with ``(status, body)`` or the failure."""
        if self.transport is None or self.closed:  # closed while the sender waited to run
            cls = StaleConnectionError if self.served else DisconnectedError
            raise cls("the connection closed before the request was written")
        waiter = self.waiter = self.pool.loop.create_future()
        self.state, self.rec = state, rec
        t = self.last_ns = self.sent_ns = self.now()
        if state is not None:
            sent_at(state, t)
        elif rec is not None:
            rec.dispatch_ns = t
        self.transport.write(data)
        idle = self.pool.idle_s
        if idle is not None:
            self.timer = self.pool.loop.call_later(idle, self._check_idle)
        return waiter

    def abort(self) -> None:
        """Drop the connection (a request given up mid-way cannot share it any more)."""
        self._stop_timer()
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.pool.live.add(self)

    def data_received(self, data: bytes) -> None:
        if self.draining:
            self._drain(data)
            return
        t = self.now()
        if self.waiter is None:  # bytes nobody asked for: the connection is unusable
            self.abort()
            return
        self.last_ns = t
        self.got = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # not an HttpParserError: it would escape
            self._fail(BackendError(UPGRADE_REFUSED))  # to the loop, a traceback per request
            return
        except httptools.HttpParserError as exc:
            if not self.complete:
                self._fail(self.refused or malformed(exc))
                return
            # bytes after the answer's end: the answer stands, the connection is not reused
            self.keep = False
        if not self.status and self._head_overdue(t, len(data)):
            return
        pieces = self.pieces
        if pieces:
            chunk = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            if self.inflate is not None:
                if not self._inflated(t, chunk):
                    return
            elif self.streaming:
                self.pool.parsing.add(self, t, chunk)
            else:
                self.body.append(chunk)
                self.body_size += len(chunk)
            if not self.streaming and self.body_size >= ERROR_BODY_MAX:
                self._finish(False)  # kept to its bound: the rest is not read (dropped)
                return
        if self.complete:
            if self.streaming:
                self.pool.parsing.add(self, 0, None)  # finish after this read's parse
            else:
                self._finish(self.keep)

    def _inflated(self, t: int, chunk: bytes) -> bool:
        """A compressed read, handled one inflated piece at a time; False when the request ended."""
        waiter = self.waiter
        try:
            for piece in self.inflate.pieces(chunk):  # type: ignore[union-attr]
                if self.streaming:
                    self.pool.parsing.add(self, t, piece)
                    self.pool.parsing.run()  # in order: earlier reads were queued first
                    if self.waiter is not waiter:
                        return False  # cut by the stream's bounds (or ended)
                else:
                    self.body.append(piece)
                    self.body_size += len(piece)
                    if self.body_size >= ERROR_BODY_MAX:
                        # kept up to its bound: no more inflating, nor reading (dropped)
                        self._finish(False)
                        return False
        except BackendError as exc:
            self._fail(exc)
            return False
        return True

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self.pool.live.discard(self)
        self.pool.parsing.run()  # what came before the close is parsed first
        if self.draining:
            self._end_drain(False)
            return
        if self.waiter is None or self.waiter.done():
            return
        if self.status and not self.delimited and not self.complete:
            self._finish(False)  # a body delimited by the close has ended
            return
        why = f": {exc}" if exc else ""
        if not self.got and self.served:
            self._fail(StaleConnectionError(f"a kept-alive connection was closed{why}"))
        elif not self.got:
            self._fail(DisconnectedError(f"connection closed before any response{why}"))
        else:
            self._fail(DisconnectedError(f"connection closed mid-response{why}"))

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer in the read: nobody asked for it
            raise BackendError("a response to no request")  # stops the parser here

    def on_status(self, status: bytes) -> None:
        self.head_bytes += len(status) + 16  # the status line

    def on_header(self, name: bytes, value: bytes) -> None:
        # the head's size as parsed, so a head that came whole in one read is bounded too
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > HEAD_MAX:
            self.refused = malformed(HEAD_TOO_LARGE)
            raise self.refused
        name = name.lower()
        if name == b"content-length" or name == b"transfer-encoding":
            self.delimited = True
        elif name == b"content-encoding":
            self.encoding = value
        elif name == b"content-type" and self.state is not None:
            self.state.json_body = value.split(b";", 1)[0].strip().lower() == JSON_TYPE
        elif self.state is not None and kept_header(text := name.decode("latin-1")):
            self.state.headers[text] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 ...)
            self.interim = True
            return
        self.status = status
        if self.rec is not None:
            self.rec.http_status = status
        state = self.state  # a JSON 200 is an error body, or a whole answer (stream.WholeBody)
        self.streaming = status == 200 and state is not None and (
            not state.json_body or state.takes_json)
        if self.encoding:
            try:
                self.inflate = inflater_for(self.encoding.decode("latin-1"))
            except BackendError as exc:
                self.refused = exc
                raise

    def on_message_complete(self) -> None:
        if self.interim:  # the real answer follows on the same connection
            self.interim = False
            self.delimited = False
            self.encoding = b""
            return
        self.complete = True
        self.keep = self.parser.should_keep_alive()  # (only valid inside the callback)

    def _finish(self, keep: bool) -> None:
        waiter = self.waiter
        status = self.status
        body = b"".join(self.body) if self.body else b""
        if self.streaming and self.state is not None:
            self.state.close(self.last_ns)  # no-op after [DONE]
        self._settle(keep)
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))

    def _settle(self, keep: bool) -> None:
        """A response read to its end: back to the pool (``keep``, still open) or dropped."""
        self._stop_timer()
        self._clear()
        self.served += 1
        if keep and not self.closed:
            self.idle_since = self.pool.loop.time()
            self.pool.idle.append(self)
        elif not self.closed:
            self.abort()

    def _release(self) -> None:
        """The stream ended at [DONE] but its body did not: the request ends now (its record,
        its timing, the session's next round); the connection reads on for the body's end,
        busy meanwhile, back to the pool once whole, dropped past ``AFTER_DONE_MAX_BYTES``,
        the drain bound or when a request needs it (docs/wire-protocols.md, "HTTP framing")."""
        pool = self.pool
        probe = pool.judgement.holds  # the server was taken to hold its streams open after [DONE]
        if probe and pool.probe is not None:  # one reads on as evidence: the rest, no drain
            pool.after_done.dropped_at_done += 1
            self._finish(False)
            return
        waiter = self.waiter
        self._stop_timer()
        self.draining, self.drained, self.drain_ns = True, 0, self.now()
        self.pieces.clear()
        if probe:  # nobody waits for it; past HELD_AFTER_DONE_S it is dropped
            pool.probe = self
            bound = HELD_AFTER_DONE_S
        else:
            pool.draining.append(self)
            bound = pool.idle_s or DRAIN_S
        self.timer = pool.loop.call_later(bound, self.abort)
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, b""))

    def _drain(self, data: bytes) -> None:
        """A read after the request ended at [DONE]: parsed only for the body's end."""
        self.drained += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.abort()
            return
        self.pieces.clear()
        if self.complete:
            self._end_drain(self.keep, whole=True)
        elif self.drained > AFTER_DONE_MAX_BYTES:
            self.abort()

    def _end_drain(self, keep: bool, *, whole: bool = False) -> None:
        """The drain is over (``whole``: the body ended): back to the pool (``keep``) or
        dropped; its slot is free."""
        self.draining = False
        self._settle(keep)
        self.pool.drain_ended(self, whole)

    def _fail(self, exc: BaseException) -> None:
        self.pool.parsing.run()  # reads that came before the failure count
        waiter = self.waiter
        if waiter is None or waiter.done():
            self.abort()
            return
        # a failure after [DONE]: what was measured stands
        measured = self.streaming and self.state is not None and self.state.done
        self._clear()
        self.abort()
        if measured:
            waiter.set_result((200, b""))
        else:
            waiter.set_exception(exc)

    def _head_overdue(self, t: int, n: int) -> bool:
        """Fail a head still not whole past ``HEAD_MAX`` bytes or the idle timeout since sent."""
        self.head_read += n
        if self.head_read > HEAD_MAX:
            self._fail(malformed(f"{HEAD_TOO_LARGE} without ending"))
            return True
        idle = self.pool.idle_s
        if idle is not None and t - self.sent_ns > idle * 1e9:
            self._fail(IdleTimeoutError(f"no whole response head within {idle}s"))
            return True
        return False

    def _check_idle(self) -> None:
        self.timer = None
        self.pool.parsing.run()
        if self.waiter is None or self.waiter.done():
            return
        idle = self.pool.idle_s
        assert idle is not None
        quiet = (self.now() - self.last_ns) / 1e9
        if quiet >= idle:
            self._fail(IdleTimeoutError(f"no data for {idle}s"))
        else:
            self.timer = self.pool.loop.call_later(idle - quiet, self._check_idle)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _header_line(name: str, value: str) -> bytes:
    """One ``Name: value`` request header line; CR/LF in either would split the request."""
    line = f"{name}: {value}"
    if "\r" in line or "\n" in line or ":" in name:
        raise BackendError(f"request header {name!r} cannot carry CR, LF or ':' in its name")
    try:
        return line.encode("latin-1") + b"\r\n"
    except UnicodeEncodeError:
        raise BackendError(f"request header {name!r}: not latin-1 text") from None


JSON_TYPE = b"application/json"


class _ParseQueue:
    """Reads stamped in ``data_received``, parsed in order by one ``call_soon`` per poll
    (docs/design-notes.md); reads of a request given up meanwhile are dropped."""

    __slots__ = ("armed", "items", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: list[tuple[_Connection, asyncio.Future[Any], int, bytes | None]] = []
        self.armed = False

    def add(self, conn: _Connection, t: int, chunk: bytes | None) -> None:
        self.items.append((conn, conn.waiter, t, chunk))  # type: ignore[arg-type]
        if not self.armed:
            self.armed = True
            self.loop.call_soon(self.run)

    def run(self) -> None:
        self.armed = False
        items = self.items
        if not items:
            return
        self.items = []
        for conn, waiter, t, chunk in items:
            if conn.waiter is not waiter or waiter.done():
                continue  # given up (timeout, cancel, failure) since the read
            if chunk is not None:
                state = conn.state
                try:
                    state.feed(t, chunk)  # type: ignore[union-attr]
                except Exception as exc:  # never out of this callback: the request hung
                    conn._fail(exc)
                    continue
                if state.cut:  # type: ignore[union-attr]
                    # overrun (error set), or bytes on and on after [DONE] (no error)
                    conn._fail(state.error or DisconnectedError("cut after [DONE]"))  # type: ignore[union-attr]
                elif state.done and not conn.delimited:  # type: ignore[union-attr]
                    # a body delimited by the close is whole at [DONE]
                    conn._finish(False)
                elif state.done and not conn.complete:  # type: ignore[union-attr]
                    # [DONE] before the body's end: the request ends here all the same
                    conn._release()
            else:
                conn.pool.judgement.ended_promptly()  # the body ended with the stream's end
                conn._finish(conn.keep)


class _Slots:
    """``max_connections``: an exchange holds a slot, and a drain after it keeps that slot
    to its end; a freed slot goes to the longest waiter with when the drain that kept it
    began (``None``: a request's), so a wait is the server's only from then
    (docs/metrics.md, "Client")."""

    __slots__ = ("free", "loop", "waiters")

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop) -> None:
        self.free, self.loop = n, loop
        self.waiters: deque[asyncio.Future[int | None]] = deque()

    def take(self) -> bool:
        """A slot now, if one is free and nobody waits before."""
        if self.free > 0 and not self.waiters:
            self.free -= 1
            return True
        return False

    def claim(self) -> asyncio.Future[int | None]:
        """A place in line: done with a slot (when a drain kept it, when that drain began)."""
        fut = self.loop.create_future()
        if self.free > 0 and not self.waiters:
            self.free -= 1
            fut.set_result(None)
        else:
            self.waiters.append(fut)
        return fut

    def give_up(self, fut: asyncio.Future[int | None]) -> None:
        """A claim whose wait was given up (cancelled): its slot, if it came, passes on."""
        if fut.done() and not fut.cancelled():
            self.release(fut.result())
        elif fut in self.waiters:
            self.waiters.remove(fut)

    def release(self, since: int | None = None) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(since)
                return
        self.free += 1


class _Pool:
    """Kept-alive connections to one host (scheme, host, port)."""

    def __init__(
        self,
        ep: Endpoint,
        loop: asyncio.AbstractEventLoop,
        now: Callable[[], int],
        idle_s: float | None,
        ssl_context: ssl.SSLContext | None,
        parsing: _ParseQueue,
        after_done: AfterDone,
        connection_idle_s: float | None,
    ) -> None:
        self.ep, self.loop, self.now, self.idle_s = ep, loop, now, idle_s
        #: a connection idle longer is closed, not reused (docs/wire-protocols.md, "Idle
        #: connections"): the server may be closing it as the request goes out
        self.connection_idle_s = connection_idle_s
        self.after_done = after_done
        self.parsing = parsing
        self.ssl = (ssl_context or ssl.create_default_context()) if ep.ssl else None
        #: connections back from their answers, the longest idle first
        self.idle: list[_Connection] = []
        self.live: set[_Connection] = set()
        #: connections whose request ended at [DONE], reading on for the body's end
        self.draining: list[_Connection] = []
        self.waiting = 0  # requests waiting for a draining connection
        self.drain_news: asyncio.Future[None] | None = None  # set when a drain ends
        #: whether the server is taken to hold its streams open after [DONE]
        self.judgement = HeldJudgement(after_done)
        #: while it is: the one connection reading on after [DONE] as evidence (bounded
        #: by ``HELD_AFTER_DONE_S``; no request waits for it)
        self.probe: _Connection | None = None

    async def connection(
        self, rec: RequestRecord | None = None, fresh: bool = False
    ) -> _Connection:
        """An idle connection, else a new one once none draining can come back; a wait for
        a draining one goes into ``rec`` (``note_held_wait``: the server's, not the client's).
        ``fresh``: a new connection, whatever is idle (a request sent once more)."""
        if fresh:
            return await self._connect(rec)
        idle = self.idle
        while True:
            self._close_overdue()
            while idle:
                conn = idle.pop()
                if (not conn.closed and conn.transport is not None
                        and not conn.transport.is_closing()):  # fmt: skip
                    return conn
            if len(self.draining) <= self.waiting:
                return await self._connect(rec)
            # a connection still reading its body's end after [DONE]: it comes back (a
            # moment after, as a server's last chunk does) or it is held and dropped, so
            # the connections open never outnumber the requests that need them
            news = self.drain_news
            if news is None:
                news = self.drain_news = self.loop.create_future()
            self.waiting += 1
            t0 = self.now()
            try:
                done, _ = await asyncio.wait((news,), timeout=HELD_AFTER_DONE_S)
            finally:
                self.waiting -= 1
                note_held_wait(rec, self.now() - t0)
            if not done:
                self.drop_held()

    def _close_overdue(self) -> None:
        """Close the idle connections idle longer than ``connection_idle_s`` (the oldest
        are first in ``idle``)."""
        bound = self.connection_idle_s
        idle = self.idle
        if bound is None or not idle or self.loop.time() - idle[0].idle_since <= bound:
            return
        since = self.loop.time() - bound
        n = next((i for i, c in enumerate(idle) if c.idle_since >= since), len(idle))
        for conn in idle[:n]:
            conn.abort()
        del idle[:n]

    def drain_ended(self, conn: _Connection, whole: bool) -> None:
        """``conn`` stopped draining (back in ``idle``, or dropped; ``whole``: its body
        ended): wake who waits for it."""
        if conn is self.probe:
            self.probe = None
            if whole:  # the body ended within HELD_AFTER_DONE_S: the server ends them again
                self.judgement.ended_promptly()
        elif conn in self.draining:
            self.draining.remove(conn)
        if conn.slot is not None:
            conn.slot.release(conn.drain_ns)
            conn.slot = None
        news, self.drain_news = self.drain_news, None
        if news is not None and not news.done():
            news.set_result(None)

    def drop_held(self, began_by: int | None = None) -> None:
        """A drain outlived ``HELD_AFTER_DONE_S``: the server holds its streams open after
        [DONE]; drop the draining connections (those that began by ``began_by``, if
        given), and drain no more but one (``probe``)."""
        held = [c for c in self.draining if began_by is None or c.drain_ns <= began_by]
        if held:
            self.judgement.held()
        for conn in held:
            conn.abort()
            conn._end_drain(False)

    def drop_probe(self) -> None:
        """A request needs the probe's ``max_connections`` slot: the evidence gives way."""
        conn = self.probe
        if conn is not None:
            conn.abort()
            conn._end_drain(False)

    async def _connect(self, rec: RequestRecord | None = None) -> _Connection:
        """A new connection; the time it took (TCP, TLS, name lookup) until the server's
        last packet of it goes into ``rec`` (``note_connect_wait``: the server's or the
        network's, not the client's)."""
        ep = self.ep
        began = connect_began(rec, self.now(), tcp=True)
        try:
            async with asyncio.timeout(self.idle_s):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self), ep.host, ep.port,
                    ssl=self.ssl, server_hostname=ep.host if self.ssl else None,
                )  # fmt: skip
        except TimeoutError:
            raise ConnectTimeoutError(f"no connection within {self.idle_s}s") from None
        except OSError as exc:  # refused, unreachable, unresolvable, ssl.SSLError
            raise ConnectError(str(exc) or type(exc).__name__) from None
        if rec is not None and conn.transport is not None:
            note_connect_wait(rec, began, self.now(), conn.transport.get_extra_info("socket"))
        return conn

    def close(self) -> None:
        for conn in list(self.live):
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()


class HttpToolsClient(ClientSettings):
    """The pooled client ``Transport`` uses by default (``executor.http: httptools``)."""

    def __post_init__(self) -> None:
        self._extra = b"".join(_header_line(k, v) for k, v in self.headers.items())
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._heads: dict[str, tuple[_Pool, bytes]] = {}
        self._limit: _Slots | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.after_done = AfterDone()

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._parsing = _ParseQueue(self._loop)
        if self.max_connections > 0:
            self._limit = _Slots(self.max_connections, self._loop)

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self._heads.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost

    def _pool(self, url: str, method: bytes, content_type: bool) -> tuple[_Pool, bytes]:
        """The host's pool and the fixed part of this URL's request head, built once."""
        key = f"{method.decode()} {url}"
        hit = self._heads.get(key)
        if hit is not None:
            return hit
        if self._loop is None:
            raise RuntimeError("the HTTP client is not open")
        ep = Endpoint(url)
        pool = self._pools.get(ep.key)
        if pool is None:
            pool = self._pools[ep.key] = _Pool(ep, self._loop, self.now, self.idle_s,
                                               self.ssl_context, self._parsing,
                                               self.after_done,
                                               self.connection_idle_s)  # fmt: skip
        head = b"%b %b HTTP/1.1\r\nHost: %b\r\nUser-Agent: %b\r\nAccept: */*\r\n%b" % (
            method,
            ep.target,
            ep.host_header,
            USER_AGENT,
            self._extra,
        )
        if content_type:
            head += b"Content-Type: application/json\r\n"
        hit = self._heads[key] = (pool, head)
        return hit

    async def post(
        self,
        url: str,
        payload: bytes,
        request_id: str,
        rec: RequestRecord,
        state: ResponseBody,
        headers: dict[str, str] | None = None,
        fresh: bool = False,
    ) -> tuple[int, bytes]:
        """POST ``payload``, the body streamed into ``state``; ``(status, non-200 body)``;
        ``fresh``: on a new connection (a request sent once more)."""
        pool, head = self._pool(url, b"POST", True)
        rid = request_id.encode()
        if b"\r" in rid or b"\n" in rid:
            raise BackendError(f"request id {request_id!r} cannot go into an HTTP header")
        if headers:
            head += b"".join(_header_line(k, v) for k, v in headers.items())
        data = b"%bx-request-id: %b\r\nContent-Length: %d\r\n\r\n%b" % (
            head,
            rid,
            len(payload),
            payload,
        )
        return await self._exchange(pool, data, state, rec, self.request_timeout_s, fresh)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """GET ``url`` (reachability, warming connections): ``(status, body)``."""
        pool, head = self._pool(url, b"GET", False)
        return await self._exchange(pool, head + b"\r\n", None, None, timeout_s)

    async def _exchange(
        self,
        pool: _Pool,
        data: bytes,
        state: ResponseBody | None,
        rec: RequestRecord | None,
        timeout_s: float | None,
        fresh: bool = False,
    ) -> tuple[int, bytes]:
        limit = self._limit
        if limit is not None:
            await self._slot(limit, rec)
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout_s):
                conn = await pool.connection(rec, fresh)
                return await conn.start(data, state, rec)
        except BaseException:
            if conn is not None and conn.waiter is not None and not conn.draining:
                conn.abort()  # given up mid-exchange (timeout, cancel): not reusable
            raise
        finally:
            if limit is not None:
                if conn is not None and conn.draining and conn.slot is None:
                    conn.slot = limit  # still busy: released at the drain's end
                else:
                    limit.release()

    async def _slot(self, limit: _Slots, rec: RequestRecord | None) -> None:
        """One of ``max_connections``, in the order asked. A slot a drain keeps comes back
        a moment after, or the drain is dropped once it has gone on ``HELD_AFTER_DONE_S``
        (as ``_Pool.connection`` does); the wait from that drain's start is the server's,
        noted in ``rec``; a wait for a slot a request held is the client's own limit
        (docs/metrics.md, "Client")."""
        if limit.take():
            return
        pools = self._pools.values()
        t0 = self.now()
        if limit.free == 0:
            for pool in pools:
                pool.drop_probe()  # evidence gives way to a request
        claim = limit.claim()
        held_ns = int(HELD_AFTER_DONE_S * 1e9)
        try:
            wait = HELD_AFTER_DONE_S
            while not claim.done():
                await asyncio.wait((claim,), timeout=wait)
                if claim.done():
                    break
                now = self.now()
                for pool in pools:  # drains gone on HELD_AFTER_DONE_S are held: their
                    pool.drop_held(now - held_ns)  # slots go to the first in line
                # the next look: when the oldest drain left reaches the bound (a drain that
                # began during the wait is seen at the next look: held 2 s at most)
                began = min((c.drain_ns for p in pools for c in p.draining), default=None)
                wait = HELD_AFTER_DONE_S if began is None else (began + held_ns - now) / 1e9
        except BaseException:
            limit.give_up(claim)
            raise
        since = claim.result()
        if since is not None:
            note_held_wait(rec, self.now() - max(t0, since))
