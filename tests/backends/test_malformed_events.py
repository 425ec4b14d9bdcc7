"""A stream event whose JSON has the wrong shape (a choice that is null, choices that
are a string, token ids that are a number ...) is that request's error, at once, on
both HTTP clients and every token backend; the run goes on and no traceback reaches
the console. Before, such an event raised inside the HTTP/1 client's parse callback:
asyncio printed a traceback per read, the request hung until the stream idle timeout
and its record blamed a missing usage block (docs/wire-protocols.md, "Malformed events").
"""

from __future__ import annotations

import asyncio
import json
import logging

import orjson
import pytest
from aiohttp import web
from loopback import serve_app

from workbench.config import RunConfig
from workbench.executors.dispatch import run_async

TRACE = "id,arrival_time,input_len,output_len\nr1,0,100,4\nr2,0,120,4\n"

#: one event of the wrong shape, sent between a good first event and the usage block
SHAPES: dict[str, bytes] = {
    "choice null": b'{"id": "c", "choices": [null]}',
    "choices a string": b'{"id": "c", "choices": "abc"}',
    "choices an object": b'{"id": "c", "choices": {"a": 1}}',
    "token ids a number": b'{"id": "c", "choices": [{"index": 0, "token_ids": 5, "text": "x"}]}',
    "delta null": b'{"id": "c", "choices": [{"index": 0, "delta": null}]}',
    "meta_info a list": b'{"text": "x", "output_ids": [1], "meta_info": [1]}',
    "output_ids a number": b'{"text": "x", "output_ids": 5, "meta_info": {"id": "c"}}',
}

CHOICES = ("choice null", "choices a string", "choices an object")
#: the shapes each backend reads (another backend's fields are not its business: ok)
BREAKS: dict[str, tuple[str, ...]] = {
    "openai": (*CHOICES, "token ids a number"),
    "vllm-tokens": (*CHOICES, "token ids a number"),
    "openai-chat": CHOICES,  # a null delta is a chunk without content
    "sglang-tokens": ("meta_info a list", "output_ids a number"),
}


def _good(backend: str, last: bool) -> dict:
    reason = "length" if last else None
    if backend == "sglang-tokens":
        meta = {"id": "c", "finish_reason": {"type": "length"} if last else None,
                "prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 0}
        return {"text": "x", "output_ids": [7], "meta_info": meta}
    if backend == "openai-chat":
        return {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"},
                                        "finish_reason": reason}]}
    return {"id": "c", "choices": [{"index": 0, "text": "x", "token_ids": [7],
                                    "finish_reason": reason}]}


def _app(backend: str, bad: bytes) -> web.Application:
    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for doc in (orjson.dumps(_good(backend, False)), bad, orjson.dumps(_good(backend, True))):
            await resp.write(b"data: " + doc + b"\n\n")
        usage = {"id": "c", "choices": [], "usage": {
            "prompt_tokens": 5, "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0}}}
        await resp.write(b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    for route in ("/v1/completions", "/v1/chat/completions", "/inference/v1/generate",
                  "/generate"):
        app.router.add_post(route, complete)
    return app


@pytest.mark.parametrize("http", ["httptools", "aiohttp"])
@pytest.mark.parametrize("backend", ["openai", "openai-chat", "vllm-tokens", "sglang-tokens"])
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_malformed_event_is_the_requests_error_at_once(
        tmp_path, caplog, shape, backend, http):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    async with serve_app(_app(backend, SHAPES[shape])) as url:
        cfg = RunConfig.from_dict({
            "trace": str(trace), "target": url, "out_dir": str(tmp_path), "run_id": "r",
            "arrival": {"mode": "saturated", "stream_idle_timeout_s": 600,
                        "request_timeout_s": 600},
            "backend": {"name": backend, "preflight": False, "flush_cache": False,
                        "scrape_interval_s": 0},
            "executor": {"http": http},
        })
        async with asyncio.timeout(60):  # a hang would wait for the 600 s idle timeout
            result = await run_async(cfg)
    records = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(result.records) == 2
    for rec in records:
        if shape in BREAKS[backend]:
            assert rec["status"] == "error", rec
            assert rec["error"].startswith("malformed event from the server ("), rec["error"]
        else:
            assert (rec["status"], rec["error"]) == ("ok", None)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
async def test_a_whole_answer_of_the_wrong_shape_is_the_requests_error(tmp_path, caplog,
                                                                        backend):
    """The same with ``backend.stream: false``: one JSON answer whose choice is null."""
    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "c", "choices": [None], "usage": {
            "prompt_tokens": 5, "completion_tokens": 2}})

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    async with serve_app(app) as url:
        cfg = RunConfig.from_dict({
            "trace": str(trace), "target": url, "out_dir": str(tmp_path), "run_id": "r",
            "arrival": {"mode": "saturated", "request_timeout_s": 600},
            "backend": {"name": backend, "preflight": False, "flush_cache": False,
                        "scrape_interval_s": 0, "stream": False},
        })
        async with asyncio.timeout(60):
            result = await run_async(cfg)
    assert len(result.records) == 2
    for rec in result.records:
        assert rec.status == "error"
        assert rec.error.startswith("malformed event from the server (AttributeError"), rec.error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
