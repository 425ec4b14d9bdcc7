"""Run-level metrics by scanning ``records.parquet`` with DuckDB: no record held in Python.

``workbench.metrics.summarize`` parses every record into a pandas frame, which
for a run of millions of requests costs gigabytes. The functions here compute
the same numbers as SQL aggregates over the columnar copy of the records
(``workbench.storage.columnar``; built from ``records.jsonl`` on first use, in
streaming batches): DuckDB reads the Parquet file column by column and holds
only what an aggregate needs (``quantile_cont`` keeps one float per ok request
of the one metric it is computing, 8 MB per million requests).

Definitions are ``summarize``'s, to the key: percentiles interpolate linearly
(``quantile_cont`` = numpy's default) over ok requests with a finite value; the
throughput window spans every dispatched request while numerators count
successes; hit rates are token-weighted; SLO attainment counts failed requests
against. One difference is forced by the storage choice: pooled ``itl_ms``
percentiles need every inter-token gap, which ``records.parquet`` keeps only
when written with ``token_times=True`` (then the gaps are ``unnest``-ed in SQL);
otherwise ``itl_ms`` has its exact mean, min, max and count (from per-request
gap sums) and ``None`` percentiles.

Without duckdb/pyarrow installed every function falls back to the in-memory
implementation (logged), so a notebook works either way on small runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.storage.scan import Scan, available

log = logging.getLogger(__name__)

PLAIN_METRICS: tuple[str, ...] = (
    "ttft_ms", "tpot_ms", "e2e_ms", "terminal_tail_ms", "completion_amortized_tpot_ms",
)  # fmt: skip
SUMMARY_ORDER: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                                  "terminal_tail_ms", "completion_amortized_tpot_ms")  # fmt: skip
BREAKDOWN_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
STATUS_KEYS: dict[str, str] = {"ok": "ok", "errors": "error", "skipped": "skipped",
                               "cancelled": "cancelled"}  # fmt: skip


def _finite(col: str) -> str:
    return f"{col} IS NOT NULL AND isfinite({col})"


def _describe_sql(col: str, where: str) -> str:
    return (
        f"SELECT avg({col}), quantile_cont({col}, [0.5, 0.9, 0.99]), min({col}), max({col}), "
        f"count({col}) FROM r WHERE status = 'ok' AND {_finite(col)}{where}"
    )


def _stats(row: tuple[Any, ...]) -> dict[str, Any]:
    mean, qs, lo, hi, n = row
    if not n:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None,
                "count": 0}  # fmt: skip
    return {"mean": float(mean), "p50": float(qs[0]), "p90": float(qs[1]), "p99": float(qs[2]),
            "min": float(lo), "max": float(hi), "count": int(n)}  # fmt: skip


def describe(scan: Scan, col: str, where: str = "") -> dict[str, Any]:
    """``summary.describe`` of one metric over ok requests (``where``: extra ``AND`` clause)."""
    if col == "itl_ms":
        return _describe_itl(scan, where)
    return _stats(scan.one(_describe_sql(col, where)))


def _describe_itl(scan: Scan, where: str) -> dict[str, Any]:
    if "itl_ms" in scan.columns:
        sql = (
            "SELECT avg(g), quantile_cont(g, [0.5, 0.9, 0.99]), min(g), max(g), count(g) FROM "
            f"(SELECT unnest(itl_ms) AS g FROM r WHERE status = 'ok'{where}) WHERE isfinite(g)"
        )
        return _stats(scan.one(sql))
    total, n, lo, hi = scan.one(
        "SELECT sum(itl_sum_ms), sum(itl_count), min(itl_min_ms), max(itl_max_ms) FROM r "
        f"WHERE status = 'ok' AND itl_count > 0{where}"
    )
    if not n:
        return _stats((None, None, None, None, 0))
    return {"mean": float(total) / int(n), "p50": None, "p90": None, "p99": None,
            "min": float(lo), "max": float(hi), "count": int(n)}  # fmt: skip


def counts(scan: Scan) -> dict[str, int]:
    cols = ", ".join(f"count(*) FILTER (WHERE status = '{s}')" for s in STATUS_KEYS.values())
    row = scan.one(f"SELECT count(*), {cols} FROM r")
    by_status = {k: int(v) for k, v in zip(STATUS_KEYS, row[1:], strict=True)}
    return {"requests": int(row[0]), **by_status}


def throughput(scan: Scan) -> dict[str, Any]:
    """``summary.throughput``: success numerators over the all-attempts window."""
    start, end = scan.one(
        "SELECT min(dispatch_ns), max(coalesce(end_ns, last_token_ns, dispatch_ns)) "
        "FROM r WHERE dispatch_ns IS NOT NULL"
    )
    n_ok, out_tok, prompt_tok = scan.one(
        "SELECT count(*), coalesce(sum(output_tokens), 0), coalesce(sum(prompt_len), 0) "
        "FROM r WHERE status = 'ok'"
    )
    dur = (int(end) - int(start)) / 1e9 if start is not None else 0.0

    def rate(n: int) -> float | None:
        return n / dur if dur > 0 else None

    out_tok, prompt_tok = int(out_tok), int(prompt_tok)
    return {
        "duration_s": dur if start is not None else None,
        "output_tokens": out_tok,
        "prompt_tokens": prompt_tok,
        "request_throughput_rps": rate(int(n_ok)),
        "output_token_throughput_tps": rate(out_tok),
        "total_token_throughput_tps": rate(out_tok + prompt_tok),
    }


# metrics.frame.cache_reported / cache_measured, in SQL (docs/measurement-rules.md)
_REPORTED = "cached_tokens_reported AND cached_tokens IS NOT NULL"
_MEASURED = f"status = 'ok' AND {_REPORTED} AND coalesce(prompt_tokens, 0) > 0"


def _ratio(num: Any, den: Any) -> float | None:
    return float(num) / float(den) if den is not None and float(den) > 0 else None


def prefix_hit_rates(scan: Scan, where: str = "") -> dict[str, Any]:
    """``summary.prefix_hit_rates`` (token-weighted; ``where``: extra ``AND`` clause)."""
    cached, prompt, m_pre, m_pp, n_meas = scan.one(
        "SELECT sum(cached_tokens), sum(prompt_tokens), sum(planned_prefix_tokens), "
        f"sum(planned_prompt_tokens), count(*) FROM r WHERE {_MEASURED}{where}"
    )
    pre, pp, n_rep, n_ok = scan.one(
        "SELECT sum(planned_prefix_tokens), sum(planned_prompt_tokens), "
        f"count(*) FILTER (WHERE status = 'ok' AND {_REPORTED}), "
        f"count(*) FILTER (WHERE status = 'ok') FROM r WHERE TRUE{where}"
    )
    actual, plan_meas = _ratio(cached, prompt), _ratio(m_pre, m_pp)
    return {
        "actual_prefix_hit_rate": actual,
        "planned_prefix_hit_rate": _ratio(pre, pp),
        "planned_prefix_hit_rate_measured": plan_meas,
        "prefix_hit_rate_delta": (
            actual - plan_meas if actual is not None and plan_meas is not None else None
        ),
        "measured_cache_requests": int(n_meas),
        "cache_reported_requests": int(n_rep),
        "cache_unreported_requests": int(n_ok) - int(n_rep),
        "cached_tokens": int(cached or 0),
    }


def warm_cache(scan: Scan, flush: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``metrics.isolation.warm_cache`` in SQL: over every row, warm-ups included (the
    units they primed are left out), whatever ``warmup`` the scan was opened with."""
    from workbench.metrics.isolation import verdict

    src = str(scan.path).replace("'", "''")
    allowed = (
        "(planned_prefix_tokens + folded_prefix_tokens "
        "+ greatest(coalesce(prompt_tokens, 0) - planned_prompt_tokens, 0))"
    )
    checked, beyond, excess = scan.one(
        f"WITH a AS (SELECT * FROM read_parquet('{src}')), "
        "firsts AS (SELECT *, row_number() OVER (PARTITION BY unit_ordinal, round_idx "
        "ORDER BY dispatch_ns NULLS LAST, request_id) AS k FROM a "
        f"WHERE NOT warmup AND status = 'ok' AND {_REPORTED}) "
        f"SELECT count(*), count(*) FILTER (WHERE cached_tokens > {allowed}), "
        f"coalesce(sum(greatest(cached_tokens - {allowed}, 0)), 0) FROM firsts WHERE k = 1 "
        "AND unit_ordinal NOT IN (SELECT unit_ordinal FROM a WHERE warmup)"
    )
    return verdict(int(checked), int(beyond), int(excess), flush)


