"""Where the clock is read on the wire: as a request's bytes go out, as a read comes in.

Two aiohttp subclasses, both given to aiohttp through hooks it keeps for them:

* ``StampedRequest`` (the session's ``request_class``) stamps ``dispatch_ns`` as
  the request's body goes to the socket, and sends it at once on Python 3.11.
* ``RxStampedHandler`` (the connector's protocol factory) stamps each socket
  read as the event loop delivers it, before any stream's task runs; a stream
  maps the body bytes it consumes back to those reads (``read_log``,
  ``stamped_reads``).

``transport.Transport`` makes one subclass of each per run (its clock, its
records) and uses them; nothing else here knows about requests or codecs.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

import aiohttp
from aiohttp.client_proto import ResponseHandler

from workbench.backends.eager import start_now
from workbench.clock import Clock, WallClock
from workbench.records import RequestRecord

__all__ = ["RxLog", "RxStampedHandler", "StampedRequest", "read_log", "stamped_reads"]

#: Python >= 3.12: aiohttp already starts its body writer eagerly
_AIOHTTP_EAGER = sys.version_info >= (3, 12)


class StampedRequest(aiohttp.ClientRequest):
    """aiohttp's request, stamping ``dispatch_ns`` as its body goes to the socket,
    and sending it at once.

    aiohttp writes the (buffered) headers and the body from a task; on Python
    3.11 that task first runs one loop iteration after ``session.post`` — when a
    wave of streams ends together, behind every other stream's next request. Its
    coroutine is started here instead (``eager.start_now``, what aiohttp asks of
    3.12+), so the bytes leave inside ``session.post``, and the stamp is taken
    as they do. ``stamps`` maps ``x-request-id`` to the record being sent (set
    by ``Transport._exchange``).
    """

    stamps: ClassVar[dict[str, RequestRecord]] = {}
    clock: ClassVar[Clock] = WallClock()
    _body_out = False

    def write_bytes(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
        rec = self.stamps.get(self.headers.get("x-request-id", ""))
        if rec is not None:
            rec.dispatch_ns = self.clock.now_ns()
        coro = super().write_bytes(*args, **kwargs)
        if _AIOHTTP_EAGER:
            return coro
        coro, self._body_out = start_now(coro)
        return coro

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        resp = await super().send(conn)
        if self._body_out:
            # The body is out already; aiohttp still holds the connection until the
            # (trivial) writer task has run, one loop iteration on. Against a fast
            # server the response can end first, and the next request on this slot
            # then opened a new connection (2x max_concurrency of them). The
            # response's ``_writer`` is the hook aiohttp keeps for subclasses.
            resp._writer = None
        return resp


#: one stamp per read the protocol received: (the body's byte count after it, ns)
RxLog = deque[tuple[int, int]]


class RxStampedHandler(ResponseHandler):
    """aiohttp's connection protocol, stamping each read as the event loop delivers it.

    When hundreds of streams get a token in the same loop iteration, every
    ``data_received`` runs before any stream's task wakes; a stamp taken in the
    task is late by the work of every task ahead of it (~0.15 ms each), a stamp
    taken here only by the (C-parsed) reads ahead of it. ``rx`` logs, for the
    current response body, the body's size after each read with that read's
    time; ``_stream`` maps the bytes it consumes back to these stamps
    (``stamped_reads``). The connector builds its protocols through its
    ``_factory``, which ``Transport`` points at this class.
    """

    now: ClassVar[Callable[[], int]] = time.perf_counter_ns  # the transport's clock
    rx: RxLog | None = None
    rx_body: Any = None
    rx_t = 0  # when the last socket read came

    def data_received(self, data: bytes, _received: Any = ResponseHandler.data_received) -> None:
        if data:
            t = self.rx_t = self.now()  # type: ignore[misc]  # a plain callable, not a method
        else:  # aiohttp resuming its parser: what it feeds now came with the last read
            t = self.rx_t
        _received(self, data)
        body = self._payload
        if body is None:
            return
        rx = self.rx
        if body is not self.rx_body or rx is None:
            self.rx_body = body
            rx = self.rx = deque()
        size = body.total_bytes
        if size and (not rx or rx[-1][0] != size):
            rx.append((size, t))

    def resume_reading(self, resume_parser: bool = True) -> None:
        """aiohttp calls this after every piece a stream consumes (64 times for a
        64-token response); with nothing paused, it only re-ran the parser on no
        data (``data_received(b"")``), ~a fifth of the client's CPU per request
        against a fast server. Only a paused protocol (flow control, or a tail held
        for a full buffer) has anything to resume."""
        # (read by getattr: should aiohttp rename its flags, resume as it would)
        if getattr(self, "_reading_paused", True) or getattr(self, "_buffer_paused", False):
            super().resume_reading(resume_parser)


def read_log(resp: aiohttp.ClientResponse) -> RxLog | None:
    """The protocol's read log for ``resp``'s body (None: not our protocol, stamp on read)."""
    conn = resp.connection
    proto = conn.protocol if conn is not None else None
    if isinstance(proto, RxStampedHandler) and proto.rx_body is resp.content:
        return proto.rx
    return None


def stamped_reads(rx: RxLog, pos: int, chunk: bytes, now: int) -> list[tuple[int, bytes]]:
    """``chunk`` (body bytes ``pos`` onwards) cut where the protocol's reads ended,
    each piece with its read's stamp. Usually one read made the whole chunk; a
    stream whose task fell behind gets several. Bytes no read logged (none should
    be) take ``now``."""
    end = pos + len(chunk)
    while rx and rx[0][0] <= pos:  # consumed already
        rx.popleft()
    if rx and rx[0][0] >= end:
        size, t = rx[0]
        if size == end:
            rx.popleft()
        return [(t, chunk)]
    out: list[tuple[int, bytes]] = []
    start = pos
    while rx and start < end:
        size, t = rx[0]
        stop = min(size, end)
        out.append((t, chunk[start - pos : stop - pos]))
        start = stop
        if size <= end:
            rx.popleft()
    if start < end:
        out.append((now, chunk[start - pos :]))
    return out
