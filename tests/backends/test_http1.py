"""The httptools client (``backends/http1.py``): where it stamps, how often it wakes the
sender, the body framings, TLS, the pool; and that ``workbench/`` uses no private
aiohttp/asyncio name.

Servers are real (aiohttp's on 127.0.0.1, or a raw ``asyncio`` server for exact
framings); every await is bounded by ``asyncio.timeout``; nothing sleeps to wait.
"""

from __future__ import annotations

import asyncio
import collections.abc
import re
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from loopback import RawHandler, read_request, self_signed, serve_raw
from public_data import REPO
from test_transport import GOOD, LIMIT, REQ, Script, record, serve, sse, tok, usage

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.clock import WallClock

ROOT = REPO
BODY = b"".join(s for s in GOOD if isinstance(s, bytes))


class CallerClock(WallClock):
    """A wall clock that remembers which function read each stamp."""

    def __init__(self) -> None:
        self.readers: dict[int, str] = {}

    def now_ns(self) -> int:
        t = super().now_ns()
        self.readers[t] = sys._getframe(1).f_code.co_name
        return t


async def test_reads_are_stamped_in_data_received_and_dispatch_where_bytes_are_written():
    clock = CallerClock()
    async with (
        asyncio.timeout(LIMIT),
        serve(Script(GOOD)) as url,
        Transport(TransportOptions(url), clock=clock) as transport,
    ):
        rec = record()
        await transport.send(BACKENDS.get("openai"), REQ, rec)
    assert rec.status == "ok", rec.error
    assert len(rec.token_times_ns) == 3
    assert {clock.readers[t] for t in rec.token_times_ns} == {"data_received"}
    assert clock.readers[rec.end_ns] == "data_received"  # [DONE]'s read
    assert clock.readers[rec.dispatch_ns] == "start"  # just before transport.write


class CountingCoroutine(collections.abc.Coroutine):
    """Wraps a coroutine and counts how often its task resumed it."""

    def __init__(self, coro: collections.abc.Coroutine, steps: list[int]) -> None:
        self.coro, self.steps = coro, steps

    def send(self, value: Any) -> Any:
        self.steps[0] += 1
        return self.coro.send(value)

    def throw(self, *args: Any) -> Any:
        self.steps[0] += 1
        return self.coro.throw(*args)

    def close(self) -> None:
        self.coro.close()

    def __await__(self) -> Any:
        return self.coro.__await__()


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_the_sender_is_woken_once_per_request_not_per_token(http: str):
    """A streamed answer of 4 or of 40 token events (each its own read, 5 ms apart):
    the httptools client's sending task runs the same number of steps for both.
    The aiohttp fallback wakes per read (shown for contrast)."""

    def script(n: int) -> Script:
        steps: list[Any] = []
        for i in range(n):
            steps += [tok([100 + i], "length" if i == n - 1 else None), 0.005]
        return Script([*steps, usage(n), sse(b"[DONE]")])

    steps_of: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    for n in (4, 40):
        async with (
            asyncio.timeout(LIMIT),
            serve(script(n)) as url,
            Transport(TransportOptions(url, http=http)) as transport,
        ):
            await transport.warm(1)
            steps = [0]
            rec = record(f"n{n}")
            req = WireRequest(f"n{n}", [1, 2, 3, 4], n)
            coro = CountingCoroutine(transport.send(BACKENDS.get("openai"), req, rec), steps)
            await loop.create_task(coro)
        assert rec.status == "ok" and len(rec.token_counts) == n, rec.error
        steps_of[n] = steps[0]
    if http == "httptools":
        assert steps_of[4] == steps_of[40] <= 3
    else:
        assert steps_of[40] > steps_of[4]