def slo_attainment(
    scan: Scan, slo: Mapping[str, float], duration_s: float | None
) -> dict[str, Any]:
    """``summary.slo_attainment``: failed requests and unmeasured metrics count against."""
    from workbench.metrics.summary import SLO_METRICS

    unknown = sorted(set(slo) - set(SLO_METRICS))
    if unknown:
        raise ValueError(f"unknown SLO metric(s) {unknown}; valid: {', '.join(SLO_METRICS)}")
    conds = {m: f"(status = 'ok' AND {m} IS NOT NULL AND {m} <= {float(b)!r})"
             for m, b in slo.items()}  # fmt: skip
    joint = " AND ".join(conds.values()) or "status = 'ok'"
    parts = [f"count(*) FILTER (WHERE {c})" for c in conds.values()]
    row = scan.one(f"SELECT count(*), count(*) FILTER (WHERE {joint}), {', '.join(parts)} FROM r")
    n, attained = int(row[0]), int(row[1])
    per = {m: (int(v) / n if n else None) for m, v in zip(conds, row[2:], strict=True)}
    return {
        "bounds": {k: float(v) for k, v in slo.items()},
        "requests": n,
        "attained": attained,
        "attainment": per,
        "joint_attainment": attained / n if n else None,
        "goodput_rps": attained / duration_s if duration_s else None,
    }


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def summarize(
    run_dir: str | Path,
    slo: Mapping[str, float] | None = None,
    *,
    warmup: bool = False,
    ideal: float | None = None,
) -> dict[str, Any]:
    """``workbench.metrics.summarize`` of a stored run, by scanning instead of loading it."""
    if not available():
        log.info("duckdb/pyarrow not installed: summarizing %s in memory", run_dir)
        from workbench.metrics.summary import summarize as in_memory
        from workbench.storage.rundir import load

        return in_memory(load(run_dir), slo, warmup=warmup, ideal=ideal)
    from workbench.metrics.server_side import server_evidence
    from workbench.metrics.summary import (
        _manifest_get,
        client_bottleneck,
        isolation_fields,
        server_window_hit_rate,
    )
    from workbench.storage.rundir import MANIFEST, TIMELINE, read_json, read_jsonl

    with Scan(run_dir, warmup=warmup) as scan:
        d = scan.run_dir
        manifest = read_json(d / MANIFEST) if (d / MANIFEST).exists() else {}
        out: dict[str, Any] = {"warmup_included": warmup, **counts(scan)}
        for col in SUMMARY_ORDER:
            out[col] = describe(scan, col)
        out.update(throughput(scan))
        out.update(prefix_hit_rates(scan))
        ideal = ideal if ideal is not None else _manifest_get(manifest, "ideal_prefix_hit_rate")
        out["ideal_prefix_hit_rate"] = _num(ideal)
        timeline = read_jsonl(d / TIMELINE)
        out["server_prefix_hit_rate"] = server_window_hit_rate(timeline)
        out["server"] = server_evidence(timeline)
        out.update(isolation_fields(manifest, warm_cache(scan, manifest.get("cache_flush"))))
        slo = slo if slo is not None else _manifest_get(manifest, "slo")
        out["slo"] = slo_attainment(scan, slo, out["duration_s"]) if slo else None
    out["run_cancelled"] = bool(manifest.get("cancelled")) or manifest.get("status") == "cancelled"
    if isinstance(manifest.get("warmup"), Mapping):  # what the warm-up did (out of the metrics)
        out["warmup"] = dict(manifest["warmup"])
    out["run_status"] = manifest.get("status")  # "running" on disk: the run was killed
    client = manifest.get("client")
    if isinstance(client, Mapping):
        out["client"] = {**client, **client_bottleneck(client)}
        out["client_bottleneck"] = out["client"]["client_bottleneck"]
    return out


