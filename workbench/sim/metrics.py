"""``/metrics`` of the embedded engine: Prometheus text from ``Engine.stats()``.

A custom collector on its own ``CollectorRegistry`` reads the engine's
counters at scrape time, so the exposition can never drift from the numbers
the engine reports per request. Names follow vLLM 0.32 (``mode="vllm"``) or
SGLang (``mode="sglang"``), per docs/wire-protocols.md ("Server metrics").

A simulated cluster exposes one series per worker, labelled ``engine="<index>"``
as vLLM labels its data-parallel engines (SGLang mode gains the same label), so
a scraper that sums over label sets reads the cluster's aggregate.
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
    """Yields the metric families of one engine, or of a cluster's workers (one label
    set per worker), at scrape time."""

    def __init__(self, config: EngineConfig, stats: Any, engines: list[int] | None = None) -> None:
        self.config = config
        self.stats = stats if isinstance(stats, list) else [stats]  # () -> dict (Engine.stats)
        self.engines = engines or list(range(len(self.stats)))
        self.cluster = engines is not None

    def collect(self) -> Iterator[Metric]:
        model = self.config.model
        if self.config.mode == "sglang":
            names = ["model_name", "engine"] if self.cluster else ["model_name"]
            rows = [([model, str(i)] if self.cluster else [model], f()) for i, f in self._each()]
            yield from self._sglang(names, rows)
        else:
            rows = [([str(i), model], f()) for i, f in self._each()]
            yield from self._vllm(["engine", "model_name"], rows)

    def _each(self) -> list[tuple[int, Any]]:
        return list(zip(self.engines, self.stats, strict=True))

    def _vllm(
        self, names: list[str], rows: list[tuple[list[str], dict[str, Any]]]
    ) -> Iterator[Metric]:
        for name, doc, key in VLLM_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=names)
            for values, stats in rows:
                fam.add_metric(values, stats[key])
            yield fam
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )  # fmt: skip
        for values, stats in rows:
            success.add_metric([*values, "length"], stats["requests"])
        yield success
        for name, doc, key in VLLM_GAUGES:
            yield _gauge(name, doc, names, [(v, s[key]) for v, s in rows])
        yield self._cache_info(names, [v for v, _ in rows])

    def _cache_info(self, names: list[str], label_rows: list[list[str]]) -> Metric:
        cfg = self.config
        info = {
            "block_size": str(cfg.block_size),
            "num_gpu_blocks": str(cfg.num_blocks),
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "kv_cache_size_tokens": str(cfg.capacity_tokens),
        }
        return _gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            [*names, *info], [([*v, *info.values()], 1) for v in label_rows],
        )  # fmt: skip

    def _sglang(
        self, names: list[str], rows: list[tuple[list[str], dict[str, Any]]]
    ) -> Iterator[Metric]:
        for name, doc, key in SGLANG_COUNTERS:
            fam = CounterMetricFamily(name, doc, labels=names)
            for values, stats in rows:
                fam.add_metric(values, stats[key])
            yield fam
        for name, doc, key in SGLANG_GAUGES:
            yield _gauge(name, doc, names, [(v, s[key]) for v, s in rows])
        rates = []
        for values, stats in rows:
            queries = stats["prefix_cache_queries_tokens"]
            rates.append((values, stats["prefix_cache_hits_tokens"] / queries if queries else 0.0))
        yield _gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", names, rates)


def _gauge(name: str, doc: str, names: list[str], rows: list[tuple[list[str], float]]) -> Metric:
    fam = GaugeMetricFamily(name, doc, labels=names)
    for values, value in rows:
        fam.add_metric(values, value)
    return fam


def make_registry(
    config: EngineConfig, stats: Any, engines: list[int] | None = None
) -> CollectorRegistry:
    """``stats``: one engine's ``() -> dict``; or a cluster's, one per worker index in
    ``engines``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(config, stats, engines))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
