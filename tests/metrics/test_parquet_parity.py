"""Independent check: the in-memory path and the Parquet path agree exactly on random records.

Each metric is defined once (``metrics.derive`` per request, the aggregates over
``metrics.columns.Columns``); the two paths differ in where the columns come
from: a ``to_frame`` DataFrame of ``RequestRecord`` objects, or ``records.parquet``
written from ``records.jsonl`` and read back one column at a time. Given the
same random records — failures, cancellations, warm-up records, zero-token
outputs, servers that did not report cached tokens (``None`` or a 0 with
``cached_tokens_reported`` false), prompt counts of 0 or missing, cached counts
above the prompt — they must give the same per-request columns, the same summary
(every key) and the same by-round and by-band tables, bit for bit. The one
forced difference: a Parquet file written without token lists has no pooled
``itl_ms`` percentiles (None) and its ITL mean is summed per request.
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

pytest.importorskip("pyarrow")
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


#: without token times in the parquet there is no ITL list: quantiles None, mean summed per row
NO_ITL_LISTS = {f"summary(warmup={w}).itl_ms.{q}" for w in (False, True)
                for q in ("p50", "p90", "p99", "mean")}  # fmt: skip


def same(a: Any, b: Any, where: str, token_times: bool) -> None:
    if not token_times and where in NO_ITL_LISTS:
        assert b is None or math.isclose(a, b, rel_tol=1e-12), (where, a, b)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), (where, a.keys() ^ b.keys())
        for k in a:
            same(a[k], b[k], f"{where}.{k}", token_times)
        return
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    assert type(a) is type(b), (where, a, b)
    assert a == b, f"{where}: in memory {a!r} != parquet {b!r}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_in_memory_and_parquet_paths_agree_exactly(recs: list[RequestRecord]) -> None:
    import pyarrow.parquet as pq

    from workbench.metrics import by_input_band, columns, derive, scan

    result = RunResult("r", recs)
    frame = to_frame(result)
    with tempfile.TemporaryDirectory() as tmp:
        d = save(result, Path(tmp) / "run")
        for token_times in (False, True):
            columns.convert(d, token_times=token_times)
            parquet = pq.read_table(d / "records.parquet").to_pandas()
            for col in derive.FLOAT_COLUMNS[:-3] + derive.INT_COLUMNS[:-1]:
                pd.testing.assert_series_equal(
                    parquet[col].astype(float), frame[col].astype(float),
                    check_names=False, obj=col, rtol=0, atol=0, check_exact=True,
                )  # fmt: skip
            if token_times:
                assert [list(g) for g in parquet["itl_ms"]] == frame["itl_ms"].tolist()
            for warm in (False, True):
                s_mem, s_pq = summarize(result, warmup=warm), scan.summarize(d, warmup=warm)
                same(s_mem, s_pq, f"summary(warmup={warm})", token_times)
                pd.testing.assert_frame_equal(
                    by_round_index(result, warmup=warm), scan.by_round_index(d, warmup=warm),
                    check_exact=True,
                )  # fmt: skip
                pd.testing.assert_frame_equal(
                    by_input_band(result, warmup=warm), scan.by_input_band(d, warmup=warm),
                    check_exact=True,
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
