"""Report tables: DataFrame in, DataFrame out, plus ``show`` to display and export them.

Every builder returns a numeric DataFrame at full precision, named (``named``) and with
the metric names of docs/metrics.md; ``show`` renders it with the display rules of
docs/metrics.md, "Numbers in reports", and carries the raw numbers (``TABLE_MIME``) for
``render_report`` to export as CSV and JSON."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import workbench.catalogs.requests as catalog
import workbench.catalogs.runs as runs
import workbench.catalogs.series as series
from workbench.metrics import by_round_index, deviations, summarize
from workbench.metrics.deviations import failure_class
from workbench.metrics.distribution import QS, resolution
from workbench.metrics.summary import (
    CLIENT_CPU_BOUND,
    CLIENT_LAG_P99_MS,
    CONNECT_P99_MS,
    lag_p99,
    measured_plan,
)
from workbench.metrics.wording import beside, bounds_phrase, sig
from workbench.plurals import counted
from workbench.records import RunManifest
from workbench.report.headline import simulated_engine
from workbench.sim.config import step_times
from workbench.storage.rundir import running_note

TABLE_MIME = "application/vnd.workbench.table+json"
LATENCY_METRICS: tuple[str, ...] = catalog.LATENCY
#: the max beside the percentiles: a headline over few values gives it (docs/metrics.md)
LATENCY_STATS: tuple[str, ...] = ("mean", *(f"p{q:g}" for q in QS), "max", "count")
HIT_RATES: tuple[tuple[str, str], ...] = runs.fields("hit")
COUNT_KEYS = frozenset(("requests", "ok", "errors", "skipped"))
RUN_FIELDS: tuple[tuple[str, str], ...] = runs.fields("run")


def as_summary(data: Any) -> Mapping[str, Any]:
    """A ``summarize`` dict: passed through if it already is one, else computed."""
    if isinstance(data, Mapping) and "ttft_ms" in data:
        return data
    return summarize(data)


def named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """``df`` with ``attrs["name"]`` set (the name ``show`` and the exported files use)."""
    df.attrs["name"] = name
    return df


def summary_table(data: Any) -> pd.DataFrame:
    """Latency percentiles in ms: one row per latency metric of the catalog, labelled as
    every table and line names a metric (``catalog.with_unit``: ``TTFT (ms)``)."""
    s = as_summary(data)
    rows = {catalog.with_unit(m): {k: as_float(s.get(m, {}).get(k)) for k in LATENCY_STATS}
            for m in LATENCY_METRICS}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(LATENCY_STATS))
    df["count"] = df["count"].fillna(0).astype(int)
    df.index.name = "metric"
    return named(df, "latency")


def latency_caption(data: Any, head: str = "Latency of ok requests (ms)") -> str:
    """``head``, and when a headlined metric (TTFT, TPOT) has fewer values than a p99
    needs to be other than the largest ones (``resolution``), a sentence saying so: the
    table keeps the percentile, the headline gives the max (docs/metrics.md, "Headline")."""
    s = as_summary(data)
    need = resolution(QS[-1])
    few = []
    for metric in ("ttft_ms", "tpot_ms"):
        n = (s.get(metric) or {}).get("count")
        if isinstance(n, int) and 0 < n < (need or 0):
            few.append(f"{catalog.label(metric)} over {n}")
    if not few:
        return head
    return (f"{head}. {', '.join(few)}: a p99 over fewer than {need} values (a p90 over "
            f"fewer than {resolution(90)}) is read off the largest ones; the headline gives "
            "the max")


def prefix_table(data: Any) -> pd.DataFrame:
    """Prefix-cache hit rates (fraction of prompt tokens, 0–1): planned, actual, server, ideal;
    ``over requests``: the ok requests whose server reported a cached count."""
    s = as_summary(data)
    rows = {label: {"key": key, "hit rate": as_float(s.get(key)), "over requests": math.nan}
            for label, key in HIT_RATES}  # fmt: skip
    reported = s.get("cache_reported_requests")
    rows["actual (client)"]["over requests"] = as_float(reported)
    if measured_plan(s):  # the plan the headline sets the actual rate against
        key = "planned_prefix_hit_rate_measured"
        rows[PLANNED_OF_REPORTED] = {"key": key, "hit rate": as_float(s.get(key)),
                                     "over requests": as_float(reported)}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=["key", "hit rate", "over requests"])
    df.index.name = "prefix hit rate"
    return named(df, "prefix_hits")


#: the prefix table's row of the plan of the requests that reported a cached count
PLANNED_OF_REPORTED = "planned (of those requests)"


def prefix_caption(data: Any) -> str:
    """Caption of ``prefix_table``: the actual rate's base, the flush, the warm-cache warning."""
    s = as_summary(data)
    parts = ["Prefix-cache hit rates (fraction of prompt tokens, 0-1)."]
    ok = _count(s.get("ok"))
    reported, unreported = _count(s.get("cache_reported_requests")), _count(
        s.get("cache_unreported_requests"))
    if ok and not reported:
        parts.append(
            f"The server reported no cached-token count for any of the {ok} ok requests: the "
            "actual hit rate is unknown (null), not 0 (vLLM reports it with "
            "--enable-prompt-tokens-details)."
        )
    elif unreported:
        parts.append(
            f"Actual rate over the {reported} of {ok} ok requests that reported a cached count; "
            f"the other {unreported} are left out, not counted as misses."
        )
    flush = s.get("cache_flush") or {}
    if flush.get("ok"):
        parts.append(f"Prefix cache reset before the run ({flush.get('endpoint')}).")
    elif flush.get("attempted"):
        parts.append(f"Prefix cache NOT reset before the run: {flush.get('detail')}.")
    warning = (s.get("warm_cache") or {}).get("warning")
    if warning:
        parts.append(f"WARNING: {warning}")
    return " ".join(parts)
