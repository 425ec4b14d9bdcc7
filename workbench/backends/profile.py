"""``backend.profile``: the engine's profiler started and stopped around the measured window
(docs/real-engines.md, "Profiling").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from workbench import redact
from workbench.backends.base import BACKENDS
from workbench.backends.transport import normalize_base_url, with_query
from workbench.bodies import BodyError, read_body
from workbench.bodies import session as bounded_session
from workbench.errors import ConfigError
from workbench.plurals import counted

START, STOP = "/start_profile", "/stop_profile"
BODY_EXCERPT = 300
#: a profiler flushes its trace on stop: minutes for a large model (vLLM's docs)
STOP_TIMEOUT_S = 1800.0
#: after the stop, how long to wait for the trace files to show up in ``profile_dir``
FILES_WAIT_S = 60.0


async def _post(base_url: str, route: str, headers: Mapping[str, str],
                body: Mapping[str, Any] | None, timeout_s: float) -> dict[str, Any]:
    root = normalize_base_url(base_url)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with bounded_session(headers=dict(headers)) as sess:
        try:
            async with sess.post(with_query(root + route, base_url), json=body,
                                 timeout=timeout) as resp:
                text = (await read_body(resp)).text()  # bounded (bodies.py)
                return {"endpoint": f"POST {route}", "status": resp.status,
                        "body": redact.excerpt(text.strip(), BODY_EXCERPT)}
        except (aiohttp.ClientError, TimeoutError, OSError, BodyError) as exc:
            return {"endpoint": f"POST {route}", "status": None,
                    "body": redact.excerpt(f"{type(exc).__name__}: {exc}", BODY_EXCERPT)}


class Profiler:
    """One run's profile window: ``start`` (``ConfigError`` when refused), ``stop``."""

    def __init__(self, base_url: str, backend: str, headers: Mapping[str, str],
                 profile_dir: str | None) -> None:
        self.base_url, self.backend, self.headers = base_url, backend, dict(headers)
        self.dir = profile_dir
        self.started_at: float | None = None
        self.info: dict[str, Any] = {"dir": profile_dir, "files": []}

    async def start(self) -> None:
        field = BACKENDS.get(self.backend).servers.profile_dir_field
        body = {field: self.dir} if self.dir and field else None
        self.started_at = time.time()
        answer = await _post(self.base_url, START, self.headers, body, 60.0)
        self.info["start"] = answer
        if answer["status"] != 200:
            raise ConfigError(
                f"backend.profile: the server answered {answer['endpoint']} with "
                f"{answer['status'] or 'no HTTP answer'}: {answer['body']!r}. Start vLLM with "
                "--profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": DIR}' "
                "(VLLM_TORCH_PROFILER_DIR=DIR before v0.13), or SGLang (serves the route); "
                "or drop --profile (docs/real-engines.md, 'Profiling')")

    async def stop(self) -> dict[str, Any]:
        if self.started_at is None:
            return self.info
        self.info["stop"] = await _post(self.base_url, STOP, self.headers, None,
                                        STOP_TIMEOUT_S)
        self.info["files"] = await self._new_files()
        self.info["where"] = self._where()
        return self.info

    async def _new_files(self) -> list[str]:
        """Files under ``dir`` written since the start (bounded wait for the first)."""
        if not self.dir or not Path(self.dir).is_dir():
            return []
        deadline = time.monotonic() + FILES_WAIT_S
        while True:  # bounded: the deadline
            found = [str(p) for p in sorted(Path(self.dir).rglob("*"))
                     if p.is_file() and p.stat().st_mtime >= (self.started_at or 0) - 1]
            if found or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(0.5)

    def _where(self) -> str:
        files = self.info["files"]
        if files:
            return f"{counted(len(files), 'trace file')} in {self.dir}"
        if self.dir:
            return (f"no new file in {self.dir} (on this host) within {FILES_WAIT_S:g} s of "
                    "the stop: the server may write elsewhere, or later")
        return ("the server's own profiler directory (give backend.profile_dir, the "
                "directory it was started with, to have the files listed)")
