"""Run-level summary: counts, latency percentiles, throughput, hit rates, SLO.

``summarize`` returns the JSON-ready dict of ``summary.json`` (docs/interface.md; the
conventions: docs/metrics.md, "Per run"). Every aggregate is written once, over
``Columns``: an in-memory frame's, or a stored run's ``records.parquet`` columns
(``summarize_stored``, ``metrics.scan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import workbench.catalogs.requests as catalog
import workbench.metrics.agents as agents
from workbench.catalogs.series import ENGINES
from workbench.errors import ConfigError
from workbench.metrics.columns import Columns, available, stored
from workbench.metrics.deviations import failures, output_short, prompt_counted
from workbench.metrics.distribution import (
    STAT_KEYS,
    describe,
    describe_metric,
    resolution,
    support,
)
from workbench.metrics.frame import Data, as_records
from workbench.metrics.isolation import reported, warm_cache
from workbench.metrics.server_side import counter_increase, server_evidence
from workbench.metrics.slo import SLO, attained
from workbench.metrics.wording import beside
from workbench.metrics.workers import worker_breakdown
from workbench.plurals import counted
from workbench.records import RequestRecord, RunManifest, RunResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["STAT_KEYS", "describe"]  # re-exported: ``metrics.describe``

#: the described metrics of ``summary.json`` (the catalog's ``summarised`` rows, latency first)
LATENCY_METRICS: tuple[str, ...] = catalog.LATENCY
AUDIT_METRICS: tuple[str, ...] = catalog.AUDIT
#: the metrics an SLO bound may name (``metrics.slo``)
SLO_METRICS: tuple[str, ...] = catalog.SLO_ABLE
STATUSES: dict[str, str] = {
    "ok": "ok",
    "errors": "error",
    "skipped": "skipped",
    "cancelled": "cancelled",
}

def _num(x: Any) -> float | None:
    """A plain float, or None for NaN/None (JSON has no NaN)."""
    if x is None:
        return None
    f = float(x)
    return None if math.isnan(f) else f


def counts(data: Data | Columns) -> dict[str, int]:
    """Requests by status (``requests`` is all of them)."""
    cols = Columns.of(data)
    out = {"requests": len(cols)}
    for key, status in STATUSES.items():
        out[key] = int(cols.equals("status", status).sum())
    return out


def run_window_ns(data: Data | Columns) -> tuple[int, int] | None:
    """First dispatch → last end over every attempted (dispatched) request."""
    cols = Columns.of(data)
    dispatch, sent = cols.ints("dispatch_ns")
    if not sent.any():
        return None
    end, has_end = cols.ints("end_ns")
    last, has_last = cols.ints("last_token_ns")
    ends = np.where(has_end, end, np.where(has_last, last, dispatch))
    return int(dispatch[sent].min()), int(ends[sent].max())


def throughput(data: Data | Columns) -> dict[str, float | int | None]:
    """Success counts over the all-attempts window (see module docstring)."""
    cols = Columns.of(data)
    ok = cols.equals("status", "ok")
    out_tok = int(cols.ints("output_tokens")[0][ok].sum())
    prompt_tok = int(cols.ints("prompt_len")[0][ok].sum())
    window = run_window_ns(cols)
    dur = (window[1] - window[0]) / 1e9 if window else 0.0
    rate = (lambda n: n / dur) if dur > 0 else (lambda n: None)
    return {
        "duration_s": dur if window else None,
        "output_tokens": out_tok,
        "prompt_tokens": prompt_tok,
        "request_throughput_rps": rate(int(ok.sum())),
        "output_token_throughput_tps": rate(out_tok),
        "total_token_throughput_tps": rate(out_tok + prompt_tok),
    }


def _ratio(num: float, den: float) -> float | None:
    return float(num / den) if den > 0 else None


def measured(cols: Columns) -> np.ndarray:
    """The ok rows an actual hit rate is taken over: reported, with a prompt count > 0."""
    prompt, has_prompt = cols.ints("prompt_tokens")
    return cols.equals("status", "ok") & reported(cols) & has_prompt & (prompt > 0)


def prefix_hit_rates(data: Data | Columns) -> dict[str, float | int | None]:
    """Token-weighted client-side hit rates (see module docstring)."""
    cols = Columns.of(data)
    ok = cols.equals("status", "ok")
    meas = measured(cols)
    n_reported = int((ok & reported(cols)).sum())
    cached = int(cols.ints("cached_tokens")[0][meas].sum())
    prompt = int(cols.ints("prompt_tokens")[0][meas].sum())
    pre = cols.ints("planned_prefix_tokens")[0]
    pp = cols.ints("planned_prompt_tokens")[0]
    actual = _ratio(cached, prompt)
    planned = _ratio(int(pre.sum()), int(pp.sum()))
    plan_meas = _ratio(int(pre[meas].sum()), int(pp[meas].sum()))
    delta = actual - plan_meas if actual is not None and plan_meas is not None else None
    return {
        "actual_prefix_hit_rate": actual,
        "planned_prefix_hit_rate": planned,
        "planned_prefix_hit_rate_measured": plan_meas,
        "prefix_hit_rate_delta": delta,
        "measured_cache_requests": int(meas.sum()),
        "cache_reported_requests": n_reported,
        "cache_unreported_requests": int(ok.sum()) - n_reported,
        "cached_tokens": cached,
    }


def measured_plan(summary: Mapping[str, Any]) -> bool:
    """Only some requests reported a cached count, so their actual hit rate is set against
    the plan of those same requests (``planned_prefix_hit_rate_measured``): the headline's
    ``prefix hit A of P planned for the N requests …`` and the prefix table's row of it
    (docs/metrics.md, "Headline")."""
    reported = summary.get("cache_reported_requests")
    return (summary.get("actual_prefix_hit_rate") is not None
            and summary.get("planned_prefix_hit_rate_measured") is not None
            and isinstance(reported, int) and not isinstance(reported, bool)
            and reported < (summary.get("requests") or 0))


def _sample_value(sample: Mapping[str, Any], name: str) -> float | None:
    """A counter's value in one timeline sample (wide ``{"vllm:x_total{a="b"}": v}``,
    nested ``{"metrics": {...}}`` or long ``{"name", "value"}``), summed over label sets."""
    if "name" in sample and "value" in sample:
        return float(sample["value"]) if sample["name"] == name else None
    src = sample["metrics"] if isinstance(sample.get("metrics"), Mapping) else sample
    vals = [float(v) for k, v in src.items() if k == name or k.startswith(name + "{")]
    return sum(vals) if vals else None


def _delta(timeline: Sequence[Mapping[str, Any]], name: str) -> float | None:
    vals = [v for s in timeline if (v := _sample_value(s, name)) is not None and not math.isnan(v)]
    return counter_increase(vals)


def server_window_hit_rate(timeline: Sequence[Mapping[str, Any]]) -> float | None:
    """Δhits/Δqueries between the first and last scrape (vLLM; SGLang Δcached/Δprompt):
    whole cached blocks only, and other clients' traffic too."""
    for engine in ENGINES:  # (hits, queries) per engine, both in tokens, new names first
        for hits, queries in engine.pairs("hits", "queries"):
            d_hits, d_queries = _delta(timeline, hits), _delta(timeline, queries)
            if d_hits is not None and d_queries is not None:
                return _ratio(d_hits, d_queries)
    return None