#: what the report says of a run by its manifest status
RUN_STATUS_NOTES: dict[str, str] = {
    "completed": "completed",
    "cancelled": "INCOMPLETE: cancelled (stopped before the plan finished)",
    "running": "INCOMPLETE: the run was killed (its manifest still says 'running')",
    "failed": "INCOMPLETE: the run failed before the plan finished",
    "partial": "INCOMPLETE: partial (planned rounds were skipped or never sent; the "
               "manifest's completion block counts them)",
}


def run_status_note(status: Any) -> str | None:
    """The report's line for a manifest status (None when there is no manifest status)."""
    if status is None:
        return None
    return RUN_STATUS_NOTES.get(str(status), f"INCOMPLETE: status {status!r}")


def run_end_note(manifest: RunManifest, status: Any = None, *, why: bool = True) -> str | None:
    """How a run that did not complete ended (``status``: the manifest's unless given),
    as the report's first screen and ``workbench report``'s stderr say it: a killed run's
    names its process (``rundir.running_note``); None for a completed run or no status.
    ``why``: a partial run's stop in words after it (``stop_detail``; ``replay`` prints
    ``stop_line`` on its own line instead)."""
    status = manifest.status if status is None else status
    if status in (None, "completed"):
        return None
    return (running_note(manifest) or _partial_note(manifest, status, why)
            or run_status_note(status))


def _partial_note(manifest: RunManifest, status: Any, why: bool = True) -> str | None:
    """``INCOMPLETE: partial (of 64 planned rounds, 31 were recorded, 8 of them skipped, and
    33 never sent)`` from the manifest's completion counts (``why``: then the stop in
    words, ``: server at URL refused ...; stopped``); None without them."""
    c = manifest.completion or {}
    keys = ("planned_rounds", "recorded_rounds", "skipped_rounds", "not_sent_rounds")
    if status != "partial" or not all(isinstance(c.get(k), int) for k in keys):
        return None
    planned, recorded, skipped, unsent = (c[k] for k in keys)
    stop = f": {manifest.stop_detail}; stopped" if why and manifest.stop_detail else ""
    return (f"INCOMPLETE: partial (of {planned} planned rounds, {recorded} "
            f"{'was' if recorded == 1 else 'were'} recorded, {skipped} of them skipped, and "
            f"{unsent} never sent){stop}")


def stop_line(manifest: RunManifest) -> str | None:
    """The one line a run its server stopped ends with (``stop_detail``, and where its
    records are): ``server at URL refused 20 connections in a row since 17:41:07;
    stopped; 12 records on disk``; None for any other run."""
    if not manifest.stop_detail:
        return None
    recorded = (manifest.completion or {}).get("recorded_rounds")
    where = "on disk" if manifest.config.get("out_dir") else "kept"
    count = f"; {counted(recorded, 'record')} {where}" if isinstance(recorded, int) else ""
    return f"{manifest.stop_detail}; stopped{count}"


def attained_label(bounds: Mapping[str, Any]) -> str:
    """The run table's row of the requests that attained every per-request bound:
    ``SLO attained (within TTFT ≤ 2 s)``, the bounds as the headline's verdict says."""
    return f"SLO attained (within {bounds_phrase(bounds)})"