def _group_row(scan: Scan, where: str) -> dict[str, Any]:
    """``breakdown._group_row`` for the rows matching ``where`` (an ``AND`` clause)."""
    n, n_ok, n_err, out_tok = scan.one(
        "SELECT count(*), count(*) FILTER (WHERE status = 'ok'), "
        "count(*) FILTER (WHERE status = 'error'), "
        f"coalesce(sum(output_tokens) FILTER (WHERE status = 'ok'), 0) FROM r WHERE TRUE{where}"
    )
    row: dict[str, Any] = {"requests": int(n), "ok": int(n_ok), "errors": int(n_err),
                           "output_tokens": int(out_tok)}  # fmt: skip
    for col in BREAKDOWN_METRICS:
        s = describe(scan, col, where)
        row[f"{col}_mean"] = math.nan if s["mean"] is None else s["mean"]
        for q in ("p50", "p90", "p99"):
            row[f"{col}_{q}"] = math.nan if s[q] is None else s[q]
    rates = prefix_hit_rates(scan, where)
    for key in ("actual_prefix_hit_rate", "planned_prefix_hit_rate"):
        row[key] = math.nan if rates[key] is None else rates[key]
    return row


def by_round_index(run_dir: str | Path, *, warmup: bool = False) -> pd.DataFrame:
    """``breakdown.by_round_index``: ``first``, ``later``, then one row per round index."""
    if not available():
        from workbench.metrics.breakdown import by_round_index as in_memory
        from workbench.storage.rundir import load

        return in_memory(load(run_dir), warmup=warmup)
    with Scan(run_dir, warmup=warmup) as scan:
        idx = [int(i) for (i,) in scan.con.execute(
            "SELECT DISTINCT round_idx FROM r ORDER BY round_idx").fetchall()]  # fmt: skip
        parts = [("first", " AND round_idx = 0"), ("later", " AND round_idx >= 1")]
        parts += [(str(i), f" AND round_idx = {i}") for i in idx]
        return pd.DataFrame([{"group": name, **_group_row(scan, w)} for name, w in parts])


