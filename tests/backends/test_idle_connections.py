"""Connections the server closes idle (docs/wire-protocols.md, "Idle connections").

A server closes a kept-alive connection idle past its keep-alive (vLLM and SGLang 5 s,
llama.cpp 5 s); a request written on it just then is lost before the server reads it.
Each client closes, rather than reuses, a connection idle past ``connection_idle_s``;
a request that still dies on a reused connection before any byte of its answer is sent
once more, on a new connection, timed from the resend, flagged and counted; a request
the server answered is never sent twice. Every test runs with each client.

Real servers on loopback: a raw one where the order of events is the condition, an
aiohttp server with a short keep-alive where the idle gap itself is (its gaps are sleeps
straddling that keep-alive, the smallest that shows it on a loaded machine).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from loopback import read_request, serve_app, serve_raw, stream_body
from test_http_clients import BODY, SSE_HEAD, cl
from test_transport import LIMIT, record

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.keepalive import CONNECTION_IDLE_S
from workbench.records import RequestRecord

CODEC = BACKENDS.get("openai")
#: the aiohttp server's keep-alive in the gap tests, s
KEEP_ALIVE_S = 0.5

pytestmark = pytest.mark.parametrize("http", HTTP_CLIENTS)


def req(rid: str) -> WireRequest:
    return WireRequest(rid, [1, 2, 3, 4], 4)


async def send(t: Transport, rid: str) -> RequestRecord:
    rec = record(rid)
    await t.send(CODEC, req(rid), rec)
    return rec


class Peers:
    """A raw server that answers every request and keeps every connection open: which
    connection (its ordinal) carried each request, and which the client closed."""

    def __init__(self) -> None:
        self.conns = 0
        self.carried: list[int] = []
        self.closed: dict[int, asyncio.Event] = {}

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns += 1
        n = self.conns
        self.closed[n] = asyncio.Event()
        try:
            while True:
                try:
                    await read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                self.carried.append(n)
                writer.write(cl(BODY))
                await writer.drain()
        finally:
            self.closed[n].set()


async def test_a_connection_idle_past_the_bound_is_closed_not_reused(http: str):
    peers = Peers()
    opts = TransportOptions(base_url="", http=http, connection_idle_s=0.2)
    async with (serve_raw(peers) as url, asyncio.timeout(LIMIT),
                Transport(dataclasses.replace(opts, base_url=url)) as t):  # fmt: skip
        assert (await send(t, "r0")).status == "ok"
        assert (await send(t, "r1")).status == "ok"  # at once: the same connection
        await asyncio.sleep(0.3)  # idle past the bound (the condition itself)
        rec = await send(t, "r2")
        assert rec.status == "ok", rec.error
        assert (await send(t, "r3")).status == "ok"
        await peers.closed[1].wait()  # the client closed the idle one
    assert peers.carried == [1, 1, 2, 2]
    assert "stale_connection_retry" not in rec.extra


async def test_no_bound_keeps_reusing_an_idle_connection(http: str):
    peers = Peers()
    opts = TransportOptions(base_url="", http=http, connection_idle_s=None)
    async with (serve_raw(peers) as url, asyncio.timeout(LIMIT),
                Transport(dataclasses.replace(opts, base_url=url)) as t):  # fmt: skip
        assert (await send(t, "r0")).status == "ok"
        await asyncio.sleep(0.3)
        assert (await send(t, "r1")).status == "ok"
    assert peers.carried == [1, 1]


async def test_a_resend_goes_on_a_new_connection_timed_from_the_resend(http: str):
    """The pooled connection is closed by the server as the next request arrives, unread:
    that request goes once more on a new connection, its dispatch stamped there."""
    dropped_ns: list[int] = []
    conns = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns[0] += 1
        await read_request(reader)
        writer.write(cl(BODY))
        await writer.drain()
        if conns[0] == 1:
            await reader.read(1)  # the next request's first byte: closed, never read
            dropped_ns.append(time.perf_counter_ns())
            return
        while True:
            await read_request(reader)
            writer.write(cl(BODY))
            await writer.drain()

    async with (serve_raw(handle) as url, asyncio.timeout(LIMIT),
                Transport(TransportOptions(url, http=http)) as t):  # fmt: skip
        first = await send(t, "r0")
        again = await send(t, "r1")
        assert t.resent_stale == 1
    assert first.status == "ok" and "stale_connection_retry" not in first.extra
    assert again.status == "ok", again.error
    assert again.extra["stale_connection_retry"] is True
    assert conns[0] == 2
    assert again.dispatch_ns is not None and again.dispatch_ns > dropped_ns[0]
    assert again.first_token_ns is not None and again.first_token_ns > again.dispatch_ns


async def test_a_request_the_server_answered_is_never_resent(http: str):
    """On a reused connection the server sends the answer's head, then drops the
    connection: the request failed, it is not sent again."""
    got: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        got.append(1)
        writer.write(cl(BODY))
        await writer.drain()
        await read_request(reader)
        got.append(2)
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        await writer.drain()

    async with (serve_raw(handle) as url, asyncio.timeout(LIMIT),
                Transport(TransportOptions(url, http=http)) as t):  # fmt: skip
        assert (await send(t, "r0")).status == "ok"
        rec = await send(t, "r1")
        assert t.resent_stale == 0
    assert rec.status == "error" and rec.http_status == 200
    assert "stale_connection_retry" not in rec.extra
    assert got == [1, 2]


async def gaps_run(http: str, idle: float | None, sessions: int = 3, rounds: int = 4,
                   ) -> tuple[list[RequestRecord], list[str], int]:
    """Sessions of one request at a time against an aiohttp server whose keep-alive is
    ``KEEP_ALIVE_S``, the gaps drawn around it (0.8..1.2 ×): the records, the request ids
    the server's handler saw, and the transport's resend count."""
    seen: list[str] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers["x-request-id"])
        return await stream_body(request, BODY)

    recs: list[RequestRecord] = []
    opts: dict[str, Any] = {"connection_idle_s": idle}
    async with serve_app([web.post("/v1/completions", completions)],
                         keepalive_timeout=KEEP_ALIVE_S) as url:
        rng = random.Random(7)

        async def session(t: Transport, s: int) -> None:
            for r in range(rounds):
                recs.append(await send(t, f"s{s}-r{r}"))
                await asyncio.sleep(rng.uniform(0.8, 1.2) * KEEP_ALIVE_S)

        async with asyncio.timeout(LIMIT * 3), Transport(
                TransportOptions(url, http=http, **opts)) as t:  # fmt: skip
            await asyncio.gather(*(session(t, s) for s in range(sessions)))
            resent = t.resent_stale
    return recs, seen, resent


async def test_gaps_at_the_keep_alive_with_a_bound_below_it_lose_nothing(http: str):
    recs, seen, resent = await gaps_run(http, idle=KEEP_ALIVE_S / 2.5)
    assert [r.error for r in recs if r.status != "ok"] == []
    assert sorted(seen) == sorted(r.request_id for r in recs)  # each seen once
    assert resent == 0  # no request was written on a connection being closed


async def test_gaps_at_the_keep_alive_with_a_bound_above_it_fail_no_request(http: str):
    """The default bound (4 s) is above this server's keep-alive: a reuse may race its
    close; such a request is sent once more, and the server sees each request once."""
    recs, seen, resent = await gaps_run(http, idle=CONNECTION_IDLE_S)
    assert [r.error for r in recs if r.status != "ok"] == []
    assert sorted(seen) == sorted(r.request_id for r in recs)
    assert resent == sum(bool(r.extra.get("stale_connection_retry")) for r in recs)


def test_the_bound_is_a_validated_executor_field(http: str):
    cfg = RunConfig.from_dict({"trace": "x", "executor": {"http": http}})
    assert cfg.executor.connection_idle_s == CONNECTION_IDLE_S == 4.0
    opts = TransportOptions.of_run(cfg, "http://127.0.0.1:1")
    assert opts.connection_idle_s == CONNECTION_IDLE_S
    off = RunConfig.from_dict({"trace": "x", "executor": {"connection_idle_s": None}})
    assert TransportOptions.of_run(off, "http://127.0.0.1:1").connection_idle_s is None
    for bad in (0, -1, 3601, "4s"):
        with pytest.raises(ConfigError, match=r"executor\.connection_idle_s"):
            RunConfig.from_dict({"trace": "x", "executor": {"connection_idle_s": bad}})


async def test_a_run_counts_its_resends_in_the_summary(http: str, tmp_path: Path):
    """A whole run against a server that answers one request a connection and closes it
    when the next one comes (as llama-server does after a stream): every request is ok,
    each resend is flagged in its record and counted in ``summary.client.resent_stale``."""
    from workbench.data import path as data_path
    from workbench.executors.dispatch import run_async

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_request(reader)
        if head.startswith(b"GET"):
            body = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        elif head.startswith(b"POST /v1/completions"):
            writer.write(cl(BODY))
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read(1)  # the next request on this connection: closed, unread

    cfg = RunConfig.from_dict({
        "trace": {"path": str(data_path("tracelab/multi_session_example.csv")),
                  "max_items": 3},
        "target": {"url": "http://127.0.0.1:1"}, "out_dir": str(tmp_path / "run"),
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, "max_concurrency": 2,
                    "output_len": "fixed:4"},
        "backend": {"preflight": False, "flush_cache": False},  # only the run's requests
        "executor": {"http": http},
    })  # fmt: skip
    async with serve_raw(handle) as url, asyncio.timeout(LIMIT * 3):
        result = await run_async(cfg.replace(**{"target.url": url}))
    assert [r.error for r in result.records if r.status != "ok"] == []
    flagged = sum(bool(r.extra.get("stale_connection_retry")) for r in result.records)
    assert flagged > 0
    summary = orjson.loads((Path(result.run_dir) / "summary.json").read_bytes())
    assert summary["client"]["resent_stale"] == flagged