def slo_attainment(
    data: Data | Columns, slo: Mapping[str, float], duration_s: float | None
) -> dict[str, Any]:
    """Per-metric and joint attainment of the per-request bounds ``slo`` (``{metric: ms}``,
    ``metrics.slo``) over every request; goodput = attained/window."""
    spec = SLO.parse(slo)
    if spec is None or spec.percentile_bounds:
        raise ValueError(f"a run's slo bounds each request ({{metric: ms}}), got {dict(slo)}")
    cols = Columns.of(data)
    n = len(cols)
    joint, per = attained(cols, spec.per_request)
    count = int(joint.sum())
    return {
        "bounds": {k: float(v) for k, v in slo.items()},
        "requests": n,
        "attained": count,
        "attainment": {k: float(m.mean()) if n else None for k, m in per.items()},
        "joint_attainment": float(joint.mean()) if n else None,
        "goodput_rps": count / duration_s if duration_s else None,
    }


#: the client, not the server, limited the run when either bound is crossed
CLIENT_CPU_BOUND = 0.9  # CPU seconds per wall second of one process (one core)
CLIENT_LAG_P99_MS = 10.0
#: new connections whose p99 took longer than this (ms) to be made (to the server's last
#: packet of them, backends/waits.py) name the server as slow to accept them: past a TCP
#: and TLS 1.3 handshake of one or two cross-continent round trips, well short of the 1 s
#: after which the kernel sends a SYN again that a full accept backlog dropped
#: (docs/metrics.md, "Client")
CONNECT_P99_MS = 100.0
#: the percentile of the release lag the verdict judges (CLIENT_LAG_P99_MS)
LAG_Q = 99.0
LAG_STATS = ("mean", "p50", "p99", "max", "count")


