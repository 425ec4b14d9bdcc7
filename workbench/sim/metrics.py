"""``/metrics`` of the embedded engine: Prometheus text from ``Engine.stats()``.

A custom collector on its own ``CollectorRegistry`` reads the engine's
counters at scrape time, so the exposition can never drift from the numbers
the engine reports per request. Names follow vLLM 0.32 (``mode="vllm"``) or
SGLang (``mode="sglang"``), per SPEC §4 and real-engines.md §3.5.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from workbench.sim.config import EngineConfig

VLLM_COUNTERS = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in tokens.",
        "prefix_cache_queries_tokens",
    ),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", "prefix_cache_hits_tokens"),
    ("vllm:num_preemptions", "Cumulative number of preemptions.", "preemptions"),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
)
VLLM_GAUGES = (
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    ("vllm:num_requests_running", "Number of requests in model execution batches.", "running"),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
)
SGLANG_COUNTERS = (
    ("sglang:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("sglang:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
    ("sglang:cached_tokens", "Number of cached prompt tokens.", "prefix_cache_hits_tokens"),
    ("sglang:num_requests", "Number of requests processed.", "requests"),
    ("sglang:num_retracted_requests", "Total number of retracted requests.", "preemptions"),
)
SGLANG_GAUGES = (
    ("sglang:num_running_reqs", "The number of running requests.", "running"),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "waiting"),
    ("sglang:token_usage", "The token usage.", "kv_usage"),
)


class EngineCollector:
    """Yields the metric families of one engine at scrape time."""

    def __init__(self, config: EngineConfig, stats: Any) -> None:
        self.config = config
        self.stats = stats  # () -> dict, usually Engine.stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        if self.config.mode == "sglang":
            yield from self._sglang(stats)
        else:
            yield from self._vllm(stats)

    def _vllm(self, stats: dict[str, Any]) -> Iterator[Metric]:
        names, values = ["engine", "model_name"], ["0", self.config.model]
        for name, doc, key in VLLM_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=names)
            fam.add_metric(values, stats[key])
            yield fam
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )  # fmt: skip
        success.add_metric([*values, "length"], stats["requests"])
        yield success
        for name, doc, key in VLLM_GAUGES:
            yield _gauge(name, doc, names, values, stats[key])
        yield self._cache_info(names, values)

    def _cache_info(self, names: list[str], values: list[str]) -> Metric:
        cfg = self.config
        info = {
            "block_size": str(cfg.block_size),
            "num_gpu_blocks": str(cfg.num_blocks),
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "kv_cache_size_tokens": str(cfg.capacity_tokens),
        }
        return _gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            [*names, *info], [*values, *info.values()], 1,
        )  # fmt: skip

    def _sglang(self, stats: dict[str, Any]) -> Iterator[Metric]:
        names, values = ["model_name"], [self.config.model]
        for name, doc, key in SGLANG_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=names)
            fam.add_metric(values, stats[key])
            yield fam
        for name, doc, key in SGLANG_GAUGES:
            yield _gauge(name, doc, names, values, stats[key])
        queries = stats["prefix_cache_queries_tokens"]
        rate = stats["prefix_cache_hits_tokens"] / queries if queries else 0.0
        yield _gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", names, values, rate)


def _gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    fam = GaugeMetricFamily(name, doc, labels=names)
    fam.add_metric(values, value)
    return fam


def make_registry(config: EngineConfig, stats: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(config, stats))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
