"""A minimal HTTP/1.1 streaming client for plain ``http://`` targets (``executor.http: raw``,
the default; ``aiohttp`` keeps aiohttp for everything).

Why: with aiohttp (3.14) a server that sends every SSE event as its own HTTP
chunk costs one ``resume_reading()`` → ``data_received(b"")`` per event when
the body is read, and the request body is written from a separate task one
loop iteration after the headers. Here a request is *one* ``write``
(headers + body), the response is de-chunked inside ``data_received`` and every
piece is **stamped there**, at the socket read, so a busy event loop no longer
delays the timestamps of token events.

Scope on purpose: POST with a JSON body, keep-alive connections pooled per
target, ``Content-Length``, chunked or close-delimited responses, no TLS, no
proxies, no redirects, no compression (the transport falls back to aiohttp for
anything but ``http://``). Errors are ``RawHTTPError`` subclasses that the
transport turns into the same messages as aiohttp's.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

__all__ = ["RawConnectError", "RawDisconnected", "RawHTTPError", "RawIdleTimeout", "RawPool"]


class RawHTTPError(Exception):
    """Base of the raw client's errors."""


class RawConnectError(RawHTTPError):
    """The TCP connection could not be opened."""


class RawDisconnected(RawHTTPError):
    """The server closed the connection before the response was complete."""


class RawIdleTimeout(RawHTTPError):
    """No byte arrived within the idle timeout."""


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one response at a time."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.head = b""
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0
        self.csize: int | None = None  # chunk bytes left; None: expecting a size line
        self.trailer = False
        self.cbuf = b""
        self.reads: deque[tuple[int, bytes]] = deque()
        self.complete = False
        self.exc: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.keep_alive = True

    # -- protocol callbacks ---------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            if self.mode == "close" and self.status is not None:
                self.complete = True
            else:
                self.exc = RawDisconnected(str(exc) if exc else "server closed the connection")
        self._wake()

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        if self.status is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            data = self.head[end + 4 :]
            self._parse_head(self.head[:end])
            self.head = b""
        if data and not self.complete:
            body = self._body(data)
            if body:
                self.reads.append((t, body))
        self._wake()

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        self.status = int(parts[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if self.headers.get("connection", "").lower() == "close":
            self.keep_alive = False
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.mode = "chunked"
        elif "content-length" in self.headers:
            self.mode, self.remaining = "length", int(self.headers["content-length"])
            self.complete = self.remaining == 0
        else:
            self.mode, self.keep_alive = "close", False

    def _body(self, data: bytes) -> bytes:
        if self.mode == "length":
            piece = data[: self.remaining]
            self.remaining -= len(piece)
            self.complete = self.remaining == 0
            return piece
        if self.mode == "close":
            return data
        out: list[bytes] = []
        buf = self.cbuf + data if self.cbuf else data
        pos, n = 0, len(buf)
        while pos < n or self.csize == 0:
            if self.trailer:  # after the 0-size chunk: lines until an empty one
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                line, pos = buf[pos:eol], eol + 2
                if not line:
                    self.complete = True
                    break
            elif self.csize is None:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";", 1)[0].strip() or b"0", 16)
                pos = eol + 2
                if size == 0:
                    self.trailer = True
                else:
                    self.csize = size
            elif self.csize == 0:  # chunk data done: its CRLF
                if n - pos < 2:
                    break
                pos += 2
                self.csize = None
            else:
                take = min(self.csize, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.csize -= take
        self.cbuf = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- the caller's side ------------------------------------------------------------------
    async def _wait(self, idle_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        try:
            if idle_s is None:
                await self.waiter
            else:
                try:
                    await asyncio.wait_for(self.waiter, idle_s)
                except TimeoutError:
                    raise RawIdleTimeout(f"no data for {idle_s}s") from None
        finally:
            self.waiter = None

    async def response_head(self, idle_s: float | None) -> int:
        while self.status is None:
            if self.exc is not None:
                raise self.exc
            await self._wait(idle_s)
        return self.status

    async def next_reads(self, idle_s: float | None) -> list[tuple[int, bytes]] | None:
        """Every stamped body piece that arrived; None once the body is complete."""
        while not self.reads:
            if self.exc is not None:
                raise self.exc
            if self.complete:
                return None
            await self._wait(idle_s)
        out = list(self.reads)
        self.reads.clear()
        return out

    async def read_all(self, idle_s: float | None) -> bytes:
        parts: list[bytes] = []
        while (reads := await self.next_reads(idle_s)) is not None:
            parts.extend(b for _, b in reads)
        return b"".join(parts)


class RawPool:
    """Keep-alive connections to one ``http://host:port`` root."""

    def __init__(self, root: str, extra_headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(root)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the raw HTTP client only speaks plain http://, not {root!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base_path = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        host_hdr = f"{host}:{self.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in (extra_headers or {}).items())
        self._fixed = f"Host: {host_hdr}\r\nContent-Type: application/json\r\n{extra}"
        self._idle: list[_Conn] = []

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Conn, self.host, self.port)
        except OSError as exc:
            raise RawConnectError(f"{type(exc).__name__}: {exc}") from None
        return conn

    async def acquire(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                conn._reset()
                return conn
        return await self._open()

    def release(self, conn: _Conn) -> None:
        if conn.complete and conn.keep_alive and not conn.closed and not conn.reads:
            self._idle.append(conn)
        else:
            self.discard(conn)

    def discard(self, conn: _Conn) -> None:
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.close()

    async def warm(self, n: int) -> int:
        """Open up to ``n`` connections into the pool now."""
        conns = await asyncio.gather(*(self._open() for _ in range(n)), return_exceptions=True)
        ok = [c for c in conns if isinstance(c, _Conn)]
        for c in ok:
            c.complete = True
        self._idle.extend(ok)
        return len(ok)

    def request_bytes(self, path: str, request_id: str, body: bytes) -> bytes:
        head = (f"POST {self.base_path}{path} HTTP/1.1\r\n{self._fixed}"
                f"x-request-id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
        return head.encode("latin-1") + body

    def close(self) -> None:
        for conn in self._idle:
            self.discard(conn)
        self._idle.clear()
