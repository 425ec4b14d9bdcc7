"""Reads are stamped where aiohttp's protocol receives them, not when the stream's task wakes.

``stamped_reads`` maps the bytes a stream consumes back to the protocol's read
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
from test_transport import GOOD, LIMIT, REQ, Script, record, serve, sse, tok, usage

from workbench.backends import BACKENDS
from workbench.backends.stamps import RxStampedHandler, stamped_reads
from workbench.backends.transport import Transport, TransportOptions
from workbench.clock import WallClock


def test_one_read_one_piece_with_its_stamp():
    rx = deque([(10, 111)])
    assert stamped_reads(rx, 0, b"0123456789", now=999) == [(111, b"0123456789")]
    assert not rx


def test_a_lagging_reader_gets_each_read_back_with_its_own_stamp():
    rx = deque([(3, 1), (7, 2), (10, 3)])
    out = stamped_reads(rx, 0, b"abcdefghij", now=999)
    assert out == [(1, b"abc"), (2, b"defg"), (3, b"hij")]
    assert not rx


def test_a_read_split_across_two_consumes_keeps_its_stamp():
    rx = deque([(6, 1)])
    assert stamped_reads(rx, 0, b"abcd", now=999) == [(1, b"abcd")]
    assert rx == deque([(6, 1)])  # the rest of that read is still to come
    assert stamped_reads(rx, 4, b"ef", now=999) == [(1, b"ef")]
    assert not rx


def test_bytes_no_read_logged_take_now():
    rx: deque[tuple[int, int]] = deque([(2, 1)])
    assert stamped_reads(rx, 0, b"abcd", now=999) == [(1, b"ab"), (999, b"cd")]
    assert stamped_reads(deque(), 4, b"ef", now=5) == [(5, b"ef")]


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
        pieces = stamped_reads(rx, pos, body[pos : pos + n], now=-1)
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
    assert all(isinstance(p, RxStampedHandler) for p in protocols) and protocols
    assert {clock.readers[t] for t in rec.token_times_ns} == {"data_received"}
    assert clock.readers[rec.end_ns] == "data_received"  # [DONE]'s read
    assert clock.readers[rec.dispatch_ns] == "write_bytes"


async def test_a_body_past_aiohttps_buffer_limit_pauses_resumes_and_arrives_whole(monkeypatch):
    """4,000 token events written at once (~350 KB) into a reader whose buffer holds
    2 KiB (``read_bufsize`` 1 KiB): aiohttp pauses the protocol and its parser on
    every read and resumes them as the stream drains. The protocol's
    ``resume_reading`` shortcut (nothing paused: nothing to do) must not lose that
    path: every token arrives, in order, each with a stamp."""
    import functools

    import aiohttp

    small = functools.partial(aiohttp.ClientSession, read_bufsize=1024)
    monkeypatch.setattr(aiohttp, "ClientSession", small)

    n = 4000
    steps: list = [tok([10_000 + i], "length" if i == n - 1 else None) for i in range(n)]
    steps = [b"".join(steps), usage(n), b"data: [DONE]\n\n"]
    pauses = []
    real_pause = RxStampedHandler.pause_reading

    def counting_pause(self):
        pauses.append(1)
        return real_pause(self)

    monkeypatch.setattr(RxStampedHandler, "pause_reading", counting_pause)
    req = REQ.__class__(request_id="big", prompt_ids=[1, 2, 3, 4], max_tokens=n)
    async with (
        asyncio.timeout(LIMIT),
        serve(Script(steps), "/v1/completions") as url,
        Transport(TransportOptions(base_url=url)) as transport,
    ):
        rec = record("big")
        ids = await transport.send(BACKENDS.get("openai"), req, rec)
    assert rec.status == "ok", rec.error
    assert pauses, "the body never filled aiohttp's buffer: the test lost its point"
    assert ids == [10_000 + i for i in range(n)]
    assert sum(rec.token_counts) == n and len(rec.token_times_ns) == len(rec.token_counts)
    assert rec.token_times_ns == sorted(rec.token_times_ns)
    assert rec.dispatch_ns < rec.token_times_ns[0]


async def test_draining_a_stream_does_not_rerun_the_parser_on_nothing(monkeypatch):
    """With nothing paused, consuming a piece must not call ``data_received(b"")``
    (aiohttp's resume-the-parser call, once per consumed piece: a fifth of the
    client's CPU per request against a fast server before the shortcut)."""
    calls: list[int] = []
    real = RxStampedHandler.data_received

    def counting(self, data):
        calls.append(len(data))
        return real(self, data)

    monkeypatch.setattr(RxStampedHandler, "data_received", counting)
    many = [tok([100 + i]) for i in range(64)] + [usage(64), sse(b"[DONE]")]
    req = REQ.__class__(request_id="r-64", prompt_ids=[1, 2, 3, 4], max_tokens=64)
    async with (
        asyncio.timeout(LIMIT),
        serve(Script([b"".join(many)]), "/v1/completions") as url,
        Transport(TransportOptions(base_url=url)) as transport,
    ):
        rec = record("r-64")
        await transport.send(BACKENDS.get("openai"), req, rec)
    assert rec.status == "ok" and sum(rec.token_counts) == 64, rec.error
    assert calls and 0 not in calls
