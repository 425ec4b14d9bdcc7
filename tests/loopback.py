"""One way for a test to serve an aiohttp app: ``async with serve_app(app) as url``.

The server binds 127.0.0.1 on a port the OS picks (never a fixed one, so parallel
workers cannot collide) and is torn down on exit, in-flight handlers included
(``shutdown_timeout`` short: a test's handlers stream or wait, none needs a grace
period). ``url`` is ``http://127.0.0.1:PORT`` (``https`` with ``ssl_context``). The
``loopback`` fixture (tests/conftest.py) starts as many as a test asks for and stops
them after it.

``serve_raw(handle)`` is the same for a test that must write the bytes of a response
itself (a malformed head, a framing, a connection dropped mid-request): a bare TCP
server running ``handle(reader, writer)`` per connection; ``read_request`` reads one
request off it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import pytest
from aiohttp import web

#: what ``serve_app`` takes: an app, or the route definitions of one
#: (``[web.post("/v1/completions", handler)]``)
App = web.Application | Iterable[web.AbstractRouteDef]


async def stream_body(request: web.Request, body: bytes) -> web.StreamResponse:
    """Answer ``request`` (read whole) with ``body`` as an event stream (chunked)."""
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(body)
    await resp.write_eof()
    return resp


def as_app(app: App) -> web.Application:
    """``app`` itself, or a new application with the given routes."""
    if isinstance(app, web.Application):
        return app
    built = web.Application()
    built.add_routes(list(app))
    return built


@contextlib.asynccontextmanager
async def serve_app(app: App, *, ssl_context: ssl.SSLContext | None = None,
                    keepalive_timeout: float | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at an ephemeral port; yield its base URL.
    ``keepalive_timeout``: the server closes a connection idle that long (s; aiohttp's
    default otherwise)."""
    kw = {} if keepalive_timeout is None else {"keepalive_timeout": keepalive_timeout}
    runner = web.AppRunner(as_app(app), access_log=None, shutdown_timeout=0.1, **kw)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        port = runner.addresses[0][1]
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


#: one connection of a raw server: ``handle(reader, writer)``
RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: how long a raw server's close may wait for its connections' handlers
CLOSE_WAIT_S = 5.0


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (head + Content-Length body) off a raw connection; its head."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return head


@contextlib.asynccontextmanager
async def serve_raw(handle: RawHandler) -> AsyncIterator[str]:
    """A bare TCP server on 127.0.0.1 at an ephemeral port; yield ``http://127.0.0.1:PORT``.

    ``handle`` runs once per connection; a client that goes away mid-read
    (``IncompleteReadError``, ``ConnectionError``) ends it quietly, and the connection
    is closed after it. On exit the server stops accepting and waits (at most
    ``CLOSE_WAIT_S``) for its handlers."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await server.wait_closed()


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A key and a self-signed certificate for localhost and 127.0.0.1 under ``tmp``, made
    by ``openssl`` (the test skips where it is missing)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert
