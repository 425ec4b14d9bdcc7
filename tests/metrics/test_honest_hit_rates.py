"""A request whose server reported no cached count is not a zero hit (in memory and Parquet).

The actual hit rate is taken over the requests that reported; the reported and
unreported counts stand beside it; with none reported it is None and the report
says so. The in-memory path (``summarize`` of records) and the Parquet path
(``metrics.scan`` over ``records.parquet``) must agree.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import workbench as wb
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics import by_round_index, summarize, to_frame
from workbench.metrics.files import save
from workbench.records import RequestRecord, RunResult
from workbench.report import tables
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
MS = 1_000_000


def rec(i: int, cached: int | None, reported: bool, **kw: Any) -> RequestRecord:
    base = 10_000_000_000 + i * 100 * MS
    fields: dict[str, Any] = {
        "run_id": "r", "request_id": f"q{i}", "unit_ordinal": i, "session_id": f"s{i}",
        "round_idx": i % 2, "backend": "openai", "policy": "trace-reported",
        "planned_prefix_tokens": 60, "planned_input_tokens": 40, "planned_output_tokens": 2,
        "dispatch_ns": base, "token_times_ns": [base + MS, base + 2 * MS],
        "token_counts": [1, 1], "end_ns": base + 3 * MS, "prompt_tokens": 100,
        "completion_tokens": 2, "cached_tokens": cached, "cached_tokens_reported": reported,
    }  # fmt: skip
    fields.update(kw)
    return RequestRecord(**fields)


def mixed() -> list[RequestRecord]:
    return [
        rec(0, 80, True),
        rec(1, 40, True),
        rec(2, 0, False),  # usage without cache detail: recorded 0, not reported
        rec(3, None, False),  # no usage at all
        rec(4, 100, True, status="error"),  # failed: neither reported nor counted
    ]


def _three_ways(tmp_path: Path, records: list[RequestRecord]) -> list[dict[str, Any]]:
    pytest.importorskip("pyarrow")
    from workbench.metrics import columns, scan

    result = RunResult("r", records)
    d = save(result, tmp_path / "run")
    columns.convert(d)
    import pyarrow.parquet as pq

    parquet = pq.read_table(d / "records.parquet").to_pandas()
    frame = to_frame(result)
    pd.testing.assert_series_equal(
        parquet["actual_hit"], frame["actual_hit"].astype(float), check_names=False,
        check_exact=True,
    )
    pd.testing.assert_frame_equal(by_round_index(result), scan.by_round_index(d),
                                  check_exact=True)  # fmt: skip
    return [summarize(result), scan.summarize(d)]


KEYS = ("actual_prefix_hit_rate", "cache_reported_requests", "cache_unreported_requests",
        "measured_cache_requests", "cached_tokens", "planned_prefix_hit_rate_measured")  # fmt: skip


def test_unreported_requests_are_left_out_not_counted_as_zero(tmp_path: Path) -> None:
    for s in _three_ways(tmp_path, mixed()):
        got = {k: s[k] for k in KEYS}
        assert got == {
            "actual_prefix_hit_rate": 120 / 200,  # not 120 / 400
            "cache_reported_requests": 2,
            "cache_unreported_requests": 2,
            "measured_cache_requests": 2,
            "cached_tokens": 120,
            "planned_prefix_hit_rate_measured": 0.6,
        }
    frame = to_frame(mixed())
    assert frame["actual_hit"].isna().tolist() == [False, False, True, True, False]


def test_none_reported_gives_null_and_the_report_says_so(tmp_path: Path) -> None:
    records = [rec(0, 0, False), rec(1, None, False)]
    for s in _three_ways(tmp_path, records):
        assert s["actual_prefix_hit_rate"] is None
        assert (s["cache_reported_requests"], s["cache_unreported_requests"]) == (0, 2)
        caption = tables.prefix_caption(s)
        assert "reported no cached-token count" in caption and "unknown" in caption
        table = tables.prefix_table(s)
        assert math.isnan(table.loc["actual (client)", "hit rate"])
        assert table.loc["actual (client)", "over requests"] == 0


def test_partial_reporting_is_named_in_the_caption() -> None:
    caption = tables.prefix_caption(summarize(mixed()))
    assert "2 of 4 ok requests" in caption


async def test_live_run_against_a_server_without_cache_detail() -> None:
    """vLLM without --enable-prompt-tokens-details sends usage with no cached count."""
    async with serve_sim(speedup=50.0, omit_cached_tokens=True) as sim:
        cfg = RunConfig.from_dict({
            "trace": SESSIONS,
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0},
            "backend": {"name": "openai", "preflight": False},
            "target": sim.base_url,
        })  # fmt: skip
        async with asyncio.timeout(60):
            result = await run_async(cfg)
    s = wb.summarize(result)
    assert s["ok"] == len(result.records) > 0
    assert all(not r.cached_tokens_reported for r in result.records)
    assert s["actual_prefix_hit_rate"] is None  # was 0.0: every round a "zero hit"
    assert s["cache_unreported_requests"] == s["ok"] and s["cache_reported_requests"] == 0
