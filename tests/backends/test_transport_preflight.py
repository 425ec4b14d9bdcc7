"""Prefix-cache preflight against a scripted completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from loopback import serve_app

from workbench.backends import BACKENDS, BackendError
from workbench.backends.preflight import preflight_prefix_cache
from workbench.backends.transport import Transport, TransportOptions

LIMIT = 10.0


class FakeVLLM:
    """Caches whole prompts it has seen; knobs turn the cache or its telemetry off."""

    def __init__(self, cache: bool = True, details: bool = True, max_len: int = 1 << 20):
        self.cache, self.details, self.max_len = cache, details, max_len
        self.seen: set[tuple[int, ...]] = set()
        self.prompts: list[list[int]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["prompt"]
        self.prompts.append(prompt)
        if len(prompt) > self.max_len:
            return web.Response(status=400, text="maximum context length exceeded")
        key = tuple(prompt)
        cached = (len(prompt) - 1) // 32 * 32 if self.cache and key in self.seen else 0
        self.seen.add(key)
        usage: dict[str, Any] = {"prompt_tokens": len(prompt), "completion_tokens": 1}
        if self.details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        choice = {"index": 0, "token_ids": [9], "finish_reason": "length"}
        for obj in ({"id": "c", "choices": [choice]}, {"id": "c", "choices": [], "usage": usage}):
            await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def transport_for(server: FakeVLLM) -> AsyncIterator[Transport]:
    async with (
        serve_app([web.post("/v1/completions", server.handle)]) as url,
        Transport(TransportOptions(base_url=url)) as t,
    ):
        yield t


POOL = list(range(1000, 11000))


async def test_preflight_passes_and_uses_the_pool_tail():
    server = FakeVLLM()
    async with asyncio.timeout(LIMIT), transport_for(server) as t:
        result = await preflight_prefix_cache(t, BACKENDS.get("openai"), POOL)
    assert result.probe_tokens == 8192
    assert server.prompts[0] == POOL[-8192:] == server.prompts[1]
    assert result.first["cached_tokens"] == 0
    assert result.cached_tokens == 8160
    assert result.prompt_tokens == 8192
    assert result.second["completion_tokens"] == 1
    assert orjson.loads(orjson.dumps(result.__dict__))["cached_tokens"] == 8160


async def test_preflight_fails_naming_prefix_caching_flag():
    async with asyncio.timeout(LIMIT), transport_for(FakeVLLM(cache=False)) as t:
        with pytest.raises(BackendError, match="--enable-prefix-caching"):
            await preflight_prefix_cache(t, BACKENDS.get("openai"), POOL, probe_tokens=512)


async def test_preflight_fails_naming_prompt_tokens_details_flag():
    async with asyncio.timeout(LIMIT), transport_for(FakeVLLM(details=False)) as t:
        with pytest.raises(BackendError, match="--enable-prompt-tokens-details"):
            await preflight_prefix_cache(t, BACKENDS.get("openai"), POOL, probe_tokens=512)


async def test_preflight_halves_a_probe_longer_than_the_context():
    server = FakeVLLM(max_len=3000)
    async with asyncio.timeout(LIMIT), transport_for(server) as t:
        result = await preflight_prefix_cache(t, BACKENDS.get("openai"), POOL)
    assert result.probe_tokens == 2048
    assert server.prompts[-1] == POOL[-2048:]


async def test_preflight_reports_a_failed_probe():
    server = FakeVLLM(max_len=100)
    async with asyncio.timeout(LIMIT), transport_for(server) as t:
        with pytest.raises(BackendError, match="probe failed: HTTP 400"):
            await preflight_prefix_cache(t, BACKENDS.get("openai"), POOL, probe_tokens=512)
