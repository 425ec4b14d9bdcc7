"""A tiny OpenAI-completions server that echoes every request's headers, URL and body fields.

What a header-echoing proxy or a debugging gateway does: the echo goes into the
error body of every other completion (HTTP 500), into the ``id`` of the others
(HTTP 200 streams, which records keep as ``server_request_id``), and into the
401 answer to the prefix-cache reset (the cache-flush note). Binds 127.0.0.1 only.
Used by the redaction tests (tests/cli/test_secret_sources.py).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web
from loopback import serve_app


def echo_of(request: web.Request, body: dict[str, Any] | None = None) -> str:
    """Every header (``Name: value``), the URL with its query, the body's small fields."""
    lines = [f"{k}: {v}" for k, v in request.headers.items()]
    lines.append(f"url: {request.url}")
    for k, v in (body or {}).items():
        if k not in ("prompt", "messages", "token_ids", "input_ids"):
            lines.append(f"body {k}: {orjson.dumps(v).decode()}")
    return "\n".join(lines)


class EchoServer:
    """``async with EchoServer() as s``: ``s.base_url``; ``s.requests`` counts completions."""

    def __init__(self) -> None:
        self.requests = 0
        self.seen: list[str] = []  # the path (and query) of every request, in order
        self.authorizations: list[str | None] = []  # each completion's Authorization
        self._n = itertools.count()
        self._server = contextlib.AsyncExitStack()
        self.base_url = ""

    async def __aenter__(self) -> EchoServer:
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/reset_prefix_cache", self._reset)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.middlewares.append(self._log)
        self.base_url = await self._server.enter_async_context(serve_app(app))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.aclose()

    @web.middleware
    async def _log(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.seen.append(request.path_qs)
        return await handler(request)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "echo"}], "echo": echo_of(request)})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="# no metrics\n")

    async def _reset(self, request: web.Request) -> web.Response:
        return web.Response(status=401, text=f"unauthorized; you sent\n{echo_of(request)}")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests += 1
        self.authorizations.append(request.headers.get("Authorization"))
        echo = echo_of(request, body)
        if next(self._n) % 2:
            return web.Response(status=500, text=f"upstream failed for\n{echo}")
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = {"id": echo, "choices": [{"index": 0, "text": "x", "token_ids": [7] * n,
                                          "finish_reason": "length"}]}
        usage = {"id": echo, "choices": [], "usage": {
            "prompt_tokens": len(body.get("prompt") or []), "completion_tokens": n}}
        for chunk in (first, usage):
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[EchoServer]:
    async with EchoServer() as server:
        yield server
