"""Metrics over hand-built records with integer-ns timestamps (no I/O)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from workbench.backends.scrape import parse_metrics
from workbench.errors import ConfigError
from workbench.metrics import (
    by_input_band,
    by_round_index,
    in_flight_timeline,
    per_session,
    percentiles,
    server_window_hit_rate,
    steady_window,
    summarize,
    throughput_timeline,
    to_frame,
)
from workbench.records import RequestRecord, RunManifest, RunResult

MS = 1_000_000
S = 1_000_000_000


def rec(
    rid: str,
    dispatch_ms: float,
    events: list[tuple[float, int]],
    end_ms: float | None,
    **kw: Any,
) -> RequestRecord:
    """A record dispatched at ``dispatch_ms`` with stream events ``(ms, n_ids)``."""
    base = 10 * S  # perf_counter-like origin, far from zero
    defaults: dict[str, Any] = {
        "run_id": "r1",
        "request_id": rid,
        "unit_ordinal": 0,
        "session_id": "s0",
        "round_idx": 0,
        "backend": "openai-chat",
        "policy": None,
        "planned_prefix_tokens": 0,
        "planned_input_tokens": 100,
        "planned_output_tokens": 4,
        "cached_tokens_reported": True,  # the count is None unless a test sets it
    }
    defaults.update(kw)
    return RequestRecord(
        **defaults,
        dispatch_ns=base + int(dispatch_ms * MS),
        token_times_ns=[base + int(t * MS) for t, _ in events],
        token_counts=[n for _, n in events],
        end_ns=None if end_ms is None else base + int(end_ms * MS),
    )


def row(r: RequestRecord) -> dict[str, Any]:
    return to_frame([r]).iloc[0].to_dict()


def test_ttft_skips_events_without_token_ids_and_tpot_excludes_first_event() -> None:
    r = rec("a", 0, [(5, 0), (20, 2), (30, 1), (40, 1)], 45, first_token_ns=10 * S + 5 * MS)
    m = row(r)
    assert m["ttft_ms"] == 20.0
    assert m["output_tokens"] == 4  # Σ counts, no completion_tokens reported
    assert m["first_event_tokens"] == 2
    assert m["tpot_ms"] == pytest.approx((40 - 20) / (4 - 2))
    assert m["itl_ms"] == [10.0, 10.0]
    assert m["terminal_tail_ms"] == 5.0
    assert m["e2e_ms"] == 45.0
    assert m["completion_amortized_tpot_ms"] == pytest.approx((45 - 20) / 3)


def test_ttft_is_first_token_event_even_when_it_came_late() -> None:
    m = row(rec("a", 100, [(350, 1), (360, 1)], 370))
    assert m["ttft_ms"] == 250.0
    assert m["tpot_ms"] == 10.0


def test_tpot_undefined_for_one_token_and_one_event() -> None:
    one_token = row(rec("a", 0, [(10, 1)], 12))
    assert math.isnan(one_token["tpot_ms"])
    assert math.isnan(one_token["completion_amortized_tpot_ms"])
    one_burst = row(rec("b", 0, [(10, 3)], 12))
    assert math.isnan(one_burst["tpot_ms"])
    assert one_burst["itl_ms"] == []


def test_completion_tokens_override_stream_count_in_tpot() -> None:
    m = row(rec("a", 0, [(10, 1), (20, 1)], 25, completion_tokens=5))
    assert m["output_tokens"] == 5
    assert m["tpot_ms"] == pytest.approx(10 / 4)


def test_lags_prefix_fields_and_missing_times() -> None:
    r = rec(
        "a",
        0,
        [],
        None,
        planned_prefix_tokens=75,
        planned_input_tokens=25,
        prompt_tokens=100,
        cached_tokens=64,
        scheduled_ns=9 * S,
        released_ns=9 * S + 2 * MS,
        admitted_ns=9 * S + 7 * MS,
        status="error",
    )
    m = row(r)
    assert m["arrival_release_lag_ms"] == 2.0
    assert m["admission_lag_ms"] == 7.0
    assert m["planned_hit"] == 0.75
    assert m["actual_hit"] == 0.64
    assert m["hit_delta"] == pytest.approx(-0.11)
    assert math.isnan(m["ttft_ms"]) and math.isnan(m["e2e_ms"])


def test_ns_columns_stay_exact_integers() -> None:
    r = rec("a", 0, [(1, 1)], 2)
    r.dispatch_ns = 2**62 + 1
    df = to_frame([r])
    assert str(df["dispatch_ns"].dtype) == "Int64"
    assert int(df["dispatch_ns"].iloc[0]) == 2**62 + 1
    assert df["first_token_ns"].isna().all()


def test_empty_frame_has_every_column() -> None:
    df = to_frame([])
    assert {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "actual_hit"} <= set(df.columns)
    s = summarize(RunResult("r", []))
    assert s["requests"] == 0 and s["ttft_ms"]["count"] == 0 and s["duration_s"] is None


def test_throughput_window_spans_failures_numerators_count_successes() -> None:
    ok = rec("ok", 0, [(100, 1), (1000, 9)], 1000, prompt_tokens=100, completion_tokens=10)
    bad = rec("bad", 500, [], 3000, status="error", prompt_tokens=50)
    skipped = rec("skip", 0, [], None, status="skipped")
    skipped.dispatch_ns = None
    s = summarize(RunResult("r1", [ok, bad, skipped]))
    assert s["duration_s"] == pytest.approx(3.0)
    assert s["request_throughput_rps"] == pytest.approx(1 / 3)
    assert s["output_token_throughput_tps"] == pytest.approx(10 / 3)
    assert s["total_token_throughput_tps"] == pytest.approx(110 / 3)
    assert (s["requests"], s["ok"], s["errors"], s["skipped"], s["cancelled"]) == (3, 1, 1, 1, 0)


def test_latency_stats_over_ok_requests_and_pooled_itl() -> None:
    recs = [rec(f"r{i}", 0, [(10 * (i + 1), 1), (10 * (i + 1) + 4, 1)], 100) for i in range(5)]
    recs.append(rec("bad", 0, [(1, 1), (2, 1)], 5000, status="error"))
    s = summarize(RunResult("r1", recs))
    assert s["ttft_ms"] == {
        "mean": 30.0,
        "p50": 30.0,
        "p90": pytest.approx(46.0),
        "p99": pytest.approx(49.6),
        "min": 10.0,
        "max": 50.0,
        "count": 5,
    }
    assert s["itl_ms"]["count"] == 5 and s["itl_ms"]["mean"] == 4.0
    assert s["e2e_ms"]["max"] == 100.0  # the failed request is not a latency sample


def test_warmup_excluded_by_default() -> None:
    w = rec("w", 0, [(1, 1)], 2, warmup=True)
    m = rec("m", 10, [(20, 1)], 30)
    assert summarize(RunResult("r1", [w, m]))["requests"] == 1
    assert summarize(RunResult("r1", [w, m]), warmup=True)["requests"] == 2


def test_ok_rows_are_the_rows_the_latency_summary_is_over() -> None:
    """One rule (``ok_rows``) for the report's tables and plots, calibration and the CLI's
    ``--percentiles``: the run's rows (no warm-up) that ended ok, as the summary's."""
    from workbench.commands.replay import percentile_table
    from workbench.metrics.frame import ok_rows

    recs = [rec("w", 0, [(1, 1), (2, 1)], 3, warmup=True),  # faster than any measured one
            rec("bad", 0, [(5, 1), (6, 1)], 7, status="error"),
            *(rec(f"r{i}", 0, [(10 * (i + 1), 1), (10 * (i + 1) + 4, 1)], 100)
              for i in range(5))]
    result = RunResult("r1", recs)
    assert ok_rows(result)["request_id"].tolist() == [f"r{i}" for i in range(5)]
    s = summarize(result)
    table = percentile_table(result, "0,50")
    assert table["ttft_ms"] == {"p0": s["ttft_ms"]["min"], "p50": s["ttft_ms"]["p50"]} \
        == {"p0": 10.0, "p50": 30.0}


def test_prefix_hit_rates_exact() -> None:
    a = rec("a", 0, [(1, 1)], 2, planned_prefix_tokens=60, planned_input_tokens=40)
    a.prompt_tokens, a.cached_tokens = 100, 50
    b = rec("b", 0, [(1, 1)], 2, planned_prefix_tokens=160, planned_input_tokens=40)
    b.prompt_tokens, b.cached_tokens = 200, 150
    c = rec("c", 0, [], 2, planned_prefix_tokens=100, planned_input_tokens=100, status="error")
    c.prompt_tokens, c.cached_tokens = 200, 200  # failed: never counts as a hit
    d = rec("d", 0, [(1, 1)], 2, planned_prefix_tokens=0, planned_input_tokens=100)
    d.prompt_tokens = 100  # no cached count reported
    result = RunResult("r1", [a, b, c, d], manifest=RunManifest("r1", ideal_prefix_hit_rate=0.8))
    s = summarize(result)
    assert s["actual_prefix_hit_rate"] == 200 / 300
    assert s["planned_prefix_hit_rate"] == 320 / 600
    assert s["planned_prefix_hit_rate_measured"] == 220 / 300
    assert s["prefix_hit_rate_delta"] == pytest.approx(200 / 300 - 220 / 300)
    assert s["measured_cache_requests"] == 2
    assert s["ideal_prefix_hit_rate"] == 0.8
    assert summarize(result, ideal=0.9)["ideal_prefix_hit_rate"] == 0.9


def test_server_window_hit_rate_vllm_sglang_and_long_form() -> None:
    vllm = [
        {"t_ns": 0, 'vllm:prefix_cache_hits_total{engine="0"}': 10.0,
         'vllm:prefix_cache_queries_total{engine="0"}': 100.0},
        {"t_ns": 1, 'vllm:prefix_cache_hits_total{engine="0"}': 40.0,
         'vllm:prefix_cache_queries_total{engine="0"}': 160.0},
    ]  # fmt: skip
    assert server_window_hit_rate(vllm) == 0.5
    sglang = [
        {"metrics": {"sglang:cached_tokens_total": 0, "sglang:prompt_tokens_total": 0}},
        {"metrics": {"sglang:cached_tokens_total": 30, "sglang:prompt_tokens_total": 120}},
    ]
    assert server_window_hit_rate(sglang) == 0.25
    long = [
        {"name": "vllm:prefix_cache_hits_total", "value": 0},
        {"name": "vllm:prefix_cache_queries_total", "value": 0},
        {"name": "vllm:prefix_cache_hits_total", "value": 9},
        {"name": "vllm:prefix_cache_queries_total", "value": 10},
    ]
    assert server_window_hit_rate(long) == 0.9
    assert server_window_hit_rate([]) is None
    s = summarize(RunResult("r", [rec("a", 0, [(1, 1)], 2)], metrics_timeline=vllm))
    assert s["server_prefix_hit_rate"] == 0.5


def test_slo_failure_counts_against_and_goodput() -> None:
    fast = rec("fast", 0, [(100, 1), (120, 2)], 1000)  # ttft 100, tpot 10
    slow = rec("slow", 0, [(3000, 1), (3100, 1)], 3200)  # ttft 3000, tpot 100
    one = rec("one", 0, [(50, 1)], 60)  # tpot unmeasured
    bad = rec("bad", 0, [], 4000, status="error")
    s = summarize(RunResult("r1", [fast, slow, one, bad]), {"ttft_ms": 2000, "tpot_ms": 50})
    slo = s["slo"]
    assert slo["attainment"] == {"ttft_ms": 0.5, "tpot_ms": 0.25}
    assert slo["attained"] == 1
    assert slo["joint_attainment"] == 0.25
    assert slo["goodput_rps"] == pytest.approx(1 / 4.0)
    # every SLO-able metric of the catalog: itl_ms bounds the request's largest gap (20 ms)
    itl = summarize(RunResult("r1", [fast, one]), {"itl_ms": 50})["slo"]["attainment"]
    assert itl == {"itl_ms": 1.0}  # "one" has no gap: nothing in it breaks the bound
    assert summarize(RunResult("r1", [fast]), {"itl_ms": 5})["slo"]["attainment"] == {"itl_ms": 0}
    with pytest.raises(ConfigError, match="ttfb_ms"):
        summarize(RunResult("r1", [fast]), {"ttfb_ms": 5})


def test_slo_from_manifest_and_summary_is_strict_json() -> None:
    r = RunResult("r1", [rec("a", 0, [(10, 1)], 20)],
                  manifest=RunManifest.from_dict({"config": {"slo": {"e2e_ms": 5}}}))
    s = summarize(r)
    assert s["slo"]["joint_attainment"] == 0.0
    json.dumps(s, allow_nan=False)


def _session_records() -> list[RequestRecord]:
    # unit 0: rounds 0,1 (prompt 1000, 5000); unit 1: round 0 (prompt 40000) fails
    r0 = rec("u0r0", 0, [(100, 1), (200, 9)], 200, prompt_tokens=1000, completion_tokens=10)
    r1 = rec("u0r1", 1200, [(1250, 1), (1300, 9)], 1300, round_idx=1, prompt_tokens=5000)
    r1.completion_tokens = 10
    r2 = rec("u1r0", 0, [], 500, unit_ordinal=1, session_id="s1", prompt_tokens=40000)
    r2.status = "error"
    return [r0, r1, r2]


def test_by_round_index_and_input_band() -> None:
    rounds = by_round_index(_session_records()).set_index("group")
    assert list(rounds.index) == ["first", "later", "0", "1"]
    assert rounds.loc["first", "requests"] == 2 and rounds.loc["first", "errors"] == 1
    assert rounds.loc["later", "ttft_ms_p50"] == 50.0
    bands = by_input_band(_session_records()).set_index("band")
    assert list(bands.index) == ["0-2K", "2-8K", "8-16K", "16-32K", "32K+"]
    assert list(bands["requests"]) == [1, 1, 0, 0, 1]
    assert bands.loc["2-8K", "ttft_ms_mean"] == 50.0


def test_per_session_excludes_tool_waits() -> None:
    ps = per_session(_session_records()).set_index("unit_ordinal")
    # 20 tokens over 200 ms + 100 ms of request time; the 1000 ms gap is a tool wait
    assert ps.loc[0, "output_tps"] == pytest.approx(20 / 0.3)
    assert ps.loc[0, "rounds"] == 2
    assert ps.loc[1, "errors"] == 1 and ps.loc[1, "output_tokens"] == 0


def test_steady_window_uses_cap_and_unit_spans() -> None:
    recs = [
        rec(f"u{k}", 100 * k, [(100 * k + 5, 1)], 1000, unit_ordinal=k, admitted_ns=None)
        for k in range(4)
    ]
    arrival = {"arrival": {"max_concurrency": 4}}
    result = RunResult("r1", recs, manifest=RunManifest("r1", config=arrival))
    # active units at dispatch: 1,2,3,4 → with cap 4 only ≥ ceil(3.6)=4 qualifies
    assert list(steady_window(result)["request_id"]) == ["u3"]
    assert list(steady_window(recs, cap=3)["request_id"]) == ["u2", "u3"]
    assert list(steady_window(recs)["active_units"]) == [4]  # cap = max observed


def test_percentiles_helper() -> None:
    df = to_frame(_session_records())
    p = percentiles(df, "e2e_ms", (50, 100))
    assert list(p.columns) == ["p50", "p100"]
    assert p.loc["all", "p100"] == 500.0
    by = percentiles(df, "e2e_ms", (50,), by="round_idx")
    assert by.loc[1, "p50"] == 100.0


def test_throughput_and_in_flight_timelines() -> None:
    a = rec("a", 0, [(500, 2), (1500, 3)], 1600, completion_tokens=5)
    b = rec("b", 200, [], 2500, status="error")
    tl = throughput_timeline([a, b], bin_s=1.0)
    assert list(tl["t_s"]) == [0.0, 1.0, 2.0]
    assert list(tl["output_tokens"]) == [2, 3, 0]
    assert list(tl["completed"]) == [0, 1, 0] and list(tl["errors"]) == [0, 0, 1]
    fl = in_flight_timeline([a, b])
    assert list(fl["in_flight"]) == [1, 2, 1, 0]
    assert list(fl["t_s"]) == [0.0, 0.2, 1.6, 2.5]


#: two scrapes of a vLLM 0.8/0.9 V1 server: its prefix-cache counters before they were
#: renamed (vllm-project/vllm#18354, May 2025); vLLM 0.10/0.11 export both names
OLD_VLLM_PAGES = [
    "# TYPE vllm:gpu_prefix_cache_queries counter\n"
    f'vllm:gpu_prefix_cache_queries_total{{engine="0",model_name="m"}} {q}\n'
    "# TYPE vllm:gpu_prefix_cache_hits counter\n"
    f'vllm:gpu_prefix_cache_hits_total{{engine="0",model_name="m"}} {h}\n'
    for q, h in (("100.0", "10.0"), ("300.0", "110.0"))
]


def test_server_window_hit_rate_of_vllm_before_the_rename() -> None:
    timeline = [{"t_ns": i, **parse_metrics(page)[0]} for i, page in enumerate(OLD_VLLM_PAGES)]
    assert server_window_hit_rate(timeline) == 0.5
    # both names on one page (0.10, 0.11: the old ones deprecated): the new ones are read,
    # not both added; here they disagree, so the one read is known
    both = [{**old, "vllm:prefix_cache_hits_total": float(h),
             "vllm:prefix_cache_queries_total": 100.0 * (1 + i)}
            for i, (old, h) in enumerate(zip(timeline, (0, 25), strict=True))]
    assert server_window_hit_rate(both) == 0.25
