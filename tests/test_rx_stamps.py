"""Reads are stamped where aiohttp's protocol receives them, not when the stream's task wakes.

``_stamped_reads`` maps the bytes a stream consumes back to the protocol's read
log; it is exact arithmetic, so it is checked against a brute-force model over
random splits. The loopback test checks that, end to end, every token event's
stamp is one the protocol took in ``data_received``.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st
from test_transport import GOOD, LIMIT, REQ, Script, record, serve

from workbench.backends import BACKENDS
from workbench.backends.transport import (
    Transport,
    TransportOptions,
    _RxStampedHandler,
    _stamped_reads,
)
from workbench.clock import WallClock


def test_one_read_one_piece_with_its_stamp():
    rx = deque([(10, 111)])
    assert _stamped_reads(rx, 0, b"0123456789", now=999) == [(111, b"0123456789")]
    assert not rx


def test_a_lagging_reader_gets_each_read_back_with_its_own_stamp():
    rx = deque([(3, 1), (7, 2), (10, 3)])
    out = _stamped_reads(rx, 0, b"abcdefghij", now=999)
    assert out == [(1, b"abc"), (2, b"defg"), (3, b"hij")]
    assert not rx


def test_a_read_split_across_two_consumes_keeps_its_stamp():
    rx = deque([(6, 1)])
    assert _stamped_reads(rx, 0, b"abcd", now=999) == [(1, b"abcd")]
    assert rx == deque([(6, 1)])  # the rest of that read is still to come
    assert _stamped_reads(rx, 4, b"ef", now=999) == [(1, b"ef")]
    assert not rx


def test_bytes_no_read_logged_take_now():
    rx: deque[tuple[int, int]] = deque([(2, 1)])
    assert _stamped_reads(rx, 0, b"abcd", now=999) == [(1, b"ab"), (999, b"cd")]
    assert _stamped_reads(deque(), 4, b"ef", now=5) == [(5, b"ef")]


@settings(max_examples=300, deadline=None)
@given(
    reads=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 15), min_size=1, max_size=12),
)
def test_every_byte_gets_the_stamp_of_the_read_that_brought_it(reads, cuts):
    """Reads of random sizes arrive (stamp = their index); the stream consumes the
    body in random pieces. Each consumed byte must carry its own read's stamp."""
    body = bytes(range(sum(reads)))
    truth = [i for i, n in enumerate(reads) for _ in range(n)]  # byte -> read index
    rx: deque[tuple[int, int]] = deque()
    total = 0
    for i, n in enumerate(reads):
        total += n
        rx.append((total, i))
    got: list[int] = []
    out_bytes = b""
    pos = 0
    cut_iter = iter(cuts * (len(body) + 1))
    while pos < len(body):
        n = min(next(cut_iter), len(body) - pos)
        pieces = _stamped_reads(rx, pos, body[pos : pos + n], now=-1)
        for stamp, piece in pieces:
            got.extend([stamp] * len(piece))
            out_bytes += piece
        pos += n
    assert out_bytes == body
    assert got == truth
    assert not rx


class CallerClock(WallClock):
    """A wall clock that remembers which function read each stamp."""

    def __init__(self) -> None:
        self.readers: dict[int, str] = {}

    def now_ns(self) -> int:
        t = super().now_ns()
        self.readers[t] = sys._getframe(1).f_code.co_name
        return t


async def test_token_stamps_are_taken_by_the_protocol_on_receipt():
    clock = CallerClock()
    script = Script(GOOD)
    async with (
        asyncio.timeout(LIMIT),
        serve(script, "/v1/completions") as url,
        Transport(TransportOptions(base_url=url), clock=clock) as transport,
    ):
        rec = record()
        await transport.send(BACKENDS.get("openai"), REQ, rec)
        protocols = [
            conn for conns in transport.session.connector._conns.values() for conn, _ in conns
        ]
    assert rec.status == "ok", rec.error
    assert len(rec.token_times_ns) == 3
    assert all(isinstance(p, _RxStampedHandler) for p in protocols) and protocols
    assert {clock.readers[t] for t in rec.token_times_ns} == {"data_received"}
    assert clock.readers[rec.end_ns] == "data_received"  # [DONE]'s read
    assert clock.readers[rec.dispatch_ns] == "write_bytes"
