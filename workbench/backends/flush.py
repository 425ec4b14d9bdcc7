"""Cache isolation between runs: reset a server's prefix cache before a measured run
(routes, answers and retries: docs/cache-isolation.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from workbench import redact
from workbench.backends.base import BACKENDS
from workbench.backends.transport import normalize_base_url, with_query

if TYPE_CHECKING:  # imported when a flush is asked for: a virtual run never needs aiohttp
    import aiohttp

__all__ = ["NOT_ASKED", "FlushOutcome", "flush_prefix_cache"]

ABSENT = frozenset((404, 405))  # the route is not served: try the next one
BUSY = frozenset((400, 409, 503))  # SGLang, the embedded engine, a server not ready yet
BUSY_RETRIES = 5
BUSY_RETRY_S = 0.5
BODY_EXCERPT = 200
NOT_ASKED = "backend.flush_cache false"  # the detail of a run that did not try


@dataclass
class FlushOutcome:
    """What ``flush_prefix_cache`` did (the run manifest's ``cache_flush``)."""

    attempted: bool = False
    ok: bool = False
    endpoint: str | None = None
    status: int | None = None
    detail: str | None = None
    tries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _confirmed(status: int, body: str) -> str:
    """The verdict of an answer: ``ok``, ``busy`` (retry), ``absent`` (next route), ``failed``."""
    if status in ABSENT:
        return "absent"
    if status in BUSY:
        return "busy"
    if status != 200:
        return "failed"
    stripped = body.strip()
    if stripped.startswith("{"):  # vLLM and the embedded engine: {"success": bool}
        import orjson

        try:
            doc = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            return "failed"
        return "busy" if isinstance(doc, dict) and doc.get("success") is False else "ok"
    return "ok"  # SGLang: 200 means flushed


async def flush_prefix_cache(
    base_url: str,
    *,
    backend: str = "openai",
    session: aiohttp.ClientSession | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    retries: int = BUSY_RETRIES,
    retry_s: float = BUSY_RETRY_S,
) -> FlushOutcome:
    """Reset the prefix cache of the server at ``base_url``; never raises for HTTP answers
    (``headers``, else ``api_key`` as a bearer token; a busy refusal retried ``retries`` times)."""
    root = normalize_base_url(base_url)
    out = FlushOutcome()
    own = session is None
    if headers is None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    import aiohttp

    from workbench.bodies import BodyError, read_body
    from workbench.bodies import session as bounded_session

    sess = session if session is not None else bounded_session(headers=headers)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        routes = BACKENDS.get(backend).servers.flush_routes
        for route in routes:
            for attempt in range(retries + 1):
                out.attempted = True
                try:
                    async with sess.post(with_query(root + route, base_url),
                                         timeout=timeout) as resp:
                        # at most bodies.ANSWER_MAX, inflated piece by piece
                        status, body = resp.status, (await read_body(resp)).text()
                except (aiohttp.ClientError, TimeoutError, OSError, BodyError) as exc:
                    out.detail = f"POST {route} failed: {type(exc).__name__}: {exc}"
                    out.tries.append({"endpoint": f"POST {route}", "status": None,
                                      "body": redact.excerpt(str(exc), BODY_EXCERPT)})  # fmt: skip
                    return out
                out.endpoint, out.status = f"POST {route}", status
                excerpt = redact.excerpt(body.strip(), BODY_EXCERPT)
                out.tries.append({"endpoint": out.endpoint, "status": status, "body": excerpt})
                verdict = _confirmed(status, body)
                if verdict == "absent":
                    break  # not served here: next route
                if verdict == "ok":
                    out.ok, out.detail = True, None
                    return out
                if verdict == "failed":
                    out.detail = f"the server answered the reset with HTTP {status}: {excerpt!r}"
                    if status in (401, 403):
                        out.detail += " (is backend.api_key_env set to the server's key?)"
                    return out
                out.detail = (
                    f"the server refused the reset (HTTP {status}: {excerpt!r}); "
                    "requests still hold cache blocks"
                )
                if attempt < retries:
                    await asyncio.sleep(retry_s)
            else:
                return out  # refused every time
        out.endpoint = out.status = None
        out.detail = (
            f"the server serves neither {' nor '.join(f'POST {r}' for r in routes)} "
            "(vLLM serves the reset only when started with VLLM_SERVER_DEV_MODE=1)"
        )
        return out
    finally:
        if own:
            await sess.close()
