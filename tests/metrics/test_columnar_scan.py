"""records.parquet and the stored-run metrics agree with to_frame/summarize (small runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyarrow")

import pyarrow.parquet as pq

import workbench as wb
from workbench import data
from workbench.metrics import by_round_index, columns, derive, scan, summarize, to_frame
from workbench.metrics.files import save
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.storage import columnar

MS = 1_000_000
BASE = 10_000_000_000


def rec(i: int, events: list[tuple[float, int]], end_ms: float | None, **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {
        "run_id": "r1", "request_id": f"q{i}", "unit_ordinal": i // 2, "session_id": f"s{i // 2}",
        "round_idx": i % 2, "backend": "openai", "policy": "trace-reported",
        "planned_prefix_tokens": 50 * (i % 2), "planned_input_tokens": 100,
        "planned_output_tokens": 4, "scheduled_ns": BASE, "released_ns": BASE + MS,
        "admitted_ns": BASE + 2 * MS, "dispatch_ns": BASE + 3 * MS,
        "prompt_tokens": 100 + 50 * (i % 2), "cached_tokens": 48 * (i % 2),
        "cached_tokens_reported": True,
        "completion_tokens": sum(c for _, c in events) or None,
    }  # fmt: skip
    fields.update(kw)
    return RequestRecord(
        **fields,
        token_times_ns=[BASE + int(t * MS) for t, _ in events],
        token_counts=[c for _, c in events],
        end_ns=None if end_ms is None else BASE + int(end_ms * MS),
    )


def edge_records() -> list[RequestRecord]:
    """Every branch of the metric definitions: role-only chunks, 1-token outputs, errors..."""
    return [
        rec(0, [(5, 0), (10, 1), (12, 1), (15, 2)], 16),  # role-only first chunk
        rec(1, [(8, 3), (9, 1)], 9.5, cached_tokens=None),  # server gave no cached count
        rec(9, [(8, 1), (9, 1)], 9.5, cached_tokens=0, cached_tokens_reported=False),  # usage
        # without cache detail: recorded as 0 but not reported, so not a zero hit
        rec(2, [(7, 1)], 7.2),  # one token: tpot undefined
        rec(3, [], 20, first_token_ns=BASE + 6 * MS, completion_tokens=5),  # no event trace
        rec(4, [(6, 1)], None, status="error", error="boom", completion_tokens=None),
        rec(5, [], None, status="skipped", dispatch_ns=None, prompt_tokens=None,
            cached_tokens=None, completion_tokens=None, sent_prompt_tokens=0),
        rec(6, [(30, 2), (31, 2), (40, 1)], 41, completion_tokens=None, prompt_tokens=0),
        rec(7, [(4, 1), (5, 1)], 6, warmup=True),
        rec(8, [(4, 1), (6, 1), (9, 1)], 9, status="cancelled"),
    ]


def _close(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        assert math.isnan(b), (path, a, b)
    else:  # exact: both paths run the same definitions over the same column values
        assert a == b, (path, a, b)


def _run_dir(tmp_path: Path, records: list[RequestRecord], **manifest: Any) -> Path:
    result = RunResult("r1", records, manifest=RunManifest.from_dict(manifest))
    return save(result, tmp_path / "run")


@pytest.mark.parametrize("token_times", [False, True])
def test_parquet_columns_equal_to_frame(tmp_path: Path, token_times: bool) -> None:
    d = _run_dir(tmp_path, edge_records())
    table = pq.read_table(columns.convert(d, token_times=token_times, batch_rows=4)).to_pandas()
    ref = to_frame(edge_records())
    assert table["request_id"].tolist() == ref["request_id"].tolist()
    for col in (*derive.FLOAT_COLUMNS, *derive.INT_COLUMNS, "end_ns", "dispatch_ns"):
        if col in ref:
            np.testing.assert_allclose(table[col].to_numpy(float, na_value=np.nan),
                                       ref[col].to_numpy(float, na_value=np.nan),
                                       rtol=1e-12, equal_nan=True, err_msg=col)  # fmt: skip
    itl = ref["itl_ms"]
    assert table["itl_count"].tolist() == itl.map(len).tolist()
    np.testing.assert_allclose(table["itl_sum_ms"], itl.map(sum), rtol=1e-12)
    if token_times:
        assert [list(x) for x in table["itl_ms"]] == itl.tolist()
        assert [list(x) for x in table["token_counts"]] == ref["token_counts"].tolist()
    else:
        assert "token_times_ns" not in table


def test_jsonl_batches_are_cut_by_bytes_too(tmp_path: Path) -> None:
    """Large rows (a long stream's token times) make row-count batches large in memory:
    a batch also ends once it holds ``batch_bytes`` of JSON; every row, in order."""
    lines = [json.dumps({"i": i, "pad": "x" * (100 * (i % 7))}) + "\n" for i in range(60)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(lines))
    batches = [rows for rows, _ in columnar.iter_raw_batches(path, batch_rows=50,
                                                             batch_bytes=1500)]  # fmt: skip
    assert [r["i"] for b in batches for r, _ in b] == list(range(60))
    sizes = [sum(len(json.dumps(r)) + 1 for r, _ in b) for b in batches]
    longest = max(len(x) for x in lines)
    assert len(batches) > 2 and all(s < 1500 + longest for s in sizes)
    assert all(len(b) <= 50 for b in batches)


def test_parquet_the_same_whatever_the_batches(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, edge_records())
    whole = pq.read_table(columns.convert(d, token_times=True, out=tmp_path / "a.parquet"))
    cut = pq.read_table(columns.convert(d, token_times=True, batch_bytes=300,
                                        out=tmp_path / "b.parquet"))  # fmt: skip
    assert pq.ParquetFile(tmp_path / "b.parquet").num_row_groups > 2
    assert cut.equals(whole)


def test_scan_summary_equals_summarize_on_edge_cases(tmp_path: Path) -> None:
    slo = {"ttft_ms": 5.0, "e2e_ms": 12.0}
    d = _run_dir(tmp_path, edge_records(), ideal_prefix_hit_rate=0.4)
    columns.convert(d, token_times=True)
    result = wb.load(d)
    _close(summarize(result, slo), scan.summarize(d, slo))
    _close(summarize(result, warmup=True), scan.summarize(d, warmup=True))
    pd.testing.assert_frame_equal(by_round_index(result), scan.by_round_index(d),
                                  check_exact=True)  # fmt: skip


def test_scan_without_token_lists_keeps_exact_itl_mean(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, edge_records())
    ref, got = summarize(wb.load(d)), scan.summarize(d)  # parquet built on demand, no lists
    assert got["itl_ms"]["p50"] is None
    for k in ("mean", "min", "max", "count"):
        assert math.isclose(got["itl_ms"][k], ref["itl_ms"][k], rel_tol=1e-12)
    got.pop("itl_ms"), ref.pop("itl_ms")
    _close(ref, got)


def test_simulated_run_summary_and_rounds_agree(tmp_path: Path) -> None:
    cfg = wb.RunConfig.from_dict({
        "trace": {"path": str(data.path("tracelab/multi_session_large.csv")), "max_items": 12},
        "target": {"url": "sim"},
    })  # fmt: skip
    result = wb.simulate(cfg)
    d = save(result, tmp_path / "sim")
    columns.convert(d, token_times=True)
    _close(summarize(result), scan.summarize(d))
    pd.testing.assert_frame_equal(by_round_index(result), scan.by_round_index(d),
                                  check_exact=True)  # fmt: skip
    sample = scan.sample_frame(d, n=10)
    assert len(sample) == 10 and sample.attrs["sampled_from"] == len(result.records)
    again = scan.sample_frame(d, n=10)  # seeded: the same rows every time
    assert again["request_id"].tolist() == sample["request_id"].tolist()
    assert set(sample["request_id"]) <= {r.request_id for r in result.records}
    by_id = to_frame(result).set_index("request_id")
    for col in ("ttft_ms", "tpot_ms", "output_tokens"):  # the rows are the records' own
        np.testing.assert_array_equal(sample[col].to_numpy(float),
                                      by_id.loc[sample["request_id"], col].to_numpy(float))
    full = scan.sample_frame(d)
    assert sorted(full["request_id"]) == sorted(r.request_id for r in result.records)
    wb.plot(full, "cdf")


def test_parquet_rebuilt_when_jsonl_is_newer(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, edge_records()[:3])
    first = columns.parquet_path(d)
    assert pq.read_metadata(first).num_rows == 3
    save(RunResult("r1", edge_records()), d)
    import os

    os.utime(d / "records.jsonl", (first.stat().st_mtime + 5,) * 2)
    assert pq.read_metadata(columns.parquet_path(d)).num_rows == len(edge_records())


def test_by_input_band_scan_equals_in_memory(tmp_path: Path) -> None:
    from workbench.metrics import by_input_band

    d = _run_dir(tmp_path, edge_records())
    pd.testing.assert_frame_equal(by_input_band(wb.load(d)), scan.by_input_band(d),
                                  check_exact=True)  # fmt: skip


def test_replay_report_scans_a_run_larger_than_max_records(tmp_path: Path) -> None:
    from workbench.report.render import render_report

    cfg = wb.RunConfig.from_dict({
        "trace": {"path": str(data.path("tracelab/multi_session_large.csv")), "max_items": 6},
        "target": {"url": "sim"},
    })  # fmt: skip
    d = save(wb.simulate(cfg), tmp_path / "big")
    small = scan.report_source(d, max_records=10**6)
    assert isinstance(small, RunResult)  # small runs load whole, exactly as before
    sampled = scan.report_source(d, max_records=5)
    assert isinstance(sampled, pd.DataFrame) and len(sampled) == 5
    summary = scan.report_summary(sampled)
    assert summary["requests"] == len(small.records)  # the tables scan every record
    assert scan.report_by_round(sampled)["requests"].iloc[0] == (
        by_round_index(small)["requests"].iloc[0]
    )
    page = render_report("replay", {"run_dir": str(d), "max_records": 5}, tmp_path / "out")
    text = page.read_text()
    assert "Replay report" in text and f"{summary['ttft_ms']['p50']:.3f}" in text


def test_cluster_run_workers_are_the_same_from_parquet(tmp_path: Path) -> None:
    """The per-worker breakdown is defined once: the stored run's ``worker`` columns give
    the same ``summary["workers"]`` as the in-memory records' ``extra``."""
    from workbench.executors.virtual import simulate

    trace = str(data.path("tracelab/multi_session_example.csv"))
    result = simulate({"trace": trace}, engine={"workers": 3, "router": "prefix-aware"})
    d = save(result, tmp_path / "cluster")
    columns.convert(d, token_times=True)
    mem, stored = summarize(result), scan.summarize(d)
    assert len(mem["workers"]) >= 2  # the router spread the sessions
    assert stored["workers"] == mem["workers"]
    assert sum(w["requests"] for w in stored["workers"]) == len(result.records)
    table = pq.read_table(d / "records.parquet", columns=["worker", "worker_waiting"])
    assert table.column("worker").to_pylist() == [r.extra["worker"] for r in result.records]
    _close(mem, stored)


def test_attention_dp_ranks_break_down_the_same_stored_and_in_memory(tmp_path):
    """Under attention-DP each worker row lists its ranks (``dp_ranks``), from ``extra``
    in memory and from the stored run's ``dp_rank`` column alike; no ranks, no key."""
    from workbench.executors.virtual import simulate

    trace = str(data.path("tracelab/multi_session_example.csv"))
    result = simulate({"trace": trace}, engine={"workers": 2, "router": "round-robin", "dp": 2,
                                                "dp_placement": "round-robin"})
    d = save(result, tmp_path / "dp")
    columns.convert(d, token_times=True)
    mem, stored = summarize(result), scan.summarize(d)
    assert stored["workers"] == mem["workers"]
    for w in mem["workers"]:
        ranks = w["dp_ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert sum(r["requests"] for r in ranks) == w["requests"]
    plain = simulate({"trace": trace}, engine={"workers": 2, "router": "round-robin"})
    assert all("dp_ranks" not in w for w in summarize(plain)["workers"])
