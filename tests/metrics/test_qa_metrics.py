"""Independent check: the three metric implementations agree exactly on random record sets.

pandas (``metrics.frame`` / ``metrics.summary`` / ``breakdown``), numpy
(``report.columnar``, the parquet's derived columns) and DuckDB (``metrics.scan``)
are given the same random records — failures, cancellations, warm-up records,
zero-token outputs, servers that did not report cached tokens (``None`` or a 0
with ``cached_tokens_reported`` false), prompt counts of 0 or missing, cached
counts above the prompt — and must give the same per-request columns, the same
summary and the same by-round table: counts, ``None`` and NaN exactly, floats to
the last few bits (means and quantiles are summed in another order).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.metrics import by_round_index, summarize, to_frame
from workbench.metrics.files import save
from workbench.records import RequestRecord, RunResult

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

MS = 1_000_000
maybe_int = st.one_of(st.none(), st.integers(0, 400))


@st.composite
def records(draw: st.DrawFn) -> list[RequestRecord]:
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        status = draw(st.sampled_from(["ok", "ok", "ok", "error", "cancelled"]))
        base = 10_000_000_000 + i * 50 * MS
        counts = draw(st.lists(st.integers(0, 3), max_size=5))
        gaps = draw(st.lists(st.integers(1, 20 * MS), min_size=len(counts), max_size=len(counts)))
        times, t = [], base + draw(st.integers(1, 30 * MS))
        for g in gaps:
            times.append(t)
            t += g
        dispatched = draw(st.booleans()) or status == "ok"
        out.append(RequestRecord(
            run_id="r", request_id=f"q{i}", unit_ordinal=i, session_id=f"s{i % 3}",
            round_idx=draw(st.integers(0, 3)), backend="openai", policy="trace-reported",
            planned_prefix_tokens=draw(st.integers(0, 300)),
            planned_input_tokens=draw(st.integers(0, 100)),
            planned_output_tokens=draw(st.integers(0, 8)),
            sent_prompt_tokens=draw(st.integers(0, 400)),
            scheduled_ns=base, released_ns=base + draw(st.integers(0, MS)),
            admitted_ns=base + draw(st.integers(0, MS)),
            dispatch_ns=base if dispatched else None,
            token_times_ns=times, token_counts=counts,
            end_ns=(t + draw(st.integers(0, MS))) if dispatched else None,
            prompt_tokens=draw(maybe_int), completion_tokens=draw(maybe_int),
            cached_tokens=draw(maybe_int), cached_tokens_reported=draw(st.booleans()),
            warmup=draw(st.booleans()) if i < 3 else False,
            status=status, error=None if status == "ok" else f"{status}: boom",
        ))  # fmt: skip
    return out


#: without token times in the parquet the scan has no ITL list: its quantiles are None
NO_ITL_QUANTILES = {f"summary(warmup={w}).itl_ms.{q}" for w in (False, True)
                    for q in ("p50", "p90", "p99")}  # fmt: skip


def same(a: Any, b: Any, where: str) -> None:
    if where in NO_ITL_QUANTILES and b is None:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() & b.keys():
            same(a[k], b[k], f"{where}.{k}")
        return
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return
        # quantiles and means are summed in a different order: the last bits may differ
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), f"{where}: {a!r} != {b!r}"
        return
    assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, (where, a, b)
    assert a == b, f"{where}: pandas {a!r} != duckdb {b!r}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_pandas_numpy_and_duckdb_agree_exactly(recs: list[RequestRecord]) -> None:
    from workbench.metrics import scan
    from workbench.storage import columnar

    result = RunResult("r", recs)
    with tempfile.TemporaryDirectory() as tmp:
        d = save(result, Path(tmp) / "run")
        columnar.convert(d)
        import pyarrow.parquet as pq

        parquet = pq.read_table(d / "records.parquet").to_pandas()
        frame = to_frame(result)
        for col in columnar.FLOAT_COLUMNS[:-3] + columnar.DERIVED_INT_COLUMNS[:-1]:
            pd.testing.assert_series_equal(
                parquet[col].astype(float), frame[col].astype(float),
                check_names=False, obj=col, rtol=0, atol=0, check_exact=True,
            )  # fmt: skip
        for warm in (False, True):
            s_pd, s_db = summarize(result, warmup=warm), scan.summarize(d, warmup=warm)
            same(s_pd, s_db, f"summary(warmup={warm})")
            assert s_pd.keys() <= s_db.keys() | {"run_id"}, s_pd.keys() - s_db.keys()
            pd.testing.assert_frame_equal(
                by_round_index(result, warmup=warm), scan.by_round_index(d, warmup=warm),
                check_dtype=False, check_exact=False, rtol=1e-12, atol=1e-15,
            )  # fmt: skip


def test_server_preemptions_survive_a_counter_reset_and_nan_gauges() -> None:
    """A server restarted mid-run starts its counters at 0 again: the preemptions are
    the counter's increases (Prometheus' reset rule), never negative; a NaN gauge
    (Prometheus text allows it) does not poison a peak."""
    from workbench.metrics.server_side import server_evidence

    nan = float("nan")
    rows = [
        {"t": 0, "metrics": {"vllm:num_preemptions_total": 10.0, "vllm:kv_cache_usage_perc": nan,
                             "vllm:num_requests_running": 1.0}},
        {"t": 1, "metrics": {"vllm:num_preemptions_total": 14.0, "vllm:kv_cache_usage_perc": 0.5,
                             "vllm:num_requests_running": 3.0}},
        {"t": 2, "error": "connection refused"},
        {"t": 3, "metrics": {"vllm:num_preemptions_total": 2.0, "vllm:kv_cache_usage_perc": 0.25,
                             "vllm:num_requests_running": nan}},
        {"t": 4, "metrics": {"vllm:num_preemptions_total": 5.0, "vllm:kv_cache_usage_perc": 0.75,
                             "vllm:num_requests_running": 2.0}},
    ]  # fmt: skip
    ev = server_evidence(rows)
    assert ev["engine"] == "vllm" and ev["samples"] == 4 and ev["scrape_errors"] == 1
    assert ev["preemptions"] == 4 + 2 + 3  # 10→14, reset to 2 (2 since the restart), →5
    assert ev["peak_kv_cache_usage"] == 0.75
    assert ev["peak_running_requests"] == 3


def test_the_server_window_hit_rate_survives_a_counter_reset() -> None:
    from workbench.metrics.summary import server_window_hit_rate

    hits, queries = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
    rows = [{"metrics": {hits: h, queries: q}} for h, q in [(100.0, 200.0), (150.0, 300.0),
                                                            (30.0, 100.0)]]  # fmt: skip
    assert server_window_hit_rate(rows) == (50 + 30) / (100 + 100)  # was (30-100)/(100-200)
