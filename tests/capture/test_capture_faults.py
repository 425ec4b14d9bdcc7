"""The capture proxy under faults of its agents and upstreams: compressed request
bodies, upstreams that cut their streams (docs/capture.md, "The relay", "What is
captured")."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from workbench.capture import CaptureProxy, read_capture

CHAT = {"model": "m", "max_tokens": 9,
        "messages": [{"role": "system", "content": "be brief " * 40},
                     {"role": "user", "content": "list the files please"}]}
ANSWER = {"id": "c1", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "ok"}}],
          "usage": {"prompt_tokens": 321, "completion_tokens": 17, "total_tokens": 338}}


@pytest.mark.parametrize("encoding,pack", [("gzip", gzip.compress), ("deflate", zlib.compress)])
async def test_a_compressed_request_body_reaches_the_upstream_as_sent(
        loopback, tmp_path: Path, encoding: str, pack) -> None:
    """An agent that compresses its request body (``Content-Encoding: gzip``, as some SDKs
    do for large prompts): the upstream gets the bytes the agent sent, with their
    ``Content-Encoding``, and the request is recorded from the body inflated. The proxy
    inflated the body and relayed it still labelled gzip: the upstream could not read
    it (a 500 here, a 400 from vLLM) and the agent's request failed."""
    got: list[tuple[str, bytes]] = []

    async def chat(request: web.Request) -> web.Response:
        got.append((request.headers.get("Content-Encoding", ""), await request.read()))
        return web.json_response(ANSWER)

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    body = orjson.dumps(CHAT)
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + "/v1/chat/completions", data=pack(body),
                      headers=headers) as resp:  # fmt: skip
        assert resp.status == 200, await resp.text()
        assert orjson.loads(await resp.read()) == ANSWER
    assert got == [(encoding, body)]  # inflated by the upstream's own server, as sent
    req = read_capture(tmp_path)[0]["requests"][0]
    assert (req["in"], req["out"]) == (321, 17) and len(req["hash_ids"]) == 321 // 64


def _chunk(event: dict) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


DELTA = {"id": "x", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
LAST = {"id": "x", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 130, "completion_tokens": 2}}