def run_table(data: Any, manifest: RunManifest | None = None) -> pd.DataFrame:
    """Counts and throughput of the run, after its status when the summary knows it; for
    a simulated run (``manifest``), the step times that timed it, in full (the headline
    names them in a few words: ``sim.config.step_times``)."""
    s = as_summary(data)
    values: list[Any] = [_count(s.get(key)) if key in COUNT_KEYS else as_float(s.get(key))
                         for _, key in RUN_FIELDS]
    labels = [label for label, _ in RUN_FIELDS]
    note = run_status_note(s.get("run_status"))
    if note is not None:
        values, labels = [note, *values], ["status", *labels]
    slo = s.get("slo")
    if isinstance(slo, Mapping) and slo.get("bounds"):  # the count the headline's verdict
        # states ("SLO met: 303/303 within …"), under it (docs/metrics.md, "Headline")
        # and the bounds it was judged against, in the headline's words
        values = [*values, _count(slo.get("attained"))]
        labels = [*labels, attained_label(slo["bounds"])]
    short = s.get("output_short")
    if isinstance(short, Mapping) and short.get("requests"):  # the headline's "… ended short"
        values += [_count(short[k]) for k in ("requests", "generated_tokens", "planned_tokens")]
        labels += [SHORT_OUTPUTS, "their output tokens", "their max_tokens"]
    counted = s.get("prompt_counted")
    if isinstance(counted, Mapping) and counted.get("sent_tokens"):  # "… counted … sent"
        values += [_count(counted["server_tokens"]), _count(counted["sent_tokens"]),
                   as_float(counted["ratio"])]
        labels += ["prompt tokens the server counted", "prompt tokens sent",
                   "counted / sent"]
    engine = simulated_engine(manifest) if manifest is not None else None
    if engine is not None:
        values, labels = [*values, step_times(engine).detail], [*labels, STEP_TIMES]
    return value_table(labels, values, "run")


#: the run table's row of a simulated run's cost model
STEP_TIMES = "simulated engine's step times"


#: the run table's row of ok requests with fewer output tokens than pinned
SHORT_OUTPUTS = "ended short of max_tokens"


def round_table(data: Any) -> pd.DataFrame:
    """Per round index: requests, TTFT p50/p90 (ms), planned vs actual hit rate; ``data`` a
    run or a ``by_round_index`` frame (``metrics.scan``)."""
    is_table = isinstance(data, pd.DataFrame) and "group" in data.columns
    full = data if is_table else by_round_index(data)
    cols = [
        "group", "requests", "ok", "ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50",
        "planned_prefix_hit_rate", "actual_prefix_hit_rate",
    ]
    df = full[cols].set_index("group")
    df.index.name = "round"
    return named(df, "by_round")


CLIENT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("requested concurrency", ("requested_concurrency",)),
    ("in flight, mean", ("in_flight", "mean")),
    ("in flight, peak", ("in_flight", "peak")),
    ("release lag p50 (ms)", ("release_lag_ms", "p50")),
    ("release lag p99 (ms)", ("release_lag_ms", "p99")),
    ("release lag max (ms)", ("release_lag_ms", "max")),
    ("steady release lag p99 (ms)", ("steady_release_lag_ms", "p99")),
    ("new connections", ("connect_wait_ms", "count")),
    ("connect wait p50 (ms)", ("connect_wait_ms", "p50")),
    ("connect wait p99 (ms)", ("connect_wait_ms", "p99")),
    ("connect wait max (ms)", ("connect_wait_ms", "max")),
    ("resent (stale connection)", ("resent_stale",)),
    ("first attempt before a resend, max (ms)", ("stale_attempt_ms", "max")),
    ("client CPU (s)", ("cpu_s",)),
    ("client CPU, share of one core", ("cpu_util",)),
    ("client processes", ("processes",)),
    ("turns that waited (pacing)", ("paced_turns",)),
)


CLIENT_COUNTS = frozenset(
    ("requested concurrency", "in flight, peak", "client processes", "turns that waited (pacing)",
     "new connections", "resent (stale connection)")
)


def client_table(data: Any) -> pd.DataFrame:
    """The client's self-measurement (``summary["client"]``); empty in virtual time."""
    s = as_summary(data)
    client = s.get("client") or {}
    values: list[Any] = []
    for label, path in CLIENT_FIELDS:
        v: Any = client
        for key in path:
            v = v.get(key) if isinstance(v, Mapping) else None
        values.append(int(v) if label in CLIENT_COUNTS and v is not None else as_float(v))
    df = value_table([k for k, _ in CLIENT_FIELDS], values, "client")
    return df if client else df.iloc[0:0]


CLIENT_CPU_IDLE = 0.5  # below this share of a core, late sends are not the client's own work


