"""A request's waits that were the server's or the network's, not the client's: each HTTP
client notes them in the record (``rec.extra``), and the runner takes them out of the
request's release lag and counts them apart (docs/metrics.md, "Client").

- ``held_connection_wait_ms``: waited for a connection whose stream had ended at [DONE]
  but whose body the server had not ended (held open, or ending a moment later);
- ``connect_wait_ms``: a new connection being made (TCP, a TLS handshake, name lookup):
  a server whose accept backlog is full drops the SYN, and the kernel sends it again 1 s
  later; a proxy slow to accept; a slow handshake. Only the time until the server's last
  packet of it came is the server's: a busy loop notices a made connection late, and that
  is the client's lateness. On a TCP socket under Linux the kernel says when that packet
  came (``TCP_INFO``: ms since the last data, and the last ACK, from the peer); elsewhere
  (aiohttp, whose public API gives no socket at that point; other systems) the wait is
  taken as the time the client's event loop sat idle while the connection was made: its
  thread's time on a CPU or waiting for one meanwhile (``busy_ns``) stays the client's, a
  lower bound of the server's part;
- ``stale_attempt_ms``: the first attempt of a request sent once more after a reused
  connection died before any byte of its answer (docs/wire-protocols.md, "Idle
  connections"), from its dispatch to the resend.

Virtual runs have no connection, so no record of theirs carries one of these keys (and
the canonical digests are unchanged by them)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from workbench.records import RequestRecord

#: the calling thread's time on a CPU and waiting in the run queue (Linux schedstat, ns)
SCHEDSTAT = "/proc/thread-self/schedstat"
#: Linux's ``struct tcp_info`` (linux/tcp.h, stable since 2.6): ``tcpi_last_data_recv`` and
#: ``tcpi_last_ack_recv``, u32 ms since the peer's last data and last ACK, at this offset
TCP_SINCE = struct.Struct("=II")
TCP_SINCE_AT = 52
TCP_INFO_LEN = 104

#: ``rec.extra`` key: ms waited for a connection the server held open after [DONE]
HELD_WAIT_MS = "held_connection_wait_ms"
#: ``rec.extra`` key: ms the request's new connection took to be made
CONNECT_WAIT_MS = "connect_wait_ms"
#: ``rec.extra`` key: ms from a resent request's first dispatch to its resend
STALE_ATTEMPT_MS = "stale_attempt_ms"


def _add(rec: RequestRecord | None, key: str, waited_ns: int, zero: bool = False) -> None:
    if rec is not None and (waited_ns > 0 or zero):
        rec.extra[key] = rec.extra.get(key, 0.0) + max(0, waited_ns) / 1e6


def note_held_wait(rec: RequestRecord | None, waited_ns: int) -> None:
    """Add ``waited_ns`` to ``rec``'s wait for a connection the server held (``HELD_WAIT_MS``)."""
    _add(rec, HELD_WAIT_MS, waited_ns)


def busy_ns() -> int:
    """ns the calling thread (the event loop's) has run on a CPU or waited for one: Linux's
    per-thread schedstat; elsewhere its CPU time alone."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            run, wait, _ = f.read().split()
        return int(run) + int(wait)
    except (OSError, ValueError):
        return time.thread_time_ns()


#: whether this system's kernel can say when a TCP peer's last packet came (``TCP_INFO``)
KERNEL_KNOWS = hasattr(socket, "TCP_INFO")


def connect_began(rec: RequestRecord | None, now_ns: int,
                  tcp: bool = False) -> tuple[int, int] | None:
    """A new connection for ``rec`` begins at ``now_ns``: what ``note_connect_wait`` takes
    (None without a record: nothing to note). ``tcp``: the caller will hand over the TCP
    socket, so where the kernel can say when the server answered the loop's time is not
    read (a ``busy_ns`` read costs 30-90 µs on a loaded host)."""
    if rec is None:
        return None
    return (now_ns, -1 if tcp and KERNEL_KNOWS else busy_ns())


def since_peer_ns(sock: Any) -> int | None:
    """ns since the peer's last packet came on TCP socket ``sock`` (Linux ``TCP_INFO``, to
    the kernel's tick); None where the kernel cannot say (not TCP, not Linux)."""
    opt = getattr(socket, "TCP_INFO", None)
    if opt is None or sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, opt, TCP_INFO_LEN)
    except (OSError, AttributeError, TypeError):
        return None
    if len(raw) < TCP_SINCE_AT + TCP_SINCE.size:
        return None
    data, ack = TCP_SINCE.unpack_from(raw, TCP_SINCE_AT)
    return min(data, ack) * 1_000_000


def note_connect_wait(rec: RequestRecord | None, began: tuple[int, int] | None,
                      now_ns: int, sock: Any = None) -> None:
    """``rec``'s new connection, begun at ``began`` (``connect_began``), is made, as the
    client sees it, at ``now_ns`` on ``sock`` (None: not known): the server's part goes
    into ``CONNECT_WAIT_MS``, noted even when 0 so that every connect a run made is
    counted. The server's part ends when its last packet came (``since_peer_ns``), else it
    is the time the loop sat idle."""
    if rec is None or began is None:
        return
    wall = now_ns - began[0]
    since = since_peer_ns(sock)
    if since is not None:
        waited = wall - since
    else:  # the loop's idle time (unknown when it was not read: the whole wait)
        waited = wall if began[1] < 0 else wall - (busy_ns() - began[1])
    _add(rec, CONNECT_WAIT_MS, min(wall, waited), zero=True)


def note_stale_attempt(rec: RequestRecord | None, waited_ns: int) -> None:
    """``rec`` is sent once more, ``waited_ns`` after its first dispatch (``STALE_ATTEMPT_MS``)."""
    _add(rec, STALE_ATTEMPT_MS, waited_ns, zero=True)


def server_waits_ns(rec: RequestRecord) -> tuple[int, int | None, int | None]:
    """``rec``'s waits in ns: held (0 if none), connect and stale attempt (None: it made
    no new connection, was not resent)."""
    extra = rec.extra
    connect, stale = extra.get(CONNECT_WAIT_MS), extra.get(STALE_ATTEMPT_MS)
    return (round(extra.get(HELD_WAIT_MS, 0.0) * 1e6),
            None if connect is None else round(connect * 1e6),
            None if stale is None else round(stale * 1e6))  # fmt: skip
