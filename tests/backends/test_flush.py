"""Independent checks of ``backends/flush.py`` against servers nobody showed the authors.

A refusal that is not "busy" (wrong key, a proxy's 403, a 500) is not retried and
is not worded as running requests holding blocks; busy answers (vLLM's 200
``success: false``, SGLang's 400, the embedded engine's 409) are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from loopback import serve_app

from workbench.backends.flush import flush_prefix_cache


@contextlib.asynccontextmanager
async def server(status: int, body: str) -> AsyncIterator[tuple[str, list[str]]]:
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(status=status, text=body)

    async with serve_app([web.post("/reset_prefix_cache", handle),
                          web.post("/flush_cache", handle)]) as url:
        yield url, seen


@pytest.mark.parametrize(("status", "body"), [(401, '{"error": "invalid api key"}'),
                                              (403, "Forbidden"), (500, "boom")])  # fmt: skip
async def test_a_refusal_that_is_not_busy_is_said_as_such_and_not_retried(status: int, body: str):
    async with asyncio.timeout(10), server(status, body) as (url, seen):
        out = await flush_prefix_cache(url, retry_s=0.01)
    assert not out.ok and out.status == status
    assert len(seen) == 1, seen
    assert out.detail is not None and f"HTTP {status}" in out.detail
    assert "requests still hold cache blocks" not in out.detail, out.detail


@pytest.mark.parametrize(("status", "body"), [(200, '{"success": false}'), (400, "busy"),
                                              (409, '{"success": false}')])  # fmt: skip
async def test_a_busy_refusal_is_retried(status: int, body: str):
    async with asyncio.timeout(10), server(status, body) as (url, seen):
        out = await flush_prefix_cache(url, retries=2, retry_s=0.01)
    assert not out.ok and len(seen) == 3
    assert out.detail is not None and "requests still hold cache blocks" in out.detail


@pytest.mark.parametrize("salt", [""])
def test_an_empty_token_salt_is_refused_not_silently_unsalted(salt: str):
    from workbench.config import RunConfig
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"backend\.token_salt .* empty"):
        RunConfig.from_dict({"backend": {"token_salt": salt}})


async def test_a_run_flushes_with_its_own_credentials_from_the_target_url(tmp_path, loopback):
    """The reset goes out with the run's Authorization (the URL's user:password as Basic,
    as every request of the run), not only with an environment key."""
    import base64

    seen, result = await _run_with_a_reset_server(
        tmp_path, loopback, userinfo="user:s3cret@", options={})
    assert [h.get("Authorization") for h in seen] == [
        "Basic " + base64.b64encode(b"user:s3cret").decode()]
    assert result.manifest.cache_flush["ok"] is True


async def test_the_reset_carries_the_users_headers(tmp_path, loopback):
    """A gateway that routes or authorizes on a header of the user's (``--header``) sees
    it on the reset too, not only on the requests (the reset reached no server before)."""
    seen, result = await _run_with_a_reset_server(
        tmp_path, loopback, options={"headers": {"x-route-to": "pool-b"}})
    assert [h.get("x-route-to") for h in seen] == ["pool-b"]
    assert result.manifest.cache_flush["ok"] is True


async def _run_with_a_reset_server(tmp_path, loopback, *, options, userinfo=""):
    """A one-request run with ``flush_cache`` against a server that only resets: the
    headers each reset carried, and the run's result."""
    import workbench as wb

    seen: list[dict[str, str]] = []

    async def reset(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"success": True})

    url = await loopback([web.post("/reset_prefix_cache", reset)])
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n0,0,8,1\n")
    result = await wb.run_async({
        "trace": {"path": str(trace), "format": "independent"},
        "target": url.replace("http://", "http://" + userinfo),
        "backend": {"name": "openai", "preflight": False, "flush_cache": True,
                    "scrape_interval_s": None, "options": options},
    })  # fmt: skip
    return seen, result
