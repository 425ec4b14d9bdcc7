"""Empty the server's prefix cache between sweep points, so no point inherits another's cache.

One function, ``flush_between_points``. The embedded engine as a ``sim`` target
starts fresh for every run (its cache is empty by construction), and so does
every virtual-time run: nothing to do. A URL target gets an empty-body POST to
its reset endpoint: vLLM's ``/reset_prefix_cache`` (mounted only when the server
runs with ``VLLM_SERVER_DEV_MODE=1``), SGLang's ``/flush_cache``; the embedded
engine's server answers both (docs/sweeps.md). Any 2xx is success; a 404/405
tries the other engine's path. What was done goes into the sweep manifest.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workbench.config import RunConfig

VLLM_RESET = "/reset_prefix_cache"
SGLANG_FLUSH = "/flush_cache"
FLUSH_TIMEOUT_S = 30.0


def reset_paths(cfg: RunConfig) -> tuple[str, ...]:
    """The reset endpoints to try, the backend's own engine first."""
    if cfg.backend.name == "sglang-tokens":
        return SGLANG_FLUSH, VLLM_RESET
    return VLLM_RESET, SGLANG_FLUSH


async def flush_between_points(cfg: RunConfig) -> dict[str, Any]:
    """Flush ``cfg``'s target; returns what was done (``action``, ``ok``, endpoint, status)."""
    if cfg.target.is_sim:
        return {"action": "none", "ok": True,
                "reason": "the embedded engine starts with an empty cache for every run"}
    import aiohttp

    base = cfg.target.url.rstrip("/")
    headers = {}
    key = os.environ.get(cfg.backend.api_key_env) if cfg.backend.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"  # sent, never recorded
    tried: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=FLUSH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        for path in reset_paths(cfg):
            t0 = time.perf_counter()
            try:
                async with session.post(base + path) as resp:
                    body = (await resp.text())[:200]
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                tried.append({"endpoint": path, "error": f"{type(exc).__name__}: {exc}"})
                break
            entry = {"endpoint": path, "status": status, "body": body,
                     "elapsed_ms": round((time.perf_counter() - t0) * 1e3, 2)}
            if 200 <= status < 300:
                return {"action": "posted", "ok": True, **entry}
            tried.append(entry)
            if status not in (404, 405):
                break
    return {
        "action": "posted", "ok": False, "tried": tried,
        "reason": "the server did not reset its prefix cache (vLLM mounts /reset_prefix_cache "
                  "only with VLLM_SERVER_DEV_MODE=1; a 409 means requests still held blocks)",
    }