def sample_frame(
    run_dir: str | Path, n: int = 200_000, *, seed: int = 0, warmup: bool = False
) -> pd.DataFrame:
    """At most ``n`` records (all when the run is smaller; else a seeded reservoir sample)
    as a ``to_frame``-shaped DataFrame, for plots of distributions.

    A sample keeps distributions (CDFs, per-round TTFT) but not totals: a
    throughput timeline drawn from it is scaled by the sampled fraction.
    """
    from workbench.metrics.frame import COLUMNS, NS_COLUMNS

    with Scan(run_dir, warmup=warmup) as scan:
        total = scan.one("SELECT count(*) FROM r")[0]
        sample = "" if total <= n else f" USING SAMPLE reservoir({int(n)} ROWS) REPEATABLE ({seed})"
        cols = [c for c in COLUMNS if c in scan.columns]
        df = scan.df(f"SELECT {', '.join(cols)} FROM r{sample}")
    df = df.sort_values(["unit_ordinal", "round_idx"], kind="stable").reset_index(drop=True)
    for col in COLUMNS:
        if col not in df:
            df[col] = [[] for _ in range(len(df))] if col in _LIST_COLUMNS else None
    for col in NS_COLUMNS:
        df[col] = df[col].astype("Int64")
    for col in ("warmup", "cached_tokens_reported"):
        df[col] = df[col].astype(bool)
    df.attrs["sampled_from"] = int(total)
    return df[list(COLUMNS)]


_LIST_COLUMNS = frozenset(("token_times_ns", "token_counts", "itl_ms"))


def by_input_band(run_dir: str | Path, *, warmup: bool = False) -> pd.DataFrame:
    """``breakdown.by_input_band``: one row per prompt-length band, every band listed."""
    from workbench.metrics.breakdown import BAND_EDGES, BAND_LABELS

    if not available():
        from workbench.metrics.breakdown import by_input_band as in_memory
        from workbench.storage.rundir import load

        return in_memory(load(run_dir), warmup=warmup)
    with Scan(run_dir, warmup=warmup) as scan:
        rows = []
        for label, lo, hi in zip(BAND_LABELS, BAND_EDGES, BAND_EDGES[1:], strict=False):
            upper = "" if math.isinf(hi) else f" AND prompt_len < {int(hi)}"
            rows.append({"band": label, **_group_row(scan, f" AND prompt_len >= {int(lo)}{upper}")})
        return pd.DataFrame(rows)


# ---------------------------------------------------------------- report notebooks
MAX_REPORT_RECORDS = 200_000


def report_source(run_dir: str | Path, max_records: int = MAX_REPORT_RECORDS) -> Any:
    """What a report notebook plots for a stored run.

    A run of at most ``max_records`` records is loaded whole (``store.load``,
    exact as ever). A larger one is never loaded: this returns a seeded sample
    of ``max_records`` rows (``sample_frame``) whose ``attrs["run_dir"]`` tells
    ``report_summary``/``report_by_round``/``report_by_band`` to scan the
    whole run instead. Plots of distributions drawn from the sample are
    faithful; totals (a throughput timeline) are scaled by the sampled fraction.
    """
    from workbench.storage.rundir import load

    if available():
        import pyarrow.parquet as pq

        from workbench.storage import columnar

        n = pq.read_metadata(columnar.parquet_path(run_dir)).num_rows
        if n > max_records:
            df = sample_frame(run_dir, max_records)
            df.attrs["run_dir"] = str(run_dir)
            return df
    return load(run_dir)


def _scanned(source: Any) -> str | None:
    """The run directory to scan: a sampled ``report_source``, or a run whose records
    stayed on disk (``RunResult.records_on_disk``); None means compute in memory."""
    from workbench.records import RunResult

    if isinstance(source, RunResult) and source.records_on_disk:
        return source.run_dir
    return source.attrs.get("run_dir") if isinstance(source, pd.DataFrame) else None


def report_summary(source: Any) -> dict[str, Any]:
    """``summarize`` of a ``report_source`` (a scan of the whole run when it was sampled)."""
    from workbench.metrics.summary import summarize as in_memory

    run_dir = _scanned(source)
    return summarize(run_dir) if run_dir else in_memory(source)


def report_by_round(source: Any) -> pd.DataFrame:
    from workbench.metrics.breakdown import by_round_index as in_memory

    run_dir = _scanned(source)
    return by_round_index(run_dir) if run_dir else in_memory(source)


def report_by_band(source: Any) -> pd.DataFrame:
    from workbench.metrics.breakdown import by_input_band as in_memory

    run_dir = _scanned(source)
    return by_input_band(run_dir) if run_dir else in_memory(source)
