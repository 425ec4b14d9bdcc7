"""``/metrics`` of the embedded engine: Prometheus text from ``Engine.stats()`` read at
scrape time, vLLM 0.32 or SGLang names (``workbench.catalogs.series``); a cluster's workers
labelled ``engine="<index>"`` (docs/cluster.md). Also a simulated GPU exporter's page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from workbench.catalogs.series import SGLANG, VLLM, EngineSeries
from workbench.sim.config import EngineConfig

#: one label set's values and the stats they are read from
Rows = list[tuple[list[str], dict[str, Any]]]


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

    def _vllm(self, names: list[str], rows: Rows) -> Iterator[Metric]:
        yield from _families(VLLM, "counter", names, rows)
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )  # fmt: skip
        for values, stats in rows:
            success.add_metric([*values, "length"], stats["requests"])
        yield success
        yield from _families(VLLM, "gauge", names, rows)
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

    def _sglang(self, names: list[str], rows: Rows) -> Iterator[Metric]:
        yield from _families(SGLANG, "counter", names, rows)
        yield from _families(SGLANG, "gauge", names, rows)
        rates = []
        for values, stats in rows:
            queries = stats["prefix_cache_queries_tokens"]
            rates.append((values, stats["prefix_cache_hits_tokens"] / queries if queries else 0.0))
        yield _gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", names, rates)


def _families(engine: EngineSeries, kind: str, names: list[str], rows: Rows) -> Iterator[Metric]:
    """The engine's ``kind`` series of ``workbench.catalogs.series``, each from its stats key."""
    make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    for s in engine.embedded(kind):
        fam = make(s.family, s.doc, labels=names)
        for values, stats in rows:
            fam.add_metric(values, stats[s.stat or ""])
        yield fam


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
    return _registry(EngineCollector(config, stats, engines))


def _registry(collector: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


# -- a simulated GPU exporter (DCGM names) ---------------------------------------------------
SIM_GPU_FB_MIB = 81_920  # an 80 GiB device
SIM_GPU_WEIGHTS_MIB = 16_384  # what the (simulated) weights hold
SIM_GPU_KV_MIB = int(0.9 * SIM_GPU_FB_MIB) - SIM_GPU_WEIGHTS_MIB  # the KV cache's share
SIM_GPU_IDLE_W, SIM_GPU_BUSY_W = 70.0, 400.0
SIM_GPU_PATH = "/simulated-gpu/metrics"


class GpuExporterCollector:
    """DCGM-exporter-style series derived from the engine's state at scrape time, one GPU
    per engine, labelled ``simulated="true"`` (docs/measurement-rules.md, "The simulated
    GPU exporter")."""

    LABELS = ("gpu", "modelName", "simulated")
    SERIES = (
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    )

    def __init__(self, stats: Any) -> None:
        self.stats = stats if isinstance(stats, list) else [stats]

    def collect(self) -> Iterator[Metric]:
        labels: list[list[str]] = []
        values: dict[str, list[float]] = {name: [] for name, _ in self.SERIES}
        for i, f in enumerate(self.stats):
            s = f()
            util = 100.0 if s["running"] else 0.0
            used = SIM_GPU_WEIGHTS_MIB + float(s["kv_usage"]) * SIM_GPU_KV_MIB
            labels.append([str(i), "workbench simulated GPU", "true"])
            power = SIM_GPU_IDLE_W + (SIM_GPU_BUSY_W - SIM_GPU_IDLE_W) * util / 100.0
            for (name, _), value in zip(self.SERIES, (util, used, SIM_GPU_FB_MIB - used, power),
                                        strict=True):
                values[name].append(value)
        for name, doc in self.SERIES:
            doc += " (simulated by workbench's embedded engine, not hardware)"
            yield _gauge(name, doc, list(self.LABELS), list(zip(labels, values[name], strict=True)))


def make_gpu_registry(stats: Any) -> CollectorRegistry:
    """The simulated GPU exporter's page: ``stats`` one engine's ``() -> dict`` or a list."""
    return _registry(GpuExporterCollector(stats))
