"""Prometheus scraping: parsing vLLM/SGLang pages, the background timeline, block size."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from loopback import serve_app

from workbench.backends.scrape import MetricsScraper, detect_block_size, parse_metrics

LIMIT = 10.0
LABELS = 'engine="0",model_name="tiny-llama"'

VLLM_PAGE = f"""# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{LABELS}}} 2000.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{LABELS}}} 992.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny-llama"}} 0.25
vllm:kv_cache_usage_perc{{engine="1",model_name="tiny-llama"}} 0.75
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{LABELS}}} 3.0
vllm:num_requests_waiting{{{LABELS}}} 1.0
vllm:num_preemptions_total{{{LABELS}}} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{LABELS},le="0.001"}} 0.0
vllm:time_to_first_token_seconds_count{{{LABELS}}} 2.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="32",enable_prefix_caching="True",num_gpu_blocks="16384"}} 1.0
"""

SGLANG_PAGE = """# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 100.0
sglang:cached_tokens_total{cache_source="host",model_name="m"} 20.0
sglang:prompt_tokens_total{model_name="m"} 400.0
sglang:num_running_reqs{model_name="m"} 2.0
sglang:token_usage{model_name="m"} 0.5
"""


def test_parse_vllm_page():
    values, config = parse_metrics(VLLM_PAGE)
    assert values == {
        "vllm:prefix_cache_queries_total": 2000.0,
        "vllm:prefix_cache_hits_total": 992.0,
        "vllm:kv_cache_usage_perc": 0.5,  # a ratio: averaged over engines
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 1.0,
        "vllm:num_preemptions_total": 0.0,
    }
    assert config is not None and config["block_size"] == "32"


def test_parse_sglang_page_sums_label_sets():
    values, config = parse_metrics(SGLANG_PAGE)
    assert values["sglang:cached_tokens_total"] == 120.0
    assert values["sglang:prompt_tokens_total"] == 400.0
    assert values["sglang:token_usage"] == 0.5
    assert config is None


class MetricsServer:
    """A ``/metrics`` page that counts its scrapes; ``served(n)`` waits for the n-th."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.status = 200
        self.hits = 0
        self._hit = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        self._hit.set()
        return web.Response(status=self.status, text=self.page.replace("992.0", f"{self.hits}"))

    async def served(self, n: int) -> None:
        """Return once the ``n``-th scrape came in: each wait is for the next hit's event.
        The scraper scrapes one after another, so every earlier row is in its timeline."""
        for _ in range(n):  # at most n hits to wait for
            if self.hits >= n:
                return
            self._hit.clear()
            await self._hit.wait()


@contextlib.asynccontextmanager
async def serve(server: MetricsServer) -> AsyncIterator[str]:
    async with serve_app([web.get("/metrics", server.handle)]) as url:
        yield f"{url}/v1"


async def test_scrape_once_and_block_size():
    server = MetricsServer(VLLM_PAGE)
    async with asyncio.timeout(LIMIT), serve(server) as url:
        scraper = MetricsScraper(url, interval_s=1.0)
        row = await scraper.scrape_once()
        await scraper.stop()
        assert await detect_block_size(url) == 32
    assert row["vllm:prefix_cache_hits_total"] == 1.0
    assert row["cache_config"]["num_gpu_blocks"] == "16384"
    assert isinstance(row["t_ns"], int)


async def test_block_size_unknown_without_cache_config():
    async with asyncio.timeout(LIMIT), serve(MetricsServer(SGLANG_PAGE)) as url:
        assert await detect_block_size(url) is None


async def test_background_timeline_and_final_scrape():
    server = MetricsServer(VLLM_PAGE)
    async with (
        asyncio.timeout(LIMIT),
        serve(server) as url,
        MetricsScraper(url, interval_s=0.02) as scraper,
    ):
        await server.served(4)  # three rows in the timeline, the fourth scrape under way
    rows = scraper.timeline
    assert len(rows) >= 4  # at least three ticks plus the final scrape at stop
    times = [r["t_ns"] for r in rows]
    assert times == sorted(times)
    hits = [r["vllm:prefix_cache_hits_total"] for r in rows]
    assert hits == sorted(hits) and len(set(hits)) == len(hits)
    assert all("cache_config" not in r for r in rows)
    assert scraper.cache_config is not None and scraper.cache_config["block_size"] == "32"


async def test_failing_scrape_is_recorded_not_fatal(caplog: pytest.LogCaptureFixture):
    server = MetricsServer(VLLM_PAGE)
    server.status = 503
    async with (
        asyncio.timeout(LIMIT),
        serve(server) as url,
        MetricsScraper(url, interval_s=0.02) as scraper,
    ):
        await server.served(2)  # two refused scrapes
        server.status = 200
        await server.served(4)  # the third (answered) is in the timeline
    assert "HTTP 503" in scraper.timeline[0]["error"]
    assert "vllm:prefix_cache_hits_total" in scraper.timeline[-1]
    assert scraper.failures >= 2
    assert "metrics scrape" in caplog.text


async def test_unreachable_server_gives_error_rows_and_no_block_size():
    scraper = MetricsScraper("http://127.0.0.1:9", interval_s=1.0, timeout_s=1.0)
    async with asyncio.timeout(LIMIT):
        row = await scraper.scrape_once()
        await scraper.stop()
        assert await detect_block_size("http://127.0.0.1:9", timeout_s=1.0) is None
    assert "error" in row