def client_evidence(client: Mapping[str, Any]) -> str:
    """The CPU share and (steady) release lag p99 the bottleneck verdict used, with bounds,
    and the new connections' wait (the server's, kept out of the lag)."""
    parts = []
    util = client.get("cpu_util")
    if util is not None:
        parts.append(f"client CPU {beside(util, CLIENT_CPU_BOUND, 0, 100)}% of a core "
                     f"(bound {CLIENT_CPU_BOUND:.0%})")
    p99, words = lag_p99(client)
    if p99 is not None:
        parts.append(f"{words} (bound {CLIENT_LAG_P99_MS:g} ms)")
    connect = client.get("connect_wait_ms") or {}
    if connect.get("p99") is not None:
        parts.append(f"new connections' wait p99 {beside(connect['p99'], CONNECT_P99_MS)} ms "
                     f"of {counted(connect.get('count'), 'connection')} (the server's, "
                     f"not in the lag; bound {CONNECT_P99_MS:g} ms)")
    return "; ".join(parts) or "no CPU or lag samples"


def client_caption(data: Any, manifest: RunManifest | None = None) -> str:
    """Caption of ``client_table``: the verdict, its evidence, and with ``manifest`` whether
    the embedded engine ran on the client's loop."""
    client = as_summary(data).get("client") or {}
    if not client:
        return "No client self-measurement (a virtual-time run)"
    proc = ((manifest.target if manifest else None) or {}).get("engine_process") or {}
    shared = (" The embedded engine ran on the client's event loop (target.in_process), "
              "so its steps count as client lag." if proc and not proc.get("own_process")
              else "")
    evidence = client_evidence(client)
    server = "; ".join(client.get("server_delays") or [])
    server = (f" The server delayed requests: {server} (each new connection's wait is the "
              "server's or the network's, kept out of the release lag)." if server else "")
    if not client.get("client_bottleneck"):
        thin = client.get("client_ok_thin")
        kept = (f"the client kept up, not the bottleneck, on this evidence ({thin})" if thin
                else "the client kept up, not the bottleneck")
        return f"Client self-measurement: {kept} ({evidence}).{server}{shared}"
    util = client.get("cpu_util")
    reasons = client.get("client_bottleneck_reasons") or []
    if util is not None and util < CLIENT_CPU_IDLE and not any(
            r.startswith("client CPU") for r in reasons):
        verdict = (f"requests went out late ({'; '.join(reasons)}) although the client used "
                   f"only {util:.0%} of a core: its process was waiting for a CPU, not working "
                   "(a busy machine: other processes, or the engine, sharing few cores), so "
                   "latencies include that wait")
    else:
        verdict = (f"the client, not the server, was the bottleneck of this run "
                   f"({'; '.join(reasons)}): its latencies include the client's own queueing; "
                   "use more executor.workers or a lower max_concurrency")
    return f"Client self-measurement. WARNING: {verdict}. Evidence: {evidence}.{server}{shared}"


SERVER_FIELDS: tuple[tuple[str, str], ...] = runs.fields("server")


#: fewer /metrics samples than this: no peaks in the server table
MIN_PEAK_SAMPLES = 3


def server_table(data: Any) -> pd.DataFrame:
    """The server's ``/metrics`` evidence (``summary["server"]``), peaks only from at least
    ``MIN_PEAK_SAMPLES`` samples."""
    server = as_summary(data).get("server") or {}
    few = (server.get("samples") or 0) < MIN_PEAK_SAMPLES
    fields = [(label, key) for label, key in SERVER_FIELDS
              if not (few and key.startswith("peak_"))]
    labels = [label for label, _ in fields]
    values = [server.get(key) for _, key in fields]
    for name, info in (server.get("series") or {}).items():  # further /metrics series
        title = series_title(name, info)
        labels += [f"{title}: mean"] if few else [f"{title}: peak", f"{title}: mean"]
        values += [info.get("mean")] if few else [info.get("peak"), info.get("mean")]
    return value_table(labels, values, "server")


def series_title(name: str, info: Mapping[str, Any]) -> str:
    """A further series as a report names it: its label (or Prometheus name), the unit,
    and "simulated" when a simulated exporter served it."""
    title = str(info.get("label") or name)
    if info.get("unit"):
        title += f" ({info['unit']})"
    if info.get("simulated"):
        title += ", simulated"
    return title


