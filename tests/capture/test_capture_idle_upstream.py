"""The capture proxy's upstream connections, closed idle by the upstream (docs/capture.md,
"Idle upstream connections"): a request lost on a reused connection before any byte of
the answer is sent once more on a new one, never relayed as a 502; one the upstream
answered is not sent again. Real servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import aiohttp
from aiohttp import web
from loopback import read_request, serve_app, serve_raw, stream_body

from workbench.capture.proxy import CaptureProxy

SSE = (b'data: {"id":"c","choices":[{"index":0,"text":"hi","finish_reason":"length"}],'
       b'"usage":{"prompt_tokens":4,"completion_tokens":1}}\n\ndata: [DONE]\n\n')
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
          b"Content-Length: %d\r\n\r\n%b" % (len(SSE), SSE))
BODY = {"model": "m", "prompt": "hello there", "max_tokens": 1, "stream": True}
LIMIT = 30.0
#: the upstream's keep-alive in the gap test, s
KEEP_ALIVE_S = 0.5


async def ask(agent: aiohttp.ClientSession, url: str) -> int:
    async with agent.post(url + "/v1/completions", json=BODY) as resp:
        await resp.read()
        return resp.status


async def test_a_request_lost_on_an_idle_upstream_connection_is_relayed(tmp_path: Path):
    """The upstream closes its kept-alive connection as the next request comes, unread:
    that request goes once more on a new connection; the agent gets the answer."""
    conns = [0]

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns[0] += 1
        await read_request(reader)
        writer.write(ANSWER)
        await writer.drain()
        if conns[0] == 1:
            await reader.read(1)  # the next request: closed unread
            return
        while True:
            await read_request(reader)
            writer.write(ANSWER)
            await writer.drain()

    async with (serve_raw(upstream) as url, asyncio.timeout(LIMIT),
                CaptureProxy(url, tmp_path, tokenizer="word") as proxy,
                aiohttp.ClientSession() as agent):  # fmt: skip
        assert [await ask(agent, proxy.url) for _ in range(3)] == [200, 200, 200]
        assert proxy.resent == 1
    assert conns[0] == 3  # the resend's own connection (closed after it), then a pooled one


async def test_an_answered_request_is_not_sent_again(tmp_path: Path):
    """The upstream sends the head, then drops the connection: the agent's stream is cut,
    the upstream saw the request once."""
    got = [0]

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        got[0] += 1
        writer.write(ANSWER)
        await writer.drain()
        await read_request(reader)
        got[0] += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        await writer.drain()

    async with (serve_raw(upstream) as url, asyncio.timeout(LIMIT),
                CaptureProxy(url, tmp_path, tokenizer="word") as proxy,
                aiohttp.ClientSession() as agent):  # fmt: skip
        assert await ask(agent, proxy.url) == 200
        with contextlib.suppress(aiohttp.ClientError):
            await ask(agent, proxy.url)  # its stream cut: whatever the agent's client says
        assert proxy.resent == 0
    assert got[0] == 2


async def test_gaps_at_the_upstream_keep_alive_get_no_502(tmp_path: Path):
    """An aiohttp upstream with a short keep-alive, requests one at a time per session
    with gaps straddling it: every answer relayed, each request seen once upstream."""
    seen = [0]

    async def completions(request: web.Request) -> web.StreamResponse:
        seen[0] += 1
        return await stream_body(request, SSE)

    statuses: list[int] = []
    rng = random.Random(3)
    async with (serve_app([web.post("/v1/completions", completions)],
                          keepalive_timeout=KEEP_ALIVE_S) as url,
                asyncio.timeout(LIMIT),
                CaptureProxy(url, tmp_path, tokenizer="word") as proxy,
                aiohttp.ClientSession() as agent):  # fmt: skip

        async def session() -> None:
            for _ in range(4):
                statuses.append(await ask(agent, proxy.url))
                await asyncio.sleep(rng.uniform(0.8, 1.2) * KEEP_ALIVE_S)

        await asyncio.gather(*(session() for _ in range(3)))
    assert statuses == [200] * 12
    assert seen[0] == 12
