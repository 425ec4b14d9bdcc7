"""What a run is played against: a ``Target`` (``HttpTarget``: a URL or ``sim`` behind HTTP;
``engine_target.EngineTarget``: the engine in this process, virtual time). Each gives
where requests go, the cache flush, the sampler, its block size and its manifest
``facts``, so the session and executors never ask which kind they have."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from workbench import redact
from workbench.backends.flush import FlushOutcome, flush_prefix_cache
from workbench.clock import Clock
from workbench.config import RunConfig
from workbench.errors import WorkbenchError
from workbench.redact import strip_url_credentials

log = logging.getLogger(__name__)


class Sampler(Protocol):
    """The server's counters on an interval (``backend.scrape_interval_s``), into ``timeline``."""

    timeline: list[dict[str, Any]]

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, Any] | None:
        """The manifest's ``metrics_scrape`` (None: nothing beyond the engine's series)."""
        ...


class Target(Protocol):
    #: the server's root URL ("" for the engine in this process: no request has a URL)
    base_url: str
    #: the prefix-cache preflight is worth running against it (a real server)
    preflight: bool

    def facts(self) -> dict[str, Any] | None:
        """The manifest's ``target`` (None: the prologue's ``engine`` says it all)."""

    async def flush(self, mode: bool | str, backend: str, headers: Mapping[str, str]
                    ) -> FlushOutcome:
        """Reset the prefix cache (``backend.flush_cache``; ``mode`` is never False here)."""

    async def block_size(self, headers: Mapping[str, str] | None = None) -> int | None:
        """The server's KV block size, when it can be known (``headers``: the run's
        credentials, for a server that guards ``/metrics``)."""

    def sampler(self, cfg: RunConfig, clock: Clock,
                headers: Mapping[str, str] | None = None) -> Sampler | None:
        """The server sampling of ``backend.scrape_interval_s`` (None: off)."""

    def open(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Start what the target needs (a server, an engine) for the run's duration."""


class HttpTarget:
    """A server at ``target.url``, or the embedded engine behind HTTP (``sim``: in this
    process or, ``target.in_process`` false, its own); the URL kept has no ``user:password@``."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.base_url = ""
        self.kind = "sim" if cfg.target.is_sim else "url"
        self.preflight = self.kind != "sim"
        self.engine: dict[str, Any] | None = None
        self.engine_process: dict[str, Any] | None = None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[HttpTarget]:
        t = self.cfg.target
        if t.is_sim and not t.in_process:
            from workbench.sim.process import serve_sim_process

            async with serve_sim_process(**t.engine) as proc:
                self.base_url, self.engine = proc.base_url, proc.config
                self.engine_process = {"pid": proc.pid, "own_process": True}
                yield self
        elif t.is_sim:
            from workbench.sim.server import serve_sim

            async with serve_sim(**t.engine) as handle:
                self.base_url, self.engine = handle.base_url, _engine_info(handle)
                self.engine_process = {"pid": None, "own_process": False}
                yield self
        else:
            self.base_url = strip_url_credentials(t.url).rstrip("/")
            yield self

    def facts(self) -> dict[str, Any]:
        """Where the run went; the URL as stored: no user:password@, no query value."""
        out = {"base_url": redact.safe_url(self.base_url), "kind": self.kind,
               "engine": self.engine}
        if self.engine_process is not None:
            out["engine_process"] = self.engine_process
        return out

    async def flush(self, mode: bool | str, backend: str, headers: Mapping[str, str]
                    ) -> FlushOutcome:
        return await flush_prefix_cache(self.base_url, backend=backend, headers=headers)

    async def block_size(self, headers: Mapping[str, str] | None = None) -> int | None:
        if (self.engine or {}).get("block_size"):
            return int((self.engine or {})["block_size"])
        # imported here: it loads the HTTP client, which a virtual run never does
        from workbench.backends.scrape import detect_block_size

        try:
            return await detect_block_size(self.base_url, headers=headers)
        except (TimeoutError, WorkbenchError, OSError) as exc:
            log.info("block size not detected: %s", exc)
            return None

    def sampler(self, cfg: RunConfig, clock: Clock,
                headers: Mapping[str, str] | None = None) -> Sampler | None:
        b = cfg.backend
        if not b.scrape_interval_s:
            return None
        from workbench.backends.scrape import MetricsScraper

        return MetricsScraper(self.base_url, b.scrape_interval_s, clock,
                              extra_urls=b.metrics_urls, patterns=b.metrics_series,
                              headers=headers)


def _engine_info(handle: Any) -> dict[str, Any]:
    config = getattr(handle, "config", None)
    if config is not None and dataclasses.is_dataclass(config) and not isinstance(config, type):
        plain = (str, int, float, bool, type(None), list, dict)
        return {k: v for k, v in dataclasses.asdict(config).items() if isinstance(v, plain)}
    return {}
