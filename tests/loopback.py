"""One way for a test to serve an aiohttp app: ``async with serve_app(app) as url``.

The server binds 127.0.0.1 on a port the OS picks (never a fixed one, so parallel
workers cannot collide) and is torn down on exit, in-flight handlers included
(``shutdown_timeout`` short: a test's handlers stream or wait, none needs a grace
period). ``url`` is ``http://127.0.0.1:PORT`` (``https`` with ``ssl_context``). The
``loopback`` fixture (tests/conftest.py) starts as many as a test asks for and stops
them after it.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable

from aiohttp import web

#: what ``serve_app`` takes: an app, or the route definitions of one
#: (``[web.post("/v1/completions", handler)]``)
App = web.Application | Iterable[web.AbstractRouteDef]


def as_app(app: App) -> web.Application:
    """``app`` itself, or a new application with the given routes."""
    if isinstance(app, web.Application):
        return app
    built = web.Application()
    built.add_routes(list(app))
    return built


@contextlib.asynccontextmanager
async def serve_app(app: App, *, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at an ephemeral port; yield its base URL."""
    runner = web.AppRunner(as_app(app), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        port = runner.addresses[0][1]
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
