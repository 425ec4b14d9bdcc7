"""Server-side evidence from the ``/metrics`` timeline: preemptions and peak load.

Series names per engine: ``workbench.catalogs.series``. Peaks are over the scraped
samples, so a peak shorter than one scrape interval can be missed; preemptions are the
counter's increase over the run with Prometheus' reset rule (``counter_increase``), its
value in a row summed over its label sets (``counter_samples``). NaN samples are left out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.catalogs.series import ENGINES, EngineSeries

EMPTY: dict[str, Any] = {
    "engine": None, "samples": 0, "scrape_errors": 0, "preemptions": None,
    "peak_kv_cache_usage": None, "peak_running_requests": None, "peak_waiting_requests": None,
}  # fmt: skip


def _values(rows: Sequence[Mapping[str, Any]], name: str | None) -> list[float]:
    if name is None:
        return []
    src = (r["metrics"] if isinstance(r.get("metrics"), Mapping) else r for r in rows)
    vals = [float(s[name]) for s in src if name in s]
    return [v for v in vals if not math.isnan(v)]


def counter_samples(rows: Sequence[Mapping[str, Any]], name: str | None) -> list[float]:
    """A counter's value in each row that has it, NaN left out: a wide row's (or its nested
    ``metrics``') keys ``name`` and ``name{labels}`` summed — counters add over label sets
    (vLLM's data-parallel ``engine``, SGLang's ``dp_rank``; docs/measurement-rules.md) — or
    a long row's ``{"name": name, "value": v}``."""
    if name is None:
        return []
    labelled, out = name + "{", []
    for row in rows:
        if "name" in row and "value" in row:
            vals = [float(row["value"])] if row["name"] == name else []
        else:
            src = row["metrics"] if isinstance(row.get("metrics"), Mapping) else row
            vals = [float(v) for k, v in src.items() if k == name or k.startswith(labelled)]
        if vals and not math.isnan(total := sum(vals)):
            out.append(total)
    return out


def counter_increase(vals: Sequence[float]) -> float | None:
    """A counter's increase over its samples (None with fewer than two): a drop is a
    reset (the server restarted), after which the new value is the increase so far."""
    if len(vals) < 2:
        return None
    total = 0.0
    for before, after in itertools.pairwise(vals):
        total += after - before if after >= before else after
    return total


def _first(rows: Sequence[Mapping[str, Any]], engine: EngineSeries, role: Any) -> list[float]:
    """The samples of the first of ``engine``'s series of ``role`` that has any."""
    return next((v for n in engine.names(role) if (v := _values(rows, n))), [])


def preemptions(timeline: Sequence[Mapping[str, Any]],
                engine: EngineSeries | None = None) -> int | None:
    """The preemption counter's increase over the timeline, of ``engine`` or of the first
    engine whose counter the timeline has (vLLM's ``vllm:num_preemptions_total``, SGLang's
    ``sglang:num_retracted_requests_total``; ``workbench.catalogs.series``): the one reader,
    for ``summary["server"]`` and a sweep point alike."""
    for e in (engine,) if engine is not None else ENGINES:
        inc = counter_increase(counter_samples(timeline, e.name("preemptions")))
        if inc is not None or engine is not None:
            return None if inc is None else int(inc)
    return None


def series_stats(
    timeline: Sequence[Mapping[str, Any]], kept: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Peak and mean of each sampled series of ``kept`` (the manifest's
    ``metrics_scrape.series``), over the samples that have it."""
    out: dict[str, dict[str, Any]] = {}
    for name, info in kept.items():
        vals = _values(timeline, name)
        if vals:
            out[name] = {
                **info, "samples": len(vals), "peak": max(vals), "mean": sum(vals) / len(vals),
            }  # fmt: skip
    return out


def server_evidence(
    timeline: Sequence[Mapping[str, Any]], scrape: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``summary["server"]``: engine, samples, preemptions, peaks; ``series`` when the
    run's ``metrics_scrape`` kept further series (``series_stats``)."""
    rows = [r for r in timeline if "error" not in r]
    out = {**EMPTY, "scrape_errors": len(timeline) - len(rows), "samples": len(rows)}
    for engine in ENGINES:
        pre = counter_samples(rows, engine.name("preemptions"))
        kvs = _first(rows, engine, "kv_usage")
        run, wait = _first(rows, engine, "running"), _first(rows, engine, "waiting")
        if not (pre or kvs or run or wait):
            continue
        out.update(
            engine=engine.engine, preemptions=preemptions(rows, engine),
            peak_kv_cache_usage=max(kvs) if kvs else None,
            peak_running_requests=int(max(run)) if run else None,
            peak_waiting_requests=int(max(wait)) if wait else None,
        )
        break
    kept = (scrape or {}).get("series")
    if isinstance(kept, Mapping) and kept:
        out["series"] = series_stats(timeline, kept)
    return out