def _pooled(raws: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """One float array of every process's ``key`` series (``array``s or lists)."""
    parts = [np.asarray(r.get(key) or (), dtype=np.float64) for r in raws]
    return np.concatenate(parts) if parts else np.empty(0)


def client_stats(
    raws: Sequence[Mapping[str, Any]], requested_concurrency: int | None
) -> dict[str, Any]:
    """``summary.json["client"]`` from each process's ``Runner.measure.raw()`` dict
    (docs/metrics.md, "Client")."""
    lags = _pooled(raws, "release_lag_ns") / 1e6
    steady = _pooled(raws, "steady_release_lag_ns") / 1e6
    at_dispatch = _pooled(raws, "in_flight_at_dispatch")
    means = [r["in_flight_mean"] for r in raws if r.get("in_flight_mean") is not None]
    utils = [r["cpu_s"] / r["wall_s"] for r in raws if r.get("wall_s")]
    lag, steady_lag = describe(lags), describe(steady)
    out: dict[str, Any] = {
        "processes": len(raws),
        "requested_concurrency": requested_concurrency,
        "in_flight": {
            "mean": float(sum(means)) if means else None,
            "peak": int(sum(r.get("in_flight_peak", 0) for r in raws)),
            "at_dispatch_p50": describe(at_dispatch)["p50"],
        },
        "release_lag_ms": {k: lag[k] for k in LAG_STATS},
        "steady_release_lag_ms": {k: steady_lag[k] for k in LAG_STATS},
        "cpu_s": float(sum(r.get("cpu_s", 0.0) for r in raws)),
        "wall_s": max((float(r.get("wall_s", 0.0)) for r in raws), default=0.0),
        "cpu_util": max(utils) if utils else None,
        "paced_turns": int(sum(r.get("paced_turns", 0) for r in raws)),
    }
    after_done: dict[str, int] = {}
    for r in raws:  # the HTTP clients' handling of bodies held after [DONE], summed
        for k, v in (r.get("after_done") or {}).items():
            after_done[k] = after_done.get(k, 0) + int(v)
    if any(after_done.values()):
        out["after_done"] = after_done
    refused = int(sum(r.get("not_connected", 0) for r in raws))
    if refused:  # never on the wire: no release lag (a dead server's, not the client's)
        out["not_connected"] = refused
    resent = int(sum(r.get("resent_stale", 0) for r in raws))
    if resent:  # requests sent once more: a reused connection died before any byte
        out["resent_stale"] = resent
    held = _pooled(raws, "held_wait_ns") / 1e6
    if held.size:  # the server held streams open after [DONE] (not the client's lag)
        out["held_after_done"] = {"requests": int(held.size), "max_ms": float(held.max())}
    for key, name in (("connect_wait_ms", "connect_wait_ns"),
                      ("stale_attempt_ms", "stale_attempt_ns")):  # fmt: skip
        waits = _pooled(raws, name) / 1e6
        if waits.size:  # new connections, first attempts of resends: not the client's lag
            stats = describe(waits)
            out[key] = {k: stats[k] for k in LAG_STATS}
    out.update(client_bottleneck(out))
    return out


def judged_lag(stats: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The release lag the client verdict judges: the *steady* one when the run had one,
    else every request's (docs/metrics.md, "Client"); its name and its stats."""
    steady = stats.get("steady_release_lag_ms") or {}
    if steady.get("count"):
        return "steady release lag", steady
    return "release lag", stats.get("release_lag_ms") or {}


def client_bottleneck(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The client verdict from a ``client_stats`` dict (docs/metrics.md, "Client"):
    ``client_bottleneck`` and its reasons; ``server_delays``, the server's part in late
    requests (connections slow to be made); ``client_ok_thin``, why an OK rests on too few
    requests (None: it does not)."""
    reasons = []
    util = stats.get("cpu_util")
    if util is not None and util >= CLIENT_CPU_BOUND:
        reasons.append(f"client CPU {beside(util, CLIENT_CPU_BOUND, 0, 100)}% of a core "
                       f"(>= {CLIENT_CPU_BOUND:.0%})")
    p99, words = lag_p99(stats)
    if p99 is not None and p99 > CLIENT_LAG_P99_MS:
        reasons.append(f"{words} (> {CLIENT_LAG_P99_MS:g} ms)")
    server = []
    connect = stats.get("connect_wait_ms") or {}
    cp99 = connect.get("p99")
    if cp99 is not None and cp99 > CONNECT_P99_MS:
        # (a busy loop's lateness in noticing a made connection is not in it: waits.py)
        server.append(f"server slow to accept connections: p99 "
                      f"{beside(cp99, CONNECT_P99_MS)} ms over "
                      f"{counted(connect.get('count'), 'connection')}")
    thin = None
    which, lag = judged_lag(stats)
    n = lag.get("count")
    needed = support(LAG_Q)
    if not reasons and p99 is not None and isinstance(n, int) and needed and n < needed:
        thin = (f"{which} p99 of {counted(n, 'release')}: too few to show it at 95 % "
                f"confidence, needs {needed}")
    return {"client_bottleneck": bool(reasons), "client_bottleneck_reasons": reasons,
            "server_delays": server, "client_ok_thin": thin}


def lag_p99(stats: Mapping[str, Any]) -> tuple[float | None, str]:
    """The release lag p99 the client's verdict reads (``judged_lag``: the steady one when
    there is one) and its words: ``steady release lag p99 30.0 ms``, printed on its side
    of the bound (``wording.beside``); over fewer releases than resolve a p99 (100), it is
    read off the largest lags and says over how many: ``... p99 62.0 ms of 10 releases``
    (docs/metrics.md, "Headline")."""
    which, lag = judged_lag(stats)
    p99, n = lag.get("p99"), lag.get("count")
    if p99 is None:
        return None, which
    few = isinstance(n, int) and not isinstance(n, bool) and n < (resolution(99) or 0)
    return p99, (f"{which} p99 {beside(p99, CLIENT_LAG_P99_MS)} ms"
                 + (f" of {counted(n, 'release')}" if few else ""))


#: what a non-streaming run's summary, report and CLI line say (docs/metrics.md)
NON_STREAMING_NOTE = "non-streaming: TTFT = end-to-end latency"
#: how a non-streaming run shows TPOT and ITL: undefined, not 0
NOT_STREAMED = "n/a — non-streaming"


def response_mode(manifest: RunManifest) -> dict[str, Any] | None:
    """``{"stream": False, "note": ...}`` for a non-streaming run (``backend.stream``
    false in the manifest's config), None for a streaming one."""
    if manifest.section("backend").get("stream") is False:
        return {"stream": False, "note": f"{NON_STREAMING_NOTE}; TPOT and ITL: {NOT_STREAMED}"}
    return None


def run_summary(
    full: Columns,
    manifest: RunManifest,
    timeline: Sequence[Mapping[str, Any]],
    slo: Mapping[str, float] | None = None,
    *,
    warmup: bool = False,
    ideal: float | None = None,
) -> dict[str, Any]:
    """Every record-derived ``summary.json`` number of a run's rows (warm-ups included in
    ``full``), its manifest and its metrics timeline: the one summary both paths give."""
    df = full if warmup else full.where(~full.bools("warmup"))
    ok = df.where(df.equals("status", "ok"))
    out: dict[str, Any] = {"warmup_included": warmup, **counts(df)}
    failed = failures(df)
    if failed is not None:  # no key when none failed (an error-free summary is unchanged)
        out["failures"] = failed
    short = output_short(df)
    if short is not None:  # likewise: no key when every ok output had its pinned length
        out["output_short"] = short
    counted_prompts = prompt_counted(df)
    if counted_prompts is not None:  # and none when the server counted what was sent
        out["prompt_counted"] = counted_prompts
    mode = response_mode(manifest)
    if mode is not None:  # said beside the numbers it changes (TTFT = E2E, no TPOT/ITL)
        out["response_mode"] = mode
    for col in (*LATENCY_METRICS, *AUDIT_METRICS):
        out[col] = describe_metric(ok, col)
    out.update(throughput(df))
    out.update(prefix_hit_rates(df))
    ideal = ideal if ideal is not None else manifest.ideal_prefix_hit_rate
    out["ideal_prefix_hit_rate"] = _num(ideal)
    out["server_prefix_hit_rate"] = server_window_hit_rate(timeline)
    scrape = manifest.metrics_scrape
    out["server"] = server_evidence(timeline, scrape if isinstance(scrape, Mapping) else None)
    flush = manifest.cache_flush  # what was done before the run
    out["cache_flush"] = dict(flush) if isinstance(flush, Mapping) else None
    out["warm_cache"] = warm_cache(full, flush)
    slo = slo if slo is not None else manifest.section("slo")
    out["slo"] = slo_attainment(df, slo, out["duration_s"]) if slo else None
    return out


def _run_fields(out: dict[str, Any], manifest: RunManifest, cancelled: bool,
                lifecycle: Sequence[Mapping[str, Any]],
                records: Callable[[], list[RequestRecord]]) -> None:
    """A run's own keys: its status, and its agent tasks and session budget."""
    out["run_cancelled"] = cancelled  # "cancelled" is the request count
    out["run_status"] = manifest.status  # "running" on disk: the run was killed
    if agents.has_tasks(lifecycle):  # a session graph: task-level metrics
        out["agent_tasks"] = agents.agent_summary(records(), lifecycle)
    budget = agents.budget_section(manifest, lifecycle)
    if budget is not None:
        out["session_budget"] = budget


def _tail(out: dict[str, Any], manifest: RunManifest, full: Columns,
          warmup: bool) -> dict[str, Any]:  # fmt: skip
    """The manifest-derived keys after the metrics: warm-up, workers, client."""
    df = full if warmup else full.where(~full.bools("warmup"))
    if isinstance(manifest.warmup, Mapping):  # what the warm-up did (out of the metrics)
        out["warmup"] = dict(manifest.warmup)
    workers = worker_breakdown(df)
    if workers is not None:  # a simulated cluster: load, hit rate and queueing per worker
        out["workers"] = workers
    conc = agents.concurrency(agents.column_spans(df), manifest)
    if conc is not None:  # a cap was set: what it did (peak tasks beside peak streams)
        out["concurrency"] = conc
    client = manifest.client
    if isinstance(client, Mapping):  # self-measurement of a live run (absent in simulate)
        out["client"] = {**client, **client_bottleneck(client)}
        out["client_bottleneck"] = out["client"]["client_bottleneck"]
    return out


def summarize(
    result: Data,
    slo: Mapping[str, float] | None = None,
    *,
    warmup: bool = False,
    ideal: float | None = None,
    frame: pd.DataFrame | Columns | None = None,
) -> dict[str, Any]:
    """The run's summary as a JSON-ready dict (the content of ``summary.json``).

    ``slo`` and ``ideal`` default to the manifest's; warm-up records are excluded unless
    ``warmup``. No run id or wall-clock field goes in (a virtual-time run summarizes
    byte-identically). A run whose records stayed on disk is summarized from its
    ``records.parquet`` (``summarize_stored``) unless ``frame`` (its ``to_frame``) is given.
    """
    if slo is not None and not isinstance(slo, Mapping):
        raise ConfigError(f"summarize: slo: expected a mapping of metric: bound (ms), got a "
                          f"{type(slo).__name__}")
    if isinstance(result, RunResult) and result.records_on_disk and frame is None:
        return summarize_stored(result.run_dir or "", slo, warmup=warmup, ideal=ideal)
    manifest = result.manifest if isinstance(result, RunResult) else RunManifest.from_dict({})
    timeline = result.metrics_timeline if isinstance(result, RunResult) else []
    full = Columns.of(result if frame is None else frame)
    out = run_summary(full, manifest, timeline, slo, warmup=warmup, ideal=ideal)
    if isinstance(result, RunResult):
        _run_fields(out, manifest, bool(result.cancelled), result.lifecycle,
                    lambda: as_records(result))
    return _tail(out, manifest, full, warmup)


def summary_of(result: RunResult, slo: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The saved ``summary.json`` (``RunResult.summary``, with the config's SLO: ``slo`` must
    be that one or None), else ``summarize(result, slo)``."""
    if result.summary is not None:
        return result.summary
    return summarize(result, slo)


def summarize_stored(
    run_dir: str | Path,
    slo: Mapping[str, float] | None = None,
    *,
    warmup: bool = False,
    ideal: float | None = None,
) -> dict[str, Any]:
    """``summarize`` of a stored run from its ``records.parquet``: no record held in Python."""
    from workbench.storage.rundir import (
        LIFECYCLE,
        TIMELINE,
        load,
        load_records,
        read_jsonl,
        read_manifest,
        resolve_run_dir,
    )

    if not available():  # pyarrow not installed: the run is read into memory
        return summarize(load(run_dir), slo, warmup=warmup, ideal=ideal)
    d = resolve_run_dir(run_dir)
    manifest = read_manifest(d, strict=True)  # a damaged one raises, as ``load`` does
    full = stored(d)
    out = run_summary(full, manifest, read_jsonl(d / TIMELINE), slo, warmup=warmup, ideal=ideal)
    lifecycle = read_jsonl(d / LIFECYCLE) if (d / LIFECYCLE).exists() else []
    _run_fields(out, manifest, bool(manifest.cancelled) or manifest.status == "cancelled",
                lifecycle, lambda: load_records(d))
    return _tail(out, manifest, full, warmup)
