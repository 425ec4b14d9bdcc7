"""Anthropic's ``/v1/messages`` through the proxy (what Claude Code speaks).

No Anthropic server runs here, so the upstream is a small app answering the shapes
Anthropic documents (platform.claude.com, "Streaming messages"): a stream of
``message_start`` (input usage split in uncached / cache read / cache write),
``content_block_start`` per block (``thinking``, ``text``, ``tool_use``), deltas,
``message_delta`` (stop reason, final output count), ``message_stop``; or one message
body. The proxy's relay, counts, kinds, stop reasons, sessions by message prefix
(``cache_control`` markers moving between turns) and the tool-wait sub-agent rule are
checked against it; the parsing itself in ``test_protocols``-style cases below.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from workbench.capture import CaptureProxy, read_capture
from workbench.capture.protocols import MESSAGES, response_facts

API_KEY = "sk-ant-api03-capturetest-0123456789"
USAGE = {"input_tokens": 10, "cache_read_input_tokens": 100,
         "cache_creation_input_tokens": 20, "output_tokens": 1}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def stream_events(stop: str, out: int) -> list[bytes]:
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
           "model": "claude-test", "stop_reason": None, "stop_sequence": None, "usage": USAGE}
    return [
        _event("message_start", {"type": "message_start", "message": msg}),
        _event("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "thinking", "thinking": ""}}),
        _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event("ping", {"type": "ping"}),
        _event("content_block_start", {"type": "content_block_start", "index": 1,
                                       "content_block": {"type": "text", "text": ""}}),
        _event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                       "delta": {"type": "text_delta", "text": "Reading."}}),
        _event("content_block_stop", {"type": "content_block_stop", "index": 1}),
        _event("content_block_start", {"type": "content_block_start", "index": 2,
                                       "content_block": {"type": "tool_use", "id": "toolu_1",
                                                         "name": "Read", "input": {}}}),
        _event("content_block_delta", {"type": "content_block_delta", "index": 2,
                                       "delta": {"type": "input_json_delta",
                                                 "partial_json": "{\"path\": \"a\"}"}}),
        _event("content_block_stop", {"type": "content_block_stop", "index": 2}),
        _event("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": stop, "stop_sequence": None},
                                 "usage": {"output_tokens": out}}),
        _event("message_stop", {"type": "message_stop"}),
    ]


async def messages_handler(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if request.headers.get("x-api-key") != API_KEY:
        return web.json_response({"type": "error", "error": {"type": "authentication_error",
                                                             "message": "bad key"}}, status=401)
    stop = "tool_use" if len(body["messages"]) < 5 else "end_turn"
    if not body.get("stream"):
        return web.json_response({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "Done."}], "stop_reason": stop,
            "stop_sequence": None, "usage": {**USAGE, "output_tokens": 7}})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in stream_events(stop, 42):
        await resp.write(event)
    await resp.write_eof()
    return resp


def _turn(text: str, tool_result: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if tool_result is not None:
        content.append({"type": "tool_result", "tool_use_id": "toolu_1", "content": tool_result})
    content.append({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}})
    return {"role": "user", "content": content}


def _uncached(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code moves its cache_control marker to the newest message each turn."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
        out.append({**m, "content": content})
    return out


async def test_anthropic_messages_through_the_proxy(loopback, tmp_path: Path) -> None:
    upstream = await loopback([web.post("/v1/messages", messages_handler)])
    system = [{"type": "text", "text": "You are a careful agent " * 30,
               "cache_control": {"type": "ephemeral"}}]
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01",
               "content-type": "application/json"}

    async def send(http: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]],
                   stream: bool = True) -> bytes:
        body = {"model": "claude-test", "max_tokens": 64, "system": system,
                "messages": messages, "stream": stream}
        async with http.post(url + "/v1/messages", data=orjson.dumps(body),
                             headers=headers) as resp:
            assert resp.status == 200
            return await resp.read()

    async with CaptureProxy(upstream, tmp_path) as proxy, aiohttp.ClientSession() as http:
        messages = [_turn("Read the hidden pelicanwhistle file")]
        assert await send(http, proxy.url, messages) == await send(http, upstream, messages)
        # the direct call above was not captured; the agent's next round, marker moved
        messages = [*_uncached(messages),
                    {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                     {"type": "tool_use", "id": "toolu_1", "name": "Read",
                      "input": {"path": "a"}}]},
                    _turn("go on", tool_result="pelicanwhistle contents")]
        # while the agent waits on its tool: a new chain (no header) = its sub-agent
        sub = await send(http, proxy.url, [_turn("Explore for pelicanwhistle users")],
                         stream=False)
        assert b'"Done."' in sub
        await asyncio.sleep(0.02)
        await send(http, proxy.url, messages)
    docs = read_capture(tmp_path)
    assert len(docs) == 1
    reqs = docs[0]["requests"]
    assert [r["type"] for r in reqs] == ["s", "subagent", "s"]
    first, marker, second = reqs
    for r in (first, second):
        assert r["in"] == 130 and r["out"] == 42
        assert r["output_types"] == ["text", "thinking", "tool_use"]
        assert r["stop"] == "tool_use"
        assert len(r["hash_ids"]) == 130 // 64
        assert r["model"] == "claude-test"
    assert first["input_types"] == ["text"] and second["input_types"] == ["tool_result"]
    assert second["think_time"] >= 0.02
    (sub_req,) = marker["requests"]
    assert sub_req["type"] == "n" and sub_req["in"] == 130 and sub_req["out"] == 7
    assert sub_req["stop"] == "tool_use" and sub_req["output_types"] == ["text"]
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert API_KEY.encode() not in data and b"pelicanwhistle" not in data


def test_anthropic_stream_facts() -> None:
    raw = b"".join(stream_events("max_tokens", 17))
    facts = response_facts(MESSAGES, True, raw)
    assert (facts.prompt_tokens, facts.output_tokens, facts.stop) == (130, 17, "max_tokens")
    assert facts.output_types == ["text", "thinking", "tool_use"]
    # a stream cut before message_delta: the input count, the start's output count
    cut = response_facts(MESSAGES, True, b"".join(stream_events("end_turn", 5)[:3]))
    assert (cut.prompt_tokens, cut.output_tokens, cut.stop) == (130, 1, "")
