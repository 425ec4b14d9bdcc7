"""Server-side evidence from the ``/metrics`` timeline: preemptions and peak load.

The client sees latencies; the server's own gauges and counters say *why*: how
often it preempted (recomputed) requests, how full its KV cache got, how many
requests it ran and queued at most. Names per engine (docs/measurement-rules.md
has the sources); the embedded engine exports the vLLM names (or SGLang's in
``mode="sglang"``), and ``simulate`` samples it the same way in virtual time.

Peaks are over the scraped samples (``backend.scrape_interval_s`` apart), so a
peak shorter than one interval can be missed; preemptions are the counter's
change between the first and the last sample (the whole run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: engine → (preemption counter, KV usage gauge 0-1, running gauge, waiting gauge)
ENGINE_SERIES: dict[str, tuple[str | None, str | None, str, str]] = {
    "vllm": (
        "vllm:num_preemptions_total",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ),
    "sglang": (
        "sglang:num_retracted_requests_total",
        "sglang:token_usage",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
    ),
    "llamacpp": (
        None,  # llama-server has no preemption counter
        "llamacpp:kv_cache_usage_ratio",  # older builds only
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
    ),
}
EMPTY: dict[str, Any] = {
    "engine": None, "samples": 0, "scrape_errors": 0, "preemptions": None,
    "peak_kv_cache_usage": None, "peak_running_requests": None, "peak_waiting_requests": None,
}  # fmt: skip


def _values(rows: Sequence[Mapping[str, Any]], name: str | None) -> list[float]:
    if name is None:
        return []
    src = (r["metrics"] if isinstance(r.get("metrics"), Mapping) else r for r in rows)
    return [float(s[name]) for s in src if name in s]


def server_evidence(timeline: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``summary["server"]``: engine, samples, preemptions, peak KV usage, running, waiting."""
    rows = [r for r in timeline if "error" not in r]
    out = {**EMPTY, "scrape_errors": len(timeline) - len(rows), "samples": len(rows)}
    for engine, (preempt, kv, running, waiting) in ENGINE_SERIES.items():
        if not any(_values(rows, n) for n in (preempt, kv, running, waiting)):
            continue
        pre, kvs = _values(rows, preempt), _values(rows, kv)
        run, wait = _values(rows, running), _values(rows, waiting)
        out.update(
            engine=engine,
            preemptions=int(pre[-1] - pre[0]) if len(pre) >= 2 else None,
            peak_kv_cache_usage=max(kvs) if kvs else None,
            peak_running_requests=int(max(run)) if run else None,
            peak_waiting_requests=int(max(wait)) if wait else None,
        )
        break
    return out