def server_caption(data: Any) -> str:
    """Caption of ``server_table``: where the numbers come from, or why there are none."""
    server = as_summary(data).get("server") or {}
    if not server.get("engine"):
        return (
            "No server-side evidence: the server exported no known /metrics series "
            "(or backend.scrape_interval_s was off)"
        )
    more = ""
    if server.get("series"):
        more = f"; {len(server['series'])} further series (backend.metrics_series/metrics_urls)"
    peaks = ("; peaks are over the samples," if (server.get("samples") or 0) >= MIN_PEAK_SAMPLES
             else ": too few for peaks, which are left out (a longer run, or a shorter "
             "backend.scrape_interval_s, gives them);")
    return (f"Server-side evidence from {server.get('samples')} /metrics samples "
            f"({server['engine']} names){peaks} preemptions over the run{more}")


WORKER_COLUMNS: tuple[str, ...] = (
    "requests", "prompt_share", "hit_rate", "ttft_ms_p50", "ttft_ms_p90",
    "waiting_at_arrival_mean", "waiting_at_arrival_max",
)  # fmt: skip


def worker_table(data: Any) -> pd.DataFrame:
    """Per worker of a simulated cluster (``summary["workers"]``, docs/cluster.md)."""
    rows = as_summary(data).get("workers") or []
    df = pd.DataFrame(rows, columns=["worker", *WORKER_COLUMNS])
    df = df.set_index("worker")
    return named(df, "workers")


#: the agent-task figures of ``summary["agent_tasks"]`` and their row labels
AGENT_ROWS = (
    ("makespan_ms", "makespan (ms): admitted → last sub-agent ended"),
    ("engine_ms", "in the engine (ms): a request of the task in flight"),
    ("tool_ms", "outside the engine (ms): tools, spawn delays, the harness"),
    ("width", "width: most children one agent spawned"),
    ("depth", "depth: sub-agent levels below the root"),
    ("units", "agents: the root and its sub-agents"),
)


def agent_table(data: Any) -> pd.DataFrame:
    """``AGENT_ROWS`` and each depth's TTFT, p50/p90/p99/max over the tasks."""
    agents = as_summary(data).get("agent_tasks") or {}
    cols = ["p50", "p90", "p99", "max"]
    rows = {words: [(agents.get(key) or {}).get(c) for c in cols] for key, words in AGENT_ROWS}
    for depth, d in (agents.get("ttft_ms_by_depth") or {}).items():
        rows[f"TTFT at depth {depth} (ms)" + (" (roots)" if depth == "0" else "")] = [
            d.get(c) for c in cols]
    df = pd.DataFrame.from_dict(rows, orient="index", columns=cols) if agents else \
        pd.DataFrame(columns=cols)
    df.index.name = "per agent task"
    return named(df, "agents")


def agent_caption(data: Any) -> str:
    agents = as_summary(data).get("agent_tasks")
    if not agents:
        return "No sub-agents: every unit was its own agent task"
    return (f"Agent tasks ({agents['tasks']}): a root session and its sub-agents, from its "
            "admission to its last sub-agent's end; engine vs tool time split the makespan")


def router_table(summaries: Mapping[str, Any]) -> pd.DataFrame:
    """Runs on a simulated cluster side by side, a row per label: hits, TTFT, worker spread."""
    rows = []
    for label, data in summaries.items():
        s = as_summary(data)
        workers = s.get("workers") or []
        reqs = [w["requests"] for w in workers]
        planned = s.get("planned_prefix_hit_rate")
        actual = s.get("actual_prefix_hit_rate")
        rows.append({
            "run": label, "actual_hit": actual, "planned_hit": planned,
            "recovered": actual / planned if actual is not None and planned else None,
            "ttft_ms_p50": s["ttft_ms"]["p50"], "ttft_ms_p90": s["ttft_ms"]["p90"],
            "workers": len(workers),
            "requests_per_worker_min": min(reqs) if reqs else None,
            "requests_per_worker_max": max(reqs) if reqs else None,
        })  # fmt: skip
    return named(pd.DataFrame(rows).set_index("run"), "routers")


def mapping_table(d: Mapping[str, Any], name: str, *, key: str = "name") -> pd.DataFrame:
    """A two-column view of a flat mapping (e.g. ``trace_stats(...).summary``)."""
    return value_table([str(k) for k in d], list(d.values()), name, key)


def value_table(labels: Sequence[str], values: Sequence[Any], name: str,
                index_name: str | None = None) -> pd.DataFrame:
    """One ``value`` column (any type) over the row ``labels``; the index named
    ``index_name`` (default: ``name``)."""
    df = pd.DataFrame({"value": pd.Series(list(values), dtype=object)})
    df.index = pd.Index(labels, name=index_name or name)
    return named(df, name)


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not math.isnan(v) else 0


def as_float(v: Any) -> float:
    """``v`` as a float; NaN for None, a mapping or what is not a number."""
    if v is None or isinstance(v, Mapping):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