async def test_an_upstream_that_cuts_its_stream_is_a_cut_for_the_agent_and_one_line(
        loopback, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The upstream resets its connection mid-stream: the agent gets the pieces sent so
    far and then a cut stream (never a clean end it could take for a whole answer), the
    request is not recorded, the next one is, and the console gets one line naming the
    error's class. It got aiohttp's "Error handling request" and a traceback per cut."""
    import logging

    cuts = [True, False]

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk(DELTA))
        if cuts.pop(0):
            assert request.transport is not None
            request.transport.abort()  # a reset, mid-stream
            return resp
        await resp.write(_chunk(LAST) + b"data: [DONE]\n\n")
        return resp

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    body = {**CHAT, "stream": True}
    with caplog.at_level(logging.INFO):
        async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
                aiohttp.ClientSession() as http:  # fmt: skip
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                assert await resp.content.readany() == _chunk(DELTA)
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    assert (proxy.captured, proxy.passed, proxy.failed) == (1, 1, 0)
    assert [r["in"] for r in read_capture(tmp_path)[0]["requests"]] == [130]
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.exc_info) for r in noisy] == [("workbench.capture.proxy", None)]
    assert "ClientPayloadError" in noisy[0].getMessage()


async def test_a_root_whose_request_failed_after_its_sub_agent_ran_still_replays(
        loopback, tmp_path: Path) -> None:
    """The root agent's first request is in flight when its sub-agent (named by the
    parent header) runs and finishes; then the root's request fails. The file holds the
    sub-agent's marker and no request of the root's own: the folder still loads, the
    sub-agent a session of its own. The reader refused the whole folder ("has no
    request of its own"), so a capture did not replay for one failed request."""
    import asyncio

    from workbench.traces.load import load_trace

    root_in = asyncio.Event()
    sub_done = asyncio.Event()

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        if request.headers.get("X-Session-ID") == "root":
            root_in.set()
            await sub_done.wait()
            return web.json_response({"error": {"message": "overloaded"}}, status=529)
        return web.json_response(ANSWER)

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip

        async def ask(headers: dict[str, str], task: str) -> int:
            body = {**CHAT, "messages": [{"role": "user", "content": task}]}
            async with http.post(proxy.url + "/v1/chat/completions", json=body,
                                 headers=headers) as resp:
                await resp.read()
                return resp.status

        root = asyncio.create_task(ask({"X-Session-ID": "root"}, "the main task"))
        await root_in.wait()
        assert await ask({"X-Session-ID": "sub", "X-Parent-Session-ID": "root"},
                         "search the tree") == 200
        sub_done.set()
        assert await root == 529
    (doc,) = read_capture(tmp_path)
    assert [r["type"] for r in doc["requests"]] == ["subagent"]
    w = load_trace(tmp_path)
    assert [(u.unit_id, len(u.rounds), u.spawn) for u in w.units] == [
        ("conv_0001::sa:agent_001", 1, None)]
    assert w.units[0].rounds[0].prompt_len == 321


async def test_a_killed_captures_temporary_files_are_removed_by_the_next(
        loopback, tmp_path: Path) -> None:
    """A capture killed mid-write leaves ``conv_NNNN.json.tmp`` (the writer's temporary,
    ``workbench.safe_write.temp_of``) beside the files; the next capture into that
    folder removes it and leaves everything else alone. It looked for ``.conv_*.tmp``, a
    name nothing writes, so the temporaries stayed for good."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER)

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    (tmp_path / "conv_0001.json").write_bytes(b"{}")
    (tmp_path / "conv_0002.json.tmp").write_bytes(b'{"id": "conv_00')
    (tmp_path / "mine_0001.json.tmp").write_bytes(b"another prefix's")
    (tmp_path / "notes.tmp").write_bytes(b"the user's")
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "conv_0001.json", "mine_0001.json.tmp", "notes.tmp"]
        async with http.post(proxy.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "conv_0001.json", "conv_0002.json", "mine_0001.json.tmp", "notes.tmp"]


async def test_a_usage_of_zero_prompt_tokens_is_counted_by_the_tokenizer(
        loopback, tmp_path: Path) -> None:
    """An upstream whose usage says ``prompt_tokens: 0`` (servers that fill usage with
    zeros when they do not count): no prompt is empty, so the tokenizer counts it, and
    the capture replays. ``"in": 0`` was written, which the ``weka`` reader refuses
    (``in`` must be at least 1): the whole capture folder did not load."""
    from workbench.traces.load import load_trace

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({**ANSWER, "usage": {"prompt_tokens": 0,
                                                      "completion_tokens": 17}})

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + "/v1/chat/completions", json=CHAT) as resp:  # fmt: skip
        assert resp.status == 200
        await resp.read()
    req = read_capture(tmp_path)[0]["requests"][0]
    assert req["in"] > 64 and req["out"] == 17 and len(req["hash_ids"]) == req["in"] // 64
    (unit,) = load_trace(tmp_path).units
    assert unit.rounds[0].prompt_len == req["in"]


async def test_a_usage_past_the_bound_of_a_round_is_not_recorded(
        loopback, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An upstream whose usage claims more tokens than any trace reader takes for one
    request (10M, docs/trace-bounds.md): relayed, not recorded, one log line, and the
    capture replays. It was recorded — and its prompt hashed block by block first: a
    claim of 10^12 tokens had the proxy make 1.6e10 digests — so the file was one the
    reader refuses, and the whole folder did not load."""
    import logging

    from workbench.capture import proxy as proxy_module
    from workbench.traces import bounds
    from workbench.traces.load import load_trace

    assert proxy_module.MAX_REQUEST_TOKENS == bounds.MAX_ROUND_TOKENS
    usages = [{"prompt_tokens": 20_000_000, "completion_tokens": 17}, ANSWER["usage"]]

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({**ANSWER, "usage": usages.pop(0)})

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    with caplog.at_level(logging.WARNING):
        async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
                aiohttp.ClientSession() as http:  # fmt: skip
            for text in ("first", "second"):
                body = {**CHAT, "messages": [{"role": "user", "content": text}]}
                async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
    assert (proxy.captured, proxy.failed) == (1, 1)
    assert [r["in"] for d in read_capture(tmp_path) for r in d["requests"]] == [321]
    assert [u.rounds[0].prompt_len for u in load_trace(tmp_path).units] == [321]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "20,000,017" in line and "10,000,000" in line


def _raw_deflate(data: bytes) -> bytes:
    """``Content-Encoding: deflate`` as some servers and clients send it: the deflate
    stream without zlib's header (RFC 9110 says zlib's; browsers take both)."""
    packer = zlib.compressobj(wbits=-15)
    return packer.compress(data) + packer.flush()


async def test_a_raw_deflate_body_and_answer_are_recorded(loopback, tmp_path: Path) -> None:
    """A request body and an answer each ``deflate`` without zlib's header: relayed as
    sent, and recorded (read inflated). Both were relayed and not recorded, silently."""
    got: list[bytes] = []

    async def chat(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.Response(body=_raw_deflate(orjson.dumps(ANSWER)),
                            headers={"Content-Type": "application/json",
                                     "Content-Encoding": "deflate"})

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    body = _raw_deflate(orjson.dumps(CHAT))
    headers = {"Content-Encoding": "deflate", "Content-Type": "application/json"}
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession(auto_decompress=False) as http, \
            http.post(proxy.url + "/v1/chat/completions", data=body,
                      headers=headers) as resp:  # fmt: skip
        assert resp.status == 200
        assert await resp.read() == _raw_deflate(orjson.dumps(ANSWER))
    assert got == [orjson.dumps(CHAT)]  # inflated by the upstream's own server, as sent
    req = read_capture(tmp_path)[0]["requests"][0]
    assert (req["in"], req["out"]) == (321, 17) and len(req["hash_ids"]) == 321 // 64
    assert proxy.not_recorded == {}


#: a lone surrogate, escaped (JSON allows it; UTF-8 cannot carry it): what a client
#: that cuts a string between the two halves of an emoji sends
LONE = b'{"model": "m", "messages": [{"role": "user", "content": "cut \\ud83d here ' + \
    b"word " * 80 + b'"}]}'


async def test_a_lone_surrogate_is_recorded(loopback, tmp_path: Path) -> None:
    """A request body and an answer holding a lone surrogate (``\\ud83d``): recorded, the
    surrogate read as U+FFFD; the word tokenizer counts the prompt as it counts the same
    text with U+FFFD. Both were relayed and not recorded (orjson refuses them)."""
    from workbench.capture.protocols import request_facts
    from workbench.capture.tokens import word_ids

    answer = (b'{"id": "c1", "object": "chat.completion", "model": "m", "choices": '
              b'[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", '
              b'"content": "half \\udc00"}}]}')  # no usage: the tokenizer counts

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answer, headers={"Content-Type": "application/json"})

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + "/v1/chat/completions", data=LONE,
                      headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
        assert resp.status == 200 and await resp.read() == answer
    req = read_capture(tmp_path)[0]["requests"][0]
    same = request_facts("/v1/chat/completions", LONE.replace(b"\\ud83d", "\ufffd".encode()))
    assert same is not None
    assert req["in"] == len(word_ids(same)) and req["output_types"] == ["text"]
    assert req["stop"] == "end_turn" and proxy.not_recorded == {}


async def test_what_is_not_recorded_is_counted(loopback, tmp_path: Path) -> None:
    """Requests relayed and not recorded are counted by reason (the CLI prints them when
    it stops), and in their conversation's file when it has one: an error answer in the
    middle of a conversation, a body that is not JSON."""
    statuses = [200, 500, 200]

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER, status=statuses.pop(0))

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    first = CHAT["messages"]
    later = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        for messages in (first, later, later):
            async with http.post(proxy.url + "/v1/chat/completions",
                                 json={**CHAT, "messages": messages}) as resp:
                await resp.read()
        async with http.post(proxy.url + "/v1/chat/completions", data=b"{not json",
                             headers={"Content-Type": "application/json"}) as resp:
            await resp.read()
    (doc,) = read_capture(tmp_path)
    assert len(doc["requests"]) == 2 and doc["requests_not_recorded"] == 1
    assert proxy.not_recorded == {"an error status": 1, "a body not of its API's JSON": 1}