def _answering(answer: bytes, close_after: bool = False) -> RawHandler:
    """A connection that reads one request and writes ``answer`` (then waits for the
    client to close, unless ``close_after``)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        if not close_after:
            await reader.read()  # until the client closes

    return handle


def _chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("http", HTTP_CLIENTS)
@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
async def test_body_framings_give_the_same_record(framing: str, http: str):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "content-length":
        answer = head + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    elif framing == "chunked":
        parts = [BODY[i : i + 7] for i in range(0, len(BODY), 7)]  # events split anywhere
        answer = head + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(parts)
    else:
        answer = head + b"Connection: close\r\n\r\n" + BODY
    async with (
        serve_raw(_answering(answer, close_after=framing == "close")) as url,
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http)) as transport,
    ):
        rec = record()
        ids = await transport.send(BACKENDS.get("openai"), REQ, rec)
    assert rec.status == "ok", rec.error
    assert ids == [11, 12, 13, 14]
    assert sum(rec.token_counts) == 4 and (rec.completion_tokens, rec.cached_tokens) == (4, 3)


async def test_a_malformed_response_is_a_clear_error():
    async with (
        serve_raw(_answering(b"HTTP/1.1 2x0 WHAT\r\n\r\n")) as url,
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url)) as transport,
    ):
        rec = record()
        await transport.send(BACKENDS.get("openai"), REQ, rec)
    assert rec.status == "error"
    assert rec.error is not None and "malformed HTTP response" in rec.error


async def test_a_large_body_in_one_write_arrives_whole():
    """4,000 token events (~350 KB) written at once: many reads, every token in order."""
    n = 4000
    steps: list[Any] = [tok([10_000 + i], "length" if i == n - 1 else None) for i in range(n)]
    steps = [b"".join(steps), usage(n), b"data: [DONE]\n\n"]
    req = WireRequest(request_id="big", prompt_ids=[1, 2, 3, 4], max_tokens=n)
    async with (
        asyncio.timeout(LIMIT),
        serve(Script(steps)) as url,
        Transport(TransportOptions(url)) as transport,
    ):
        rec = record("big")
        ids = await transport.send(BACKENDS.get("openai"), req, rec)
    assert rec.status == "ok", rec.error
    assert ids == [10_000 + i for i in range(n)]
    assert sum(rec.token_counts) == n and rec.token_times_ns == sorted(rec.token_times_ns)
    assert rec.dispatch_ns is not None and rec.dispatch_ns < rec.token_times_ns[0]


async def test_concurrent_requests_share_a_pool_of_at_most_that_many_connections():
    script = Script(GOOD)
    codec = BACKENDS.get("openai")
    async with (
        asyncio.timeout(LIMIT),
        serve(script) as url,
        Transport(TransportOptions(url)) as transport,
    ):
        for wave in range(3):
            recs = [record(f"w{wave}-{i}") for i in range(4)]
            await asyncio.gather(*(
                transport.send(codec, WireRequest(r.request_id, [1, 2, 3, 4], 4), r)
                for r in recs
            ))  # fmt: skip
            assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    assert len(script.peers) == 12 and len(set(script.peers)) == 4


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_tls_through_asyncio_ssl(tmp_path: Path, http: str, loopback):
    key, cert = self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    script = Script(GOOD)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await script(request)

    url = await loopback([web.post("/v1/completions", handler)], ssl_context=server_ctx)
    async with asyncio.timeout(LIMIT):
        async with Transport(
            TransportOptions(url, http=http, ssl_context=client_ctx)
        ) as transport:
            rec = record()
            ids = await transport.send(BACKENDS.get("openai"), REQ, rec)
        # without trusting the certificate: a clear connection error, no record lost
        async with Transport(TransportOptions(url, http=http)) as t2:
            bad = record("r-2")
            await t2.send(BACKENDS.get("openai"), REQ, bad)
    assert rec.status == "ok" and ids == [11, 12, 13, 14], rec.error
    assert bad.status == "error" and bad.error is not None and "cannot connect" in bad.error
    assert "CERTIFICATE_VERIFY_FAILED" in bad.error or "certificate" in bad.error.lower()


#: private aiohttp / asyncio names the measured path used to reach into (issue 15)
PRIVATE = re.compile(
    r"\._run_once\b|\._ready\b|\._scheduled\b|_asyncio_future_blocking|\._factory\b"
    r"|\._payload\b|\._writer\b|_reading_paused|_buffer_paused|client_proto|ResponseHandler"
    r"|ClientRequest\b|\.write_bytes\(\*|\._when\b|_timer_cancelled_count"
    r"|from asyncio\.(base_events|selector_events|events) import"
)


def test_workbench_uses_no_private_aiohttp_or_asyncio_name():
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in sorted((ROOT / "workbench").rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert hits == []