# -- gauges from the server's /metrics samples ---------------------------------------------
#: each gauge under every engine's names (``workbench.catalogs.series``)
GAUGES: dict[str, tuple[str, ...]] = {
    role: series.names(role) for role in ("waiting", "running", "kv_usage")
}
_TIME_KEYS = ("t_ns", "time_ns", "ts_ns")


def _gauge(sample: Mapping[str, Any], names: Sequence[str]) -> float:
    """A gauge in one sample (wide ``{name: v}``, labelled ``name{..}`` keys summed,
    or nested under ``"metrics"``); NaN when the sample lacks it."""
    src = sample["metrics"] if isinstance(sample.get("metrics"), Mapping) else sample
    for name in names:
        vals = [float(v) for k, v in src.items() if k == name or k.startswith(name + "{")]
        if vals:
            return sum(vals)
    return math.nan


def server_gauges(timeline: Sequence[Mapping[str, Any]], t0_ns: int | None) -> pd.DataFrame:
    """Columns ``t_s`` (seconds since ``t0_ns``), ``waiting``, ``running``, ``kv_usage`` (0–1)."""
    rows = []
    for sample in timeline:
        t = next((sample[k] for k in _TIME_KEYS if k in sample), None)
        if t is None:
            continue
        gauges = {g: _gauge(sample, names) for g, names in GAUGES.items()}
        rows.append({"t_s": (int(t) - (t0_ns or 0)) / 1e9, **gauges})
    return pd.DataFrame(rows, columns=["t_s", *GAUGES])


# -- display --------------------------------------------------------------------------------
#: rows or columns of rates: 3 significant figures (``sig``)
RATE_LABELS = frozenset((
    "requests/s", "output tokens/s", "total tokens/s", "request_throughput_rps",
    "output_token_throughput_tps", "total_token_throughput_tps", "goodput_rps",
    "goodput (req/s)", "throughput (req/s)",
))  # fmt: skip
#: rows or columns of counts (some stored as float): whole numbers as integers
COUNT_LABELS = frozenset((
    "requests", "ok", "errors", "skipped", "cancelled", "count", "n", "repeats",
    "preemptions", "points done", "points skipped", "workers", "over requests",
    "peak running requests", "peak waiting requests", "/metrics samples", "failed scrapes",
    "requests_per_worker_min", "requests_per_worker_max", "in flight, peak",
))  # fmt: skip


#: the index name of a frame whose rows code selects by a key a reader does not read
#: (``compare.change_table``: the metric's name, ``ttft_ms``, beside its label ``TTFT
#: (ms)``): hidden in the HTML as a RangeIndex is, kept in the export, so no label is ever
#: parsed back into a name (docs/metrics.md, "Numbers in reports")
KEY_INDEX = "key"


@dataclass(frozen=True)
class Table:
    """A DataFrame shown by docs/metrics.md, "Numbers in reports" (``RATE_LABELS``,
    ``COUNT_LABELS``, else ``digits`` decimals); ``render_report`` exports ``frame``."""

    frame: pd.DataFrame
    name: str
    digits: int = 3
    caption: str | None = None

    def cell(self, v: Any, labels: set[str] | frozenset[str] = frozenset()) -> str:
        """A cell as a reader sees it under its row and column ``labels`` (the rules above)."""
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if isinstance(v, bool | np.bool_):
            return str(bool(v))
        if isinstance(v, int | np.integer):
            return str(int(v))
        if isinstance(v, float | np.floating):
            if math.isfinite(v) and labels & RATE_LABELS:
                return sig(float(v))
            if math.isfinite(v) and labels & COUNT_LABELS and float(v).is_integer():
                return str(int(v))
            return f"{float(v):.{self.digits}f}"
        return str(v)

    def formatted(self) -> pd.DataFrame:
        """Every cell as the text a reader sees (``cell``)."""
        out = pd.DataFrame(index=self.frame.index, columns=self.frame.columns, dtype=object)
        for j, col in enumerate(self.frame.columns):
            for i, row in enumerate(self.frame.index):
                out.iat[i, j] = self.cell(self.frame.iat[i, j], {str(col), str(row)})
        return out

    def html(self) -> str:
        """Every cell, label and the caption HTML-escaped (ids and server text stay text);
        a table without rows is its caption, as a sentence."""
        if self.frame.empty:
            return f'<p class="wb-empty">{html.escape(self.caption or "No rows.")}</p>'
        shown = self.formatted()
        shown.columns = pd.Index([header_text(c) for c in shown.columns])
        styler = shown.style.format(lambda v: html.escape(str(v)))
        styler = styler.format_index(escape="html", axis=0).format_index(escape="html", axis=1)
        if isinstance(self.frame.index, pd.RangeIndex) or self.frame.index.name == KEY_INDEX:
            styler = styler.hide(axis="index")
        else:  # the index name would take a header row of its own
            styler = styler.hide(axis="index", names=True)
        if self.caption:
            styler = styler.set_caption(html.escape(self.caption))
        styler = styler.set_table_attributes('class="wb-table"')
        return styler.to_html()

    def payload(self) -> dict[str, Any]:
        """JSON-safe (NaN → null) split orientation, with the index name kept."""
        data = json.loads(self.frame.to_json(orient="split", double_precision=15))
        return {"name": self.name, "index_name": self.frame.index.name, **data}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/html": self.html(),
            "text/plain": self.frame.to_string(),
            TABLE_MIME: self.payload(),
        }


