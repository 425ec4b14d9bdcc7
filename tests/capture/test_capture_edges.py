"""The capture proxy at its edges: many streams at once, an agent that goes away
mid-stream, a 20 MB request, a stop with streams in flight, keys in headers and URLs
(docs/capture.md, "The relay", "The files")."""

from __future__ import annotations

import asyncio
import base64
import signal
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from capture_process import capture_process
from loopback import read_request, serve_raw
from waiting import BOUND_S

from workbench.capture import CaptureProxy, read_capture

KEY = "sk-edgetest-0123456789abcdef"
URL_KEY = "AIzaEdgeTestUrlKey0123456789"


def _event(doc: dict) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


PIECE = _event({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]})
LAST = _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 80, "completion_tokens": 3}}) + b"data: [DONE]\n\n"


def _ask(text: str) -> dict:
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}


async def test_fifty_streams_at_once_are_relayed_and_recorded(loopback, tmp_path: Path) -> None:
    """An agent with 50 streams open at once (each answer held until all 50 reached the
    upstream): every agent gets its whole answer, every request has its file."""
    streams = 50
    came, all_in = [0], asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(PIECE)
        came[0] += 1
        if came[0] == streams:
            all_in.set()
        await all_in.wait()
        await resp.write(PIECE + LAST)
        return resp

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip

        async def one(k: int) -> bytes:
            async with http.post(proxy.url + "/v1/chat/completions",
                                 json=_ask(f"task {k} " * 40),
                                 headers={"X-Session-ID": f"s{k}"}) as resp:
                return await resp.read()

        answers = await asyncio.wait_for(asyncio.gather(*map(one, range(streams))), BOUND_S)
    assert set(answers) == {PIECE + PIECE + LAST}
    docs = read_capture(tmp_path)
    assert len(docs) == streams and proxy.captured == streams
    assert {(r["in"], r["out"]) for d in docs for r in d["requests"]} == {(80, 3)}


async def test_an_agent_gone_mid_stream_cuts_the_upstream_request_and_is_counted(
        tmp_path: Path) -> None:  # fmt: skip
    """The agent closes its connection mid-stream: the proxy closes the upstream's (the
    server stops generating for nobody), and the conversation's file counts the request
    as not recorded ("a cut answer")."""
    rounds = [0]
    upstream_gone = asyncio.Event()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: the first round is answered whole
            await read_request(reader)
            rounds[0] += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            body = PIECE if rounds[0] == 2 else PIECE + LAST
            writer.write(b"%x\r\n%s\r\n" % (len(body), body))
            if rounds[0] == 2:
                await writer.drain()
                assert await reader.read() == b""  # until the proxy closes it
                upstream_gone.set()
                return
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    first = _ask("first " * 40)
    async with serve_raw(upstream) as url, \
            CaptureProxy(url, tmp_path, tokenizer="word", session_header="X-S") as proxy:
        async with aiohttp.ClientSession() as http, \
                http.post(proxy.url + "/v1/chat/completions", json=first,
                          headers={"X-S": "a"}) as resp:  # fmt: skip
            await resp.read()
        second = {**first, "messages": [*first["messages"],
                                        {"role": "assistant", "content": "hi"},
                                        {"role": "user", "content": "more"}]}
        async with aiohttp.ClientSession() as http:
            resp = await http.post(proxy.url + "/v1/chat/completions", json=second,
                                   headers={"X-S": "a"})
            assert await resp.content.readany() == PIECE
            resp.close()  # the agent goes away
        await asyncio.wait_for(upstream_gone.wait(), BOUND_S)
    assert proxy.not_recorded == {"a cut answer": 1} and proxy.captured == 1
    (doc,) = read_capture(tmp_path)
    assert doc["requests_not_recorded"] == 1 and len(doc["requests"]) == 1


async def test_a_20_mb_request_is_relayed_as_sent_and_recorded(loopback, tmp_path: Path
                                                                ) -> None:  # fmt: skip
    """A screenshot-sized body (20 MB of base64 image in one message): the upstream gets
    the very bytes, the request is recorded."""
    got: list[bytes] = []

    async def chat(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": "a cat"}}],
                                  "usage": {"prompt_tokens": 5000, "completion_tokens": 2}})

    image = base64.b64encode(bytes(range(256)) * (15 * 2**20 // 256)).decode()
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this " * 10},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]}]})
    assert len(body) > 20 * 10**6
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/chat/completions", chat)
    upstream = await loopback(app)
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + "/v1/chat/completions", data=body,
                      headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
        assert resp.status == 200
        await resp.read()
    assert got == [body]
    ((request,),) = [d["requests"] for d in read_capture(tmp_path)]
    assert (request["in"], request["out"]) == (5000, 2)
    assert len(request["hash_ids"]) == 5000 // 64


async def test_sigterm_with_streams_in_flight_records_them_and_no_key(loopback, tmp_path: Path
                                                                      ) -> None:  # fmt: skip
    """SIGTERM while two streams are in flight: they finish (the first stop lets them),
    and every finished request is on disk; the agent's key, sent in a header and in the
    URL's query, is in no file and no console line."""
    release, held = asyncio.Event(), [0]
    both_in = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(PIECE)
        if body.get("max_tokens") == 9:
            held[0] += 1
            if held[0] == 2:
                both_in.set()
            await release.wait()
        await resp.write(LAST)
        return resp

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    out = tmp_path / "cap"
    headers = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY}
    async with capture_process(upstream, out, "--tokenizer", "word") as cap, \
            aiohttp.ClientSession() as http:  # fmt: skip
        url = cap.url + f"/v1/chat/completions?key={URL_KEY}"
        async with http.post(url, json=_ask("done " * 40), headers=headers) as resp:
            await resp.read()

        async def held_stream(k: int) -> bytes:
            async with http.post(url, json={**_ask(f"held {k} " * 40), "max_tokens": 9},
                                 headers={**headers, "X-Session-ID": f"h{k}"}) as resp:
                return await resp.read()

        streams = [asyncio.create_task(held_stream(k)) for k in range(2)]
        await asyncio.wait_for(both_in.wait(), BOUND_S)
        cap.signal(signal.SIGTERM)  # while both are held upstream
        await cap.stopped_listening()
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(*streams), BOUND_S)
    assert answers == [PIECE + LAST] * 2
    assert cap.returncode == 0, cap.console
    assert "captured 3 requests" in cap.console, cap.console
    docs = read_capture(out)
    assert sorted(len(d["requests"]) for d in docs) == [1, 1, 1]
    for f in out.iterdir():
        data = f.read_bytes()
        assert KEY.encode() not in data and URL_KEY.encode() not in data, f
    assert KEY not in cap.console and URL_KEY not in cap.console
