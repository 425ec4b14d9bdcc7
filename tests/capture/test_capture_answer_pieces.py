"""A streamed answer is read as its pieces are relayed (``AnswerReader``), so the relay's
end costs the proxy's loop only the last event: the facts are those of the whole answer
read at once (``response_facts``), however the stream is cut into pieces, and however the
proxy gathers its relayed pieces into batches for the reader (docs/capture.md, "The relay")."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from waiting import BOUND_S, POLL_S

from workbench.capture import CaptureProxy, read_capture
from workbench.capture.protocols import (
    CHAT,
    COMPLETIONS,
    MESSAGES,
    RESPONSES,
    SHAPE_ERRORS,
    AnswerReader,
    response_facts,
)
from workbench.capture.proxy import READ_BATCH_BYTES


def _sse(docs: list[object], *, event: bool = False, crlf: bool = False) -> bytes:
    out = []
    for doc in docs:
        head = f"event: {doc['type']}\n".encode() if event and isinstance(doc, dict) else b""
        out.append(head + b"data: " + orjson.dumps(doc) + b"\n\n")
    raw = b"".join(out)
    return raw.replace(b"\n", b"\r\n") if crlf else raw


def _chunk(content: str, **extra: object) -> dict:
    return {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
            **extra}


CHAT_USAGE = _sse([*(_chunk(f"w{k} ") for k in range(40)),
                   {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"id": "t"}]},
                                            "finish_reason": "tool_calls"}]},
                   {"id": "c", "choices": [], "usage": {"prompt_tokens": 90,
                                                        "completion_tokens": 41}}]) + \
    b"data: [DONE]\n\n"
CHAT_NO_USAGE = _sse([*(_chunk(f"w{k}") for k in range(25)),
                      {"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}],
                     crlf=True) + b"data: [DONE]"  # no final blank line: still read
COMPLETION = _sse([*({"choices": [{"index": 0, "text": f" t{k}", "finish_reason": None}]}
                     for k in range(30)),
                   {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 30}}]) + \
    b": a comment\n\ndata: [DONE]\n\n"
MESSAGE = _sse([
    {"type": "message_start", "message": {"usage": {"input_tokens": 5,
                                                    "cache_read_input_tokens": 64}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
    *({"type": "content_block_delta", "index": 0, "delta": {"thinking": "x"}}
      for _ in range(20)),
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use"}},
    {"type": "ping"},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
     "usage": {"output_tokens": 23}},
    {"type": "message_stop"}], event=True)
ITEM = {"type": "function_call", "id": "fc", "call_id": "c1", "name": "ls",
        "arguments": "{}", "status": "completed"}
RESPONSE = _sse([
    {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
    {"type": "response.output_item.added", "item": {**ITEM, "status": "in_progress"}},
    *({"type": "response.function_call_arguments.delta", "delta": "{"} for _ in range(9)),
    {"type": "response.output_item.done", "item": ITEM},
    {"type": "response.completed", "response": {
        "id": "r1", "status": "completed", "output": [ITEM],
        "usage": {"input_tokens": 300, "output_tokens": 9}}}], event=True)
NOT_ITS_SHAPE = _sse([_chunk("a"), {"choices": 7}])  # ``choices`` a number

CASES = [(CHAT, CHAT_USAGE), (CHAT, CHAT_NO_USAGE), (COMPLETIONS, COMPLETION),
         (MESSAGES, MESSAGE), (RESPONSES, RESPONSE)]


def _pieces(raw: bytes, rng: random.Random, most: int) -> list[bytes]:
    cuts = sorted({rng.randrange(1, len(raw)) for _ in range(len(raw) // most + 1)})
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


@pytest.mark.parametrize(("api", "raw"), CASES)
def test_read_piece_by_piece_the_facts_are_the_whole_answers(api: str, raw: bytes) -> None:
    whole = response_facts(api, True, raw)
    assert whole.output_events > 0 and whole.stop  # the case says something
    rng = random.Random(api + str(len(raw)))
    for most in (1, 3, 17, 200, len(raw)):  # byte by byte … all at once
        for _ in range(5):
            reader = AnswerReader(api)
            for piece in _pieces(raw, rng, most) if most > 1 else [bytes([b]) for b in raw]:
                reader.feed(piece)
            assert reader.close() == whole, (api, most)


def test_an_answer_not_of_its_shape_raises_at_its_end_as_a_whole_one_does() -> None:
    with pytest.raises(SHAPE_ERRORS) as whole:
        response_facts(CHAT, True, NOT_ITS_SHAPE)
    reader = AnswerReader(CHAT)
    half = len(NOT_ITS_SHAPE) // 2
    reader.feed(NOT_ITS_SHAPE[:half])
    reader.feed(NOT_ITS_SHAPE[half:])  # the error is kept, never raised into the relay
    with pytest.raises(SHAPE_ERRORS) as pieces:
        reader.close()
    assert type(pieces.value) is type(whole.value)


async def test_a_stream_of_many_batches_is_recorded_as_read_whole(loopback, tmp_path: Path
                                                                  ) -> None:
    """A stream several read batches long, in pieces that cut its events anywhere, each
    written once the agent got the one before (so the proxy reads them one by one and its
    last batch is a part, not a whole): the agent gets the bytes unchanged, and the
    record's ``out`` (no usage: its events counted) is the whole answer's. A batch lost,
    read twice or cut wrong would count other events."""
    raw = _sse([*(_chunk(f"w{k} ") for k in range(1_500)),
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]) + \
        b"data: [DONE]\n\n"
    pieces = _pieces(raw, random.Random(7), 777)
    whole = response_facts(CHAT, True, raw)
    assert len(raw) > 4 * READ_BATCH_BYTES and whole.output_events == 1_500
    assert len(pieces[-1]) < READ_BATCH_BYTES  # the last batch's end: read at the relay's
    got = bytearray()
    progress = asyncio.Condition()

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        end = 0
        for piece in pieces:
            await resp.write(piece)
            end += len(piece)
            async with progress:
                await progress.wait_for(lambda end=end: len(got) >= end)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    upstream = await loopback(app)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
            async for chunk in resp.content.iter_any():
                got.extend(chunk)
                async with progress:
                    progress.notify_all()
        assert bytes(got) == raw
        async with asyncio.timeout(BOUND_S):
            while proxy.captured < 1:
                await asyncio.sleep(POLL_S)
    ((request,),) = [d["requests"] for d in read_capture(tmp_path)]
    assert request["out"] == 1_500
