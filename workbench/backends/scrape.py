"""Server-side metrics: scrape ``GET {root}/metrics`` (Prometheus text) on an interval.

The client sees per-request ``cached_tokens``; the server's counters show the
whole picture (window hit rate = Δhits / Δqueries, KV usage, queue depth,
preemptions). Only the series named in docs/wire-protocols.md are kept, summed over label sets
(engines, cache sources) except for ratios, which are averaged. The text is
pre-filtered to those series before ``prometheus_client``'s parser sees it: a
vLLM page is mostly histograms we do not need.

llama.cpp's ``llama-server --metrics`` counts prompt tokens *excluding* cached ones
(``llamacpp:prompt_tokens_total``) beside the cached ones
(``llamacpp:prompt_tokens_cached_total``); their sum is kept as the derived series
``llamacpp:prompt_tokens_with_cached_total`` (a workbench name, not the server's), so
its window hit rate is Δcached / Δwith_cached like the other engines' Δhits / Δqueries.

``vllm:cache_config_info`` is a constant-1 gauge whose *labels* carry the cache
configuration (``block_size``, ``num_gpu_blocks``, ...); it is how the block size
is detected. A failed scrape is logged and recorded as a timeline row with an
``error``; it never stops a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from workbench.backends.transport import normalize_base_url, with_query
from workbench.clock import Clock, WallClock

__all__ = ["MetricsScraper", "detect_block_size", "parse_metrics"]

logger = logging.getLogger(__name__)

CACHE_CONFIG = "vllm:cache_config_info"
VLLM_SERIES = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
SGLANG_SERIES = (
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:cached_tokens_total",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:num_retracted_requests_total",
)
LLAMACPP_PROMPT = "llamacpp:prompt_tokens_total"  # processed, cached ones excluded
LLAMACPP_CACHED = "llamacpp:prompt_tokens_cached_total"
LLAMACPP_WITH_CACHED = "llamacpp:prompt_tokens_with_cached_total"  # derived: the sum of both
LLAMACPP_SERIES = (
    LLAMACPP_PROMPT,
    LLAMACPP_CACHED,
    "llamacpp:tokens_predicted_total",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:kv_cache_usage_ratio",
)
SERIES = frozenset((*VLLM_SERIES, *SGLANG_SERIES, *LLAMACPP_SERIES, CACHE_CONFIG))
AVERAGED = frozenset((
    "vllm:kv_cache_usage_perc", "sglang:token_usage", "sglang:cache_hit_rate",
    "llamacpp:kv_cache_usage_ratio",
))  # fmt: skip


def _wanted_lines(text: str) -> str:
    keep = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in SERIES:
            keep.append(line)
    keep.append("")
    return "\n".join(keep)


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, str] | None]:
    """Prometheus text → (series values, ``vllm:cache_config_info`` labels or None)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    cache_config: dict[str, str] | None = None
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            if sample.name == CACHE_CONFIG:
                cache_config = dict(sample.labels)
                continue
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            counts[sample.name] = counts.get(sample.name, 0) + 1
    for name in AVERAGED.intersection(sums):
        sums[name] /= counts[name]
    if LLAMACPP_PROMPT in sums and LLAMACPP_CACHED in sums:
        sums[LLAMACPP_WITH_CACHED] = sums[LLAMACPP_PROMPT] + sums[LLAMACPP_CACHED]
    return sums, cache_config


async def _fetch(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        if resp.status != 200:
            body = (await resp.text(errors="replace")).strip()[:200]
            raise RuntimeError(f"HTTP {resp.status} from {url}: {body}")
        return await resp.text(errors="replace")


async def detect_block_size(
    base_url: str, *, session: aiohttp.ClientSession | None = None, timeout_s: float = 5.0
) -> int | None:
    """The server's KV block size from ``vllm:cache_config_info``; None if unknown."""
    url = with_query(f"{normalize_base_url(base_url)}/metrics", base_url)
    try:
        if session is None:
            async with aiohttp.ClientSession() as own:
                text = await _fetch(own, url, timeout_s)
        else:
            text = await _fetch(session, url, timeout_s)
        _, config = parse_metrics(text)
        if config is None or "block_size" not in config:
            return None
        return int(float(config["block_size"]))
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError) as exc:
        logger.warning("block size detection via %s failed: %s", url, exc)
        return None


class MetricsScraper:
    """Scrapes ``/metrics`` every ``interval_s`` into ``timeline`` while started.

    Rows are ``{"t_ns": ..., series: value, ...}`` on the given clock (the run's
    clock, so rows line up with request timestamps), or ``{"t_ns", "error"}``.
    """

    def __init__(
        self,
        base_url: str,
        interval_s: float = 1.0,
        clock: Clock | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = with_query(f"{normalize_base_url(base_url)}/metrics", base_url)
        self.interval_ns = max(1, round(interval_s * 1e9))
        self.clock: Clock = clock if clock is not None else WallClock()
        self.timeout_s = timeout_s
        self.timeline: list[dict[str, Any]] = []
        self.cache_config: dict[str, str] | None = None
        self.failures = 0
        self._session = session
        self._own_session = session is None
        self._task: asyncio.Task[None] | None = None

    async def scrape_once(self) -> dict[str, Any]:
        """One scrape: a row with ``t_ns`` and the series; ``error`` instead if it failed.

        The row also has ``cache_config`` (labels) when the server exports it.
        """
        t_ns = self.clock.now_ns()
        try:
            if self._session is None:
                self._session = aiohttp.ClientSession()
            text = await _fetch(self._session, self.url, self.timeout_s)
            values, config = parse_metrics(text)
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError) as exc:
            self.failures += 1
            level = logging.WARNING if self.failures == 1 else logging.DEBUG
            logger.log(level, "metrics scrape of %s failed: %s", self.url, exc)
            return {"t_ns": t_ns, "error": f"{type(exc).__name__}: {exc}"}
        row: dict[str, Any] = {"t_ns": t_ns, **values}
        if config is not None:
            self.cache_config = config
            row["cache_config"] = config
        return row

    async def start(self) -> None:
        """Take the baseline row now, then keep scraping in a background task.

        The baseline is awaited so the first request of a run cannot slip in
        before it (its misses would fall outside the server-side window).
        """
        if self._task is None:
            self._append(await self.scrape_once())
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, *, final_scrape: bool = True) -> None:
        """Stop the background task, take one last row (closes the window), release HTTP."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if final_scrape:
                self._append(await self.scrape_once())
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> MetricsScraper:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _append(self, row: dict[str, Any]) -> None:
        row.pop("cache_config", None)  # static; kept once in self.cache_config
        self.timeline.append(row)

    async def _run(self) -> None:
        next_ns = self.clock.now_ns()
        while True:
            next_ns += self.interval_ns
            now = self.clock.now_ns()
            if next_ns < now:  # a slow scrape: skip missed ticks rather than burst
                next_ns = now + self.interval_ns - (now - next_ns) % self.interval_ns
            await self.clock.sleep_until(next_ns)
            self._append(await self.scrape_once())
