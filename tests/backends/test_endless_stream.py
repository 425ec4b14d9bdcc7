"""QA: a stream that never ends an event, or keeps sending after ``[DONE]``, cannot hang a run.

Found by the independent check (issue 12 item 8's rule, "a server that never stops
... is cut at a margin, so the run ends"): the overrun guard counts parsed token
events, so a server streaming bytes that never complete an SSE event (no blank line)
was never cut; the decoder kept every byte (memory without bound) and, bytes still
arriving, the idle timeout never fired. Likewise a server that keeps sending after
``[DONE]`` kept the client reading forever. A real HTTP server here, the client the
run uses.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiohttp import web
from loopback import serve_app

from workbench.backends.overrun import ERROR_CLASS, event_bytes_limit
from workbench.config import RunConfig
from workbench.executors.dispatch import run_async

TRACE_HEADER = "id,arrival_time,input_len,output_len\n"
CHUNK = b"x" * 65536


def _ok_event() -> bytes:
    return (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"a",'
            b'"finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":1}}\n\n')


@contextlib.asynccontextmanager
async def _hostile(mode: str):
    sent = {"bytes": 0}

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = CHUNK
        if mode == "endless-event":
            await resp.write(b'data: {"choices":[{"text":"')
        elif mode in TOKENLESS:
            chunk = TOKENLESS[mode] * (len(CHUNK) // len(TOKENLESS[mode]))
        else:  # a correct response, then bytes forever after [DONE]
            await resp.write(_ok_event() + b"data: [DONE]\n\n")
        try:
            for _ in range(100_000):  # bounded: 6.5 GB at most, the client cuts far earlier
                await resp.write(chunk)
                sent["bytes"] += len(chunk)
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            pass
        return resp

    routes = [web.post(path, completions) for path in ("/v1/completions", "/v1/chat/completions")]
    async with serve_app(routes) as url:
        yield url, sent


TOKENLESS = {
    "no-choices": b'data: {"id":"c","object":"text_completion","choices":[]}\n\n',
    "empty-delta": (b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
                    b'"delta":{"content":""}}]}\n\n'),
    "keepalive": b": keepalive\n\n",
}


def _cfg(tmp_path, url, backend="openai"):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEADER + "a,0,8,1\n")
    return RunConfig.from_dict({
        "trace": str(trace), "target": url,
        "backend": {"name": backend, "preflight": False},
        "arrival": {"mode": "saturated"},
    })  # fmt: skip


def test_event_bytes_limit_scales_with_the_request():
    assert event_bytes_limit(8, 1) == 1 << 20  # a floor for small requests
    assert event_bytes_limit(1_000_000, 1000) > 1_000_000 * 8  # room for an echoed prompt


async def test_an_event_that_never_ends_is_cut(tmp_path):
    async with _hostile("endless-event") as (url, sent):
        async with asyncio.timeout(60):
            result = await run_async(_cfg(tmp_path, url))
    (rec,) = result.records
    assert rec.status == "error" and rec.error.startswith(ERROR_CLASS), rec.error
    assert "without ending an event" in rec.error
    assert rec.extra["output_overrun"]["cut"] is True
    assert sent["bytes"] < 100_000 * len(CHUNK)


@pytest.mark.parametrize("mode", ["after-done"])
async def test_bytes_after_done_do_not_keep_the_client_reading(tmp_path, mode):
    async with _hostile(mode) as (url, sent):
        async with asyncio.timeout(60):
            result = await run_async(_cfg(tmp_path, url))
    (rec,) = result.records
    assert rec.status == "ok", rec.error  # the response had ended; what follows is ignored
    assert rec.completion_tokens == 1
    assert sent["bytes"] < 100_000 * len(CHUNK)


@pytest.mark.parametrize(("mode", "backend"), [
    ("no-choices", "openai"), ("empty-delta", "openai-chat"), ("keepalive", "openai"),
    ("keepalive", "openai-chat"),
])
async def test_events_that_never_carry_a_token_are_cut(tmp_path, mode, backend):
    """Events (or SSE comments) that carry no token keep the idle timeout from firing and
    the token count from moving: without a request timeout (the default) the run hung."""
    async with _hostile(mode) as (url, sent):
        async with asyncio.timeout(60):
            result = await run_async(_cfg(tmp_path, url, backend))
    (rec,) = result.records
    assert rec.status == "error" and rec.error.startswith(ERROR_CLASS), rec.error
    assert "without a token" in rec.error
    assert sent["bytes"] < 100_000 * len(CHUNK)
