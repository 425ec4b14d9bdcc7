"""What each engine exports on ``/metrics`` under which Prometheus name, and the role each
series plays; docs/measurement-rules.md's table and sources are ``markdown_table``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["queries", "hits", "preemptions", "kv_usage", "running", "waiting",
               "prompt_tokens", "generation_tokens", "requests", "cache_hit_rate", "cached"]
#: the roles the window hit rate, the server-side evidence and the report's gauges read
READ_ROLES: tuple[Role, ...] = ("hits", "queries", "preemptions", "kv_usage", "running", "waiting")
#: a derived series: llama-server counts prompt tokens without the cached ones; the
#: scraper adds both into this workbench name (not the server's), the window's queries
LLAMACPP_WITH_CACHED = "llamacpp:prompt_tokens_with_cached_total"


@dataclass(frozen=True)
class Series:
    """One Prometheus series an engine exports (counters under their ``_total`` name)."""

    name: str
    role: Role
    kind: Literal["counter", "gauge"] = "counter"
    #: the ``Engine.stats()`` key the embedded engine exports it from (None: it does not)
    stat: str | None = None
    #: HELP text of the embedded engine's exposition
    doc: str = ""
    #: a ratio: averaged over label sets and endpoints, not summed
    averaged: bool = False
    #: kept by the scraper (False: exported by the embedded engine, not read back)
    scraped: bool = True

    @property
    def family(self) -> str:
        """The name ``prometheus_client`` takes for a counter family (no ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


@dataclass(frozen=True)
class EngineSeries:
    engine: str
    title: str
    series: tuple[Series, ...]

    def names(self, role: Role) -> tuple[str, ...]:
        """The series of ``role``, preferred first (a renamed one after its new name)."""
        return tuple(s.name for s in self.series if s.role == role)

    def pairs(self, a: Role, b: Role) -> tuple[tuple[str, str], ...]:
        """``names(a)`` and ``names(b)`` side by side: one generation's names together
        (a renamed pair after its new names), as a ratio of two counters is read."""
        return tuple(zip(self.names(a), self.names(b), strict=True))

    def name(self, role: Role) -> str | None:
        names = self.names(role)
        return names[0] if names else None

    def embedded(self, kind: str) -> tuple[Series, ...]:
        """The rows the embedded engine exports, of ``kind``, in table order."""
        return tuple(s for s in self.series if s.stat is not None and s.kind == kind)


def _g(name: str, role: Role, stat: str | None = None, doc: str = "",
       averaged: bool = False) -> Series:
    return Series(name, role, "gauge", stat, doc, averaged)


VLLM = EngineSeries("vllm", "vLLM 0.32", (
    Series("vllm:prefix_cache_queries_total", "queries", stat="prefix_cache_queries_tokens",
           doc="Prefix cache queries, in tokens."),
    Series("vllm:prefix_cache_hits_total", "hits", stat="prefix_cache_hits_tokens",
           doc="Prefix cache hits, in tokens."),
    # their names before 0.10 (vllm-project/vllm#18354; both exported in 0.10 and 0.11)
    Series("vllm:gpu_prefix_cache_queries_total", "queries"),
    Series("vllm:gpu_prefix_cache_hits_total", "hits"),
    Series("vllm:num_preemptions_total", "preemptions", stat="preemptions",
           doc="Cumulative number of preemptions."),
    Series("vllm:prompt_tokens_total", "prompt_tokens", stat="prompt_tokens",
           doc="Number of prefill tokens processed."),
    Series("vllm:generation_tokens_total", "generation_tokens", stat="generation_tokens",
           doc="Number of generation tokens processed."),
    _g("vllm:kv_cache_usage_perc", "kv_usage", "kv_usage",
       "KV-cache usage. 1 means 100 percent usage.", averaged=True),
    _g("vllm:gpu_cache_usage_perc", "kv_usage", averaged=True),  # its name before 0.10
    _g("vllm:num_requests_running", "running", "running",
       "Number of requests in model execution batches."),
    _g("vllm:num_requests_waiting", "waiting", "waiting",
       "Number of requests waiting to be processed."),
))
SGLANG = EngineSeries("sglang", "SGLang", (
    Series("sglang:prompt_tokens_total", "queries", stat="prompt_tokens",
           doc="Number of prefill tokens processed."),
    Series("sglang:generation_tokens_total", "generation_tokens", stat="generation_tokens",
           doc="Number of generation tokens processed."),
    Series("sglang:cached_tokens_total", "hits", stat="prefix_cache_hits_tokens",
           doc="Number of cached prompt tokens."),
    Series("sglang:num_requests_total", "requests", stat="requests",
           doc="Number of requests processed.", scraped=False),
    Series("sglang:num_retracted_requests_total", "preemptions", stat="preemptions",
           doc="Total number of retracted requests."),
    _g("sglang:num_running_reqs", "running", "running", "The number of running requests."),
    _g("sglang:num_queue_reqs", "waiting", "waiting",
       "The number of requests in the waiting queue."),
    _g("sglang:token_usage", "kv_usage", "kv_usage", "The token usage.", averaged=True),
    _g("sglang:cache_hit_rate", "cache_hit_rate", averaged=True),  # (the engine: a ratio)
))
LLAMACPP = EngineSeries("llamacpp", "llama.cpp llama-server --metrics", (
    Series("llamacpp:prompt_tokens_total", "prompt_tokens"),  # cached ones excluded
    Series("llamacpp:prompt_tokens_cached_total", "hits"),
    Series(LLAMACPP_WITH_CACHED, "queries", scraped=False),  # derived by the scraper
    Series("llamacpp:tokens_predicted_total", "generation_tokens"),
    _g("llamacpp:requests_processing", "running"),
    _g("llamacpp:requests_deferred", "waiting"),
    _g("llamacpp:kv_cache_usage_ratio", "kv_usage", averaged=True),  # older builds only
))
#: every engine, in the order a timeline is matched against them
ENGINES: tuple[EngineSeries, ...] = (VLLM, SGLANG, LLAMACPP)

#: every series the scraper keeps from an engine's page
SCRAPED: frozenset[str] = frozenset(s.name for e in ENGINES for s in e.series if s.scraped)
#: the ratios among them: averaged over label sets and endpoints
AVERAGED: frozenset[str] = frozenset(s.name for e in ENGINES for s in e.series if s.averaged)


def names(role: Role) -> tuple[str, ...]:
    """Every engine's series of ``role`` (vLLM's first): what a timeline is read by."""
    return tuple(n for e in ENGINES for n in e.names(role))


def markdown_table() -> str:
    """docs/measurement-rules.md's table of the server-side names, from the rows."""
    head = "| engine | " + " | ".join(r.replace("_", " ") for r in READ_ROLES) + " |"
    lines = [head, "|" + " --- |" * (len(READ_ROLES) + 1)]
    for e in ENGINES:
        cells = [", ".join(f"`{n}`" for n in e.names(r)) or "(none)" for r in READ_ROLES]
        lines.append(f"| {e.title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