_HEADER_WORDS = {
    "planned_prefix_hit_rate": "planned hit rate", "actual_prefix_hit_rate": "actual hit rate",
    "hit_rate": "hit rate", "prompt_share": "share of prompt tokens",
    "actual_hit": "actual hit rate", "planned_hit": "planned hit rate",
}


def header_text(col: Any) -> str:
    """A column's header in the HTML (exports keep the key): ``ttft_ms_p90`` → ``TTFT p90
    (ms)``, ``waiting_at_arrival_mean`` → ``waiting at arrival (mean)``."""
    key = str(col)
    if key in _HEADER_WORDS:
        return _HEADER_WORDS[key]
    metric, stat = _metric_stat(key)
    if metric is not None:  # the catalog's label and unit
        return catalog.with_unit(metric.name, stat.replace("_", " "))
    head, _, stat = key.rpartition("_")
    if head and stat in ("mean", "max", "min", "p50", "p90", "p99"):
        return f"{head.replace('_', ' ')} ({stat})"
    return key.replace("_", " ")


def _metric_stat(key: str) -> tuple[catalog.Metric | None, str]:
    """``ttft_ms_p90`` → (the catalog's TTFT row, ``"p90"``); (None, "") for a key that is
    no catalog metric with a statistic after it (the longest name first: ``itl_max_ms``)."""
    for m in sorted(catalog.CATALOG, key=lambda m: -len(m.name)):
        if key.startswith(m.name + "_"):
            return m, key[len(m.name) + 1:]
    return None, ""


def show(df: pd.DataFrame, name: str | None = None, *, digits: int = 3,
         caption: str | None = None) -> Table:
    """Wrap ``df`` for display (``name`` defaults to ``df.attrs["name"]``)."""
    return Table(df, name or str(df.attrs.get("name", "table")), digits, caption)


def frame_from_payload(payload: Mapping[str, Any]) -> pd.DataFrame:
    """Inverse of ``Table.payload`` (what ``render_report`` turns into CSV)."""
    df = pd.DataFrame(payload["data"], index=payload["index"], columns=payload["columns"])
    df.index.name = payload.get("index_name")
    return df


# -- what was run, what went wrong (the replay report's first and last word) ----------------
ENGINE_SHOWN = ("block_size", "num_blocks", "max_num_batched_tokens", "max_num_seqs",
                "max_model_len", "enable_prefix_caching", "speedup", "mode",
                "prefill_coeffs", "decode_coeffs", "decode_floor_ms")
# 0 unless an engine config (a calibration) sets them: shown only then (docs/calibration.md)
ENGINE_SHOWN_IF_SET = ("decode_seq_ms", "request_overhead_ms", "intake_ms", "idle_wake_ms")