async def test_several_choices_are_not_recorded_and_counted(loopback, tmp_path: Path) -> None:
    """``n: 2`` (two choices of one prompt): the usage counts both choices' tokens as one
    output, and the format has one output a request, which a replay decodes as one
    sequence: relayed, not recorded, counted (docs/capture.md). It was recorded with
    the total as one output: a replay decoded twice the tokens in one sequence."""
    two = {**ANSWER, "choices": [ANSWER["choices"][0], {**ANSWER["choices"][0], "index": 1}],
           "usage": {"prompt_tokens": 321, "completion_tokens": 34}}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(two if body.get("n", 1) > 1 else ANSWER)

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    later = [*CHAT["messages"], {"role": "assistant", "content": "ok"},
             {"role": "user", "content": "go"}]
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        for body in (CHAT, {**CHAT, "messages": later, "n": 2}):
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()
    (doc,) = read_capture(tmp_path)
    assert [r["out"] for r in doc["requests"]] == [17] and doc["requests_not_recorded"] == 1
    assert proxy.not_recorded == {"n > 1 (several choices)": 1}


_NO_USAGE = [  # (path, request, whole answer without usage, its output in words)
    ("/v1/chat/completions", CHAT,
     {"id": "c2", "object": "chat.completion", "model": "m",
      "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
          "role": "assistant", "content": "three words here",
          "tool_calls": [{"id": "t", "type": "function", "function": {
              "name": "ls", "arguments": '{"path": "src tests"}'}}]}}]}, 3 + 1 + 3),
    ("/v1/completions", {"model": "m", "max_tokens": 9, "prompt": "say a few words"},
     {"id": "c3", "object": "text_completion", "model": "m",
      "choices": [{"index": 0, "finish_reason": "stop", "text": " a few more words"}]}, 4),
    ("/v1/messages", {"model": "m", "max_tokens": 9,
                      "messages": [{"role": "user", "content": "list the files please"}]},
     {"id": "m1", "type": "message", "role": "assistant", "model": "m",
      "stop_reason": "end_turn",
      "content": [{"type": "thinking", "thinking": "two words"},
                  {"type": "text", "text": "one two three four five"}]}, 2 + 5),
]


@pytest.mark.parametrize(("path", "request_body", "answer", "words"), _NO_USAGE,
                         ids=["chat", "completions", "messages"])
async def test_a_whole_answer_without_usage_is_counted_in_words(
        loopback, tmp_path: Path, path: str, request_body: dict, answer: dict,
        words: int) -> None:
    """A non-streamed answer without a usage (a server or gateway that does not count):
    its output is counted by the word tokenizer over its text, tool calls and reasoning,
    as a stream without usage is counted by its events (docs/capture.md, "Token
    counts"). It was recorded as ``out: 0``, which a replay sends as one token."""
    async def answer_it(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(answer)

    upstream = await loopback([web.post(path, answer_it)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + path, json=request_body) as resp:  # fmt: skip
        assert resp.status == 200
        assert orjson.loads(await resp.read()) == answer
    req = read_capture(tmp_path)[0]["requests"][0]
    assert req["out"] == words and req["in"] > 0