def config_table(manifest: RunManifest) -> pd.DataFrame:
    """The four axes as resolved, the target and its engine config, the trace's sha256."""
    trace, given = manifest.trace, manifest.section("trace")  # (given: as configured)
    arrival = manifest.section("arrival")
    target = manifest.target or {}
    given_fmt = given.get("format")
    fmt = trace.get("format")
    rows: list[tuple[str, Any]] = [
        ("trace", trace.get("path")),
        ("trace sha256", trace.get("sha256")),
        ("trace units / rounds", f"{trace.get('units')} / {trace.get('rounds')}"),
        ("1 format", f"{fmt} (detected)" if given_fmt in (None, "auto") else fmt),
        ("1 max items", given.get("max_items") or "all"),
        *([("1 window", _window_text(trace["window"]))] if trace.get("window") else []),
        *[(f"1 reader {k}", "none" if v is None else v)
          for k, v in (trace.get("reader") or {}).items()],
        ("2 context policy", manifest.policy or "none (prefixes as the trace gives)"),
        ("3 arrival", arrival.get("mode")),
        ("3 rate (units/s)", arrival.get("rate") or "as the trace times it"),
        ("3 max concurrency", arrival.get("max_concurrency") or "no cap"),
        *([("3 max streams", arrival["max_streams"])] if arrival.get("max_streams") else []),
        *([("3 session budget (s)", arrival["session_budget_s"])]
          if arrival.get("session_budget_s") else []),
        ("3 warm-up / tool-wait scale", f"{arrival.get('warmup', 0)} / "
                                        f"{arrival.get('tool_wait_scale', 1.0)}"),
        ("3 output length", arrival.get("output_len")),
        ("4 backend", manifest.section("backend").get("name")),
        ("target", manifest.section("target").get("url")),
    ]
    engine = target.get("engine") or {}
    if target.get("kind") == "sim" or engine:
        proc = target.get("engine_process") or {}
        where = ("its own process" if proc.get("own_process")
                 else "the client's event loop" if proc else "?")
        rows.append(("target engine runs in", where))
        rows += [(f"target engine {k}", _knob(engine[k])) for k in ENGINE_SHOWN if k in engine]
        rows += [(f"target engine {k}", _knob(engine[k])) for k in ENGINE_SHOWN_IF_SET
                 if engine.get(k)]  # fmt: skip
    rows.append(("seed", manifest.config.get("seed")))
    return value_table([k for k, _ in rows], [text(v) for _, v in rows], "config", "setting")


def text(v: Any) -> str:
    """A cell as text: a dash for None."""
    return "–" if v is None else str(v)


def _knob(v: Any) -> Any:
    """A float knob or coefficient list in 4 significant digits (a fit's 17 are noise)."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple) and v and all(isinstance(x, float) for x in v):
        return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"
    return v


def error_class(status: str, error: Any, http_status: Any) -> str:
    """A record's error class: its status, then ``HTTP <status>`` for an answer the server
    refused, else the exception name or rule (``metrics.deviations.failure_class``: the
    headline's classes)."""
    return f"{status}: {failure_class(error, _code(http_status))}"


def _code(http_status: Any) -> int | None:
    """A stored ``http_status`` as an int (None: none, or NaN in a frame)."""
    return int(http_status) if isinstance(http_status, int | float) and not (
        isinstance(http_status, float) and math.isnan(http_status)) else None


def error_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Requests that did not end ok, by class: count and one sample message each, saying
    what it adds to its class (``deviations.sample``, as the headline's parts do); a dash
    when it adds nothing."""
    cols = ["requests", "sample message"]
    bad = frame[frame["status"] != "ok"] if len(frame) else frame
    rows: dict[str, dict[str, Any]] = {}
    for status, error, code in zip(bad["status"], bad["error"],
                                   bad.get("http_status", [None] * len(bad)), strict=False):
        cls = failure_class(error, _code(code))
        key = f"{status}: {cls}"
        row = rows.setdefault(key, {"requests": 0,
                                      "sample message": deviations.sample(error, cls) or None})
        row["requests"] += 1
    df = pd.DataFrame.from_dict(rows, orient="index", columns=cols)
    df = df.sort_values("requests", ascending=False) if len(df) else df
    df["requests"] = df["requests"].astype(int)
    df.index.name = "error class"
    return named(df, "errors")


def error_caption(table: pd.DataFrame, requests: int) -> str:
    if not len(table):
        return f"Errors: none (all {requests} requests ended ok)"
    bad = int(table["requests"].sum())
    return f"Errors: {bad} of {requests} requests did not end ok, by class (one sample each)"


#: the band table's columns; their headers are ``header_text``'s, as every table's
BAND_SHOWN: tuple[str, ...] = (
    "requests", "errors", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p50",
    "e2e_ms_p50", "actual_prefix_hit_rate", "planned_prefix_hit_rate",
)  # fmt: skip


def band_table(by_band: pd.DataFrame) -> pd.DataFrame:
    """``by_input_band`` narrowed to what fits a page: counts, TTFT/TPOT/E2E, hit rates."""
    keep = [c for c in BAND_SHOWN if c in by_band.columns]
    df = by_band.set_index("band")[keep] if "band" in by_band else by_band
    df.index.name = "prompt tokens"
    return named(df, "by_band")


def _window_text(win: dict[str, Any]) -> str:
    """``trace.offset``/``max_items``: which units of the file ran (traces.graph.window)."""
    start = int(win.get("offset", 0))
    total = win.get("units_in_file")  # None: the file was read only up to the window's end
    return (f"units {start}..{start + int(win.get('count', 0)) - 1} of "
            f"{'a file read up to them' if total is None else total} (file order, contiguous)")
