"""Report figures, tables and run comparison on hand-built records (no sockets, no kernel)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from workbench.metrics import summarize
from workbench.records import RequestRecord, Round, RunManifest, RunResult, Unit, Workload
from workbench.report import compare, tables
from workbench.report.plots import KINDS, RUN_KINDS, ReportFigure, plot

MS = 1_000_000


def rec(session: int, rnd: int, t0_ms: float, ttft_ms: float, *, n: int = 4, gap_ms: float = 2.0,
        prefix: int = 0, fresh: int = 100, cached: int | None = 0, status: str = "ok",
        run_id: str = "r1") -> RequestRecord:
    """One request: ``n`` one-token events, ``gap_ms`` apart, after ``ttft_ms``."""
    d = int(t0_ms * MS)
    times = [d + int((ttft_ms + k * gap_ms) * MS) for k in range(n)]
    return RequestRecord(
        run_id=run_id, request_id=f"s{session}r{rnd}", unit_ordinal=session,
        session_id=str(session), round_idx=rnd, backend="openai", policy="trace-reported",
        planned_prefix_tokens=prefix, planned_input_tokens=fresh, planned_output_tokens=n,
        sent_prompt_tokens=prefix + fresh, scheduled_ns=d, released_ns=d, admitted_ns=d,
        dispatch_ns=d, first_token_ns=times[0], last_token_ns=times[-1], end_ns=times[-1] + MS,
        token_times_ns=times, token_counts=[1] * n, http_status=200,
        prompt_tokens=prefix + fresh, completion_tokens=n, cached_tokens=cached,
        cached_tokens_reported=cached is not None, status=status,  # type: ignore[arg-type]
    )


def make_run(run_id: str = "r1", slow: float = 1.0, timeline: list | None = None) -> RunResult:
    records = [
        rec(0, 0, 0, 50 * slow, run_id=run_id),
        rec(0, 1, 100, 20 * slow, prefix=100, fresh=50, cached=96, run_id=run_id),
        rec(1, 0, 10, 60 * slow, run_id=run_id),
        rec(1, 1, 120, 25 * slow, prefix=100, fresh=100, cached=80, run_id=run_id),
        rec(1, 2, 200, 30 * slow, prefix=200, fresh=100, cached=192, run_id=run_id),
    ]
    manifest = {
        "run_id": run_id,
        "ideal_prefix_hit_rate": 0.5,
        "config": {"trace": {"path": "t.csv", "format": "session"}, "context": {"policy": None},
                   "arrival": {"mode": "trace-timed", "max_concurrency": None},
                   "backend": {"name": "openai"}, "target": {"url": "sim", "engine": {}},
                   "seed": 0},
        "trace": {"path": "t.csv", "format": "session", "sha256": "abc"},
    }
    return RunResult(run_id, records, manifest=RunManifest.from_dict(manifest),
                     metrics_timeline=timeline or [])


GAUGE_TIMELINE = [
    {"t_ns": 0, "vllm:kv_cache_usage_perc": 0.10, "vllm:num_requests_running": 1,
     "vllm:num_requests_waiting": 0, "vllm:prefix_cache_queries_total": 0,
     "vllm:prefix_cache_hits_total": 0},
    {"t_ns": 150 * MS, "vllm:kv_cache_usage_perc": 0.25, "vllm:num_requests_running": 2,
     'vllm:num_requests_waiting{engine="0"}': 1, "vllm:prefix_cache_queries_total": 600,
     "vllm:prefix_cache_hits_total": 300},
]


def _labelled(fig: Figure) -> None:
    """Every axes that holds data says what its axes measure, and has a title."""
    for ax in fig.axes:
        assert ax.get_title(), "untitled axes"
        assert ax.get_ylabel(), f"no y unit on {ax.get_title()!r}"
    assert any(ax.get_xlabel() for ax in fig.axes)


@pytest.mark.parametrize("kind", list(RUN_KINDS))
def test_every_run_kind_renders_a_labelled_png(kind: str) -> None:
    fig = plot(make_run(timeline=GAUGE_TIMELINE), kind)
    assert isinstance(fig, ReportFigure)
    assert fig.get_label() == kind
    _labelled(fig)
    assert fig.png().startswith(b"\x89PNG")


def test_cdf_steps_through_the_sorted_ok_ttfts() -> None:
    run = make_run()
    run.records.append(rec(2, 0, 300, 999, status="error"))
    fig = plot(run, "cdf")
    ttft_ax = fig.axes[0]
    (line,) = ttft_ax.lines
    assert list(line.get_xdata()) == pytest.approx([20, 25, 30, 50, 60])
    assert list(line.get_ydata()) == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert ttft_ax.get_xlabel() == "TTFT (ttft_ms, ms)"
    assert [a.get_title() for a in fig.axes] == ["TTFT CDF", "TPOT CDF", "E2E latency CDF"]


def test_cdf_overlays_runs_of_a_mapping_with_counts_in_the_legend() -> None:
    fig = plot({"fast": make_run("a"), "slow": make_run("b", slow=3)}, "cdf")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["fast (n=5)", "slow (n=5)"]
    assert "fast vs slow" in fig.get_suptitle()


def test_prefix_hits_bars_are_the_summary_rates_and_missing_ones_say_na() -> None:
    run = make_run()
    s = summarize(run)
    fig = plot(run, "prefix_hits")
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    expected = [s["planned_prefix_hit_rate"], s["actual_prefix_hit_rate"], 0.0, 0.5]
    assert heights == pytest.approx(expected)
    notes = [t.get_text() for t in ax.texts]
    assert notes[2] == "n/a"  # no /metrics timeline: no server window rate
    assert notes[1] == f"{s['actual_prefix_hit_rate']:.3f}"


def test_hit_by_round_plots_actual_and_planned_per_round_index() -> None:
    fig = plot(make_run(), "hit_by_round")
    actual, planned = fig.axes[0].lines
    assert list(actual.get_xdata()) == [0, 1, 2]
    # round 1: (96 + 80) / (150 + 200); round 2: 192 / 300
    assert list(actual.get_ydata()) == pytest.approx([0.0, 176 / 350, 0.64])
    assert list(planned.get_ydata()) == pytest.approx([0.0, 200 / 350, 200 / 300])


def test_ttft_by_round_shows_p50_and_p90_in_ms() -> None:
    fig = plot(make_run(), "ttft_by_round")
    p50, p90 = fig.axes[0].lines
    assert list(p50.get_ydata()) == pytest.approx([55.0, 22.5, 30.0])
    assert list(p90.get_ydata()) == pytest.approx([59.0, 24.5, 30.0])
    assert fig.axes[0].get_ylabel() == "TTFT (ms)"


def test_timeline_draws_server_gauges_when_scraped() -> None:
    fig = plot(make_run(timeline=GAUGE_TIMELINE), "timeline")
    _, queue_ax, kv_ax = fig.axes
    labels = [ln.get_label() for ln in queue_ax.lines]
    # one run: short labels (the title names it), one colour for its lines in every panel
    assert labels == ["in flight (client)", "server running (2 scrapes)",
                      "server waiting (2 scrapes)"]
    assert {ln.get_color() for ax in fig.axes for ln in ax.lines} == {"C0"}
    # KV usage as a fraction, the unit of the server table (one unit per quantity)
    assert list(kv_ax.lines[0].get_ydata()) == pytest.approx([0.10, 0.25])
    assert kv_ax.get_ylabel() == "KV cache usage (fraction, 0-1)"


def test_timeline_without_gauges_says_so() -> None:
    fig = plot(make_run(), "timeline")
    assert "not scraped" in fig.axes[2].texts[0].get_text()


def test_plot_draws_into_a_given_axes_and_accepts_a_frame() -> None:
    from workbench.metrics import to_frame

    host = Figure()
    ax = host.add_subplot()
    assert plot(to_frame(make_run()), "cdf", ax=ax) is host
    assert ax.get_title() == "TTFT CDF"


def test_unknown_kind_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: cdf, prefix_hits"):
        plot(make_run(), "pie")
    assert set(KINDS) >= {"cdf", "prefix_hits", "hit_by_round", "timeline", "ttft_by_round"}


def test_figure_displays_as_tagged_png() -> None:
    data, meta = plot(make_run(), "cdf")._repr_mimebundle_()
    assert data["image/png"].startswith("iVBOR")  # base64 of the PNG magic
    assert meta["workbench"]["figure"] == "cdf"
    # the alt text describes the figure: its title and each panel's title and axes
    alt = meta["workbench"]["alt"]
    assert alt.startswith("Latency CDFs of ok requests")
    assert "x: TTFT (ttft_ms, ms)" in alt and "E2E latency CDF" in alt


def _workload() -> Workload:
    def session(sid: str, arrival: float) -> Unit:
        rounds = tuple(
            Round(f"{sid}-{k}", sid, k, arrival, 300 * k, 300, 50 + k, 100.0 * (k + 1))
            for k in range(3)
        )
        return Unit(sid, "session", arrival, rounds)

    return Workload((session("a", 0), session("b", 50), session("c", 90)), fmt="session")


@pytest.mark.parametrize("kind", ["lengths", "tool_waits", "sessions_over_time", "hit_vs_capacity"])
def test_trace_kinds_render_from_trace_stats(kind: str) -> None:
    from workbench.workloads.trace_stats import trace_stats

    stats = trace_stats(_workload(), block_size=16)
    fig = plot(stats, kind)
    _labelled(fig)
    assert fig.png().startswith(b"\x89PNG")


def test_sessions_over_time_counts_overlapping_sessions() -> None:
    fig = plot(_workload(), "sessions_over_time")
    active, started = fig.axes[0].lines
    assert max(active.get_ydata()) == 3
    assert list(started.get_ydata())[-1] == 3


# -- tables ---------------------------------------------------------------------------------
def test_summary_table_holds_the_summary_numbers() -> None:
    run = make_run()
    s = summarize(run)
    df = tables.summary_table(run)
    # the rows named as the compare report and the CLI name a metric (catalog.with_unit)
    assert list(df.index) == ["TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)"]
    assert df.loc["TTFT (ms)", "p50"] == s["ttft_ms"]["p50"]
    assert df.loc["ITL (ms)", "count"] == 15
    html = tables.show(df).html()
    assert f"{s['ttft_ms']['p50']:.3f}" in html and f"{s['e2e_ms']['p99']:.3f}" in html
    assert "ttft_ms" not in html and "TTFT (ms)" in html


def test_prefix_table_and_missing_values() -> None:
    df = tables.prefix_table(make_run())
    assert df.loc["ideal (infinite cache)", "hit rate"] == 0.5
    assert math.isnan(df.loc["server window", "hit rate"])
    assert "–" in tables.show(df).html()


def test_table_payload_roundtrips_to_the_same_frame() -> None:
    df = tables.round_table(make_run())
    t = tables.show(df)
    bundle = t._repr_mimebundle_()
    back = tables.frame_from_payload(bundle[tables.TABLE_MIME])
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    assert bundle[tables.TABLE_MIME]["name"] == "by_round"


def test_server_gauges_reads_wide_and_labelled_samples() -> None:
    g = tables.server_gauges(GAUGE_TIMELINE, t0_ns=0)
    assert list(g["t_s"]) == [0.0, 0.15]
    assert list(g["waiting"]) == [0.0, 1.0]
    assert list(g["kv_usage"]) == [0.10, 0.25]


# -- compare --------------------------------------------------------------------------------
def test_bootstrap_ci_brackets_the_estimate_and_is_seeded() -> None:
    rng = np.random.default_rng(1)
    vals = rng.lognormal(3, 0.5, 400)
    lo, hi = compare.bootstrap_ci(vals, 50, n_boot=500, seed=3)
    assert lo < np.percentile(vals, 50) < hi
    assert (lo, hi) == compare.bootstrap_ci(vals, 50, n_boot=500, seed=3)
    small = compare.bootstrap_ci(vals[:20], 50, n_boot=500, seed=3)
    assert small[1] - small[0] > hi - lo  # fewer requests, wider interval
    assert all(math.isnan(x) for x in compare.bootstrap_ci([], 50))


def test_percentile_table_rows_per_metric_and_run() -> None:
    runs = {"a": make_run("a"), "b": make_run("b", slow=2)}
    df = compare.percentile_table(runs, n_boot=200)
    pairs = list(zip(df["metric"], df["run"], strict=True))
    assert pairs[:3] == [("TTFT (ms)", "a"), ("TTFT (ms)", "b"), ("TPOT (ms)", "a")]
    row = df.iloc[1]
    assert row["p50"] == pytest.approx(60.0) and row["p50 lo"] <= 60 <= row["p50 hi"]


def test_hit_rate_table_differences_against_the_baseline() -> None:
    a, b = make_run("a"), make_run("b")
    b.records[1].cached_tokens = 0
    df = compare.hit_rate_table({"a": a, "b": b})
    delta = df.loc["b", "Δ actual vs a"]
    assert delta == pytest.approx(df.loc["b", "actual (client)"] - df.loc["a", "actual (client)"])
    assert delta < 0 and df.loc["a", "Δ actual vs a"] == 0


def test_config_diff_lists_only_keys_that_differ() -> None:
    a, b = make_run("a"), make_run("b")
    b.manifest.config["arrival"] = {"mode": "saturated", "max_concurrency": 4}
    df = compare.config_diff({"a": a, "b": b})
    assert list(df["key"]) == ["arrival.max_concurrency", "arrival.mode"]
    assert list(df.loc[df["key"] == "arrival.mode", "b"]) == ["saturated"]
    assert list(df["axis"]) == ["arrival", "arrival"]


# -- issue 14: pictures of agent traffic, and what breaks on long or flat data -------------
def _drawn(fig: Figure) -> Figure:
    fig.canvas.draw()  # lay out (constrained layout, legends) as the PNG would
    return fig


def test_over_time_shows_in_flight_and_each_requests_ttft_at_send_time() -> None:
    run = make_run()
    fig = plot(run, "over_time")
    in_flight, ttft = fig.axes
    assert max(in_flight.lines[0].get_ydata()) == 2  # two sessions overlap at most
    x, y = ttft.lines[0].get_data()
    df = to_frame_ok(run)
    assert sorted(np.round(y, 6)) == sorted(np.round(df["ttft_ms"], 6))
    assert min(x) == 0.0 and max(x) == pytest.approx(0.2)  # seconds since the first send


def to_frame_ok(run: RunResult) -> pd.DataFrame:
    from workbench.metrics import to_frame

    df = to_frame(run)
    return df[df["status"] == "ok"]


def test_ttft_vs_uncached_puts_each_request_at_prompt_minus_cached() -> None:
    fig = plot(make_run(), "ttft_vs_uncached")
    x, _y = fig.axes[0].lines[0].get_data()
    assert sorted(x) == [54, 100, 100, 108, 120]  # 150-96, round 0s, 300-192, 200-80
    assert fig.axes[0].get_ylim()[0] == 0.0


def test_session_swimlane_has_a_lane_per_session_and_the_tool_waits() -> None:
    fig = plot(make_run(), "sessions")
    a = fig.axes[0]
    bars = [c for c in a.collections if type(c).__name__ == "PolyCollection"]
    assert len(bars) == 2  # one broken_barh per session
    assert [len(b.get_paths()) for b in bars] == [2, 3]  # its rounds
    waits = [c for c in a.collections if type(c).__name__ == "LineCollection"]
    assert [len(w.get_segments()) for w in waits] == [1, 2]  # gaps between rounds
    assert [t.get_text() for t in a.get_yticklabels()] == ["0", "1"]


def independent_run() -> RunResult:
    records = [rec(k, 0, 10 * k, 40 + k) for k in range(4)]
    return RunResult("ind", records, manifest=make_run().manifest)


@pytest.mark.parametrize("kind", ["hit_by_round", "ttft_by_round", "sessions"])
def test_one_request_units_get_a_note_not_a_single_point(kind: str) -> None:
    fig = plot(independent_run(), kind)
    a = fig.axes[0]
    assert not a.lines
    note = " ".join(t.get_text() for t in a.texts)
    assert "one request" in note
    if kind != "sessions":
        assert a.get_xlim() == (-0.5, 0.5)


def test_flat_series_get_an_axis_from_zero_not_a_degenerate_one() -> None:
    timeline = [{"t_ns": k * 10 * MS, "vllm:num_requests_running": 0.0,
                 "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.0}
                for k in range(5)]
    fig = plot(make_run(timeline=timeline), "timeline")
    for a in fig.axes:
        lo, hi = a.get_ylim()
        assert lo == 0.0 and hi >= 1.0, a.get_title()


def test_long_latency_axes_keep_few_compact_ticks() -> None:
    fig = _drawn(plot(make_run(slow=2000.0), "cdf"))  # TTFT up to 120 000 ms
    for a in fig.axes:
        lo, hi = a.get_xlim()
        ticks = [t for t in a.get_xticks() if lo <= t <= hi]
        assert len(ticks) <= 6
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert any(lab.endswith("k") for lab in labels), labels


def test_legends_sit_beside_the_data() -> None:
    fig = _drawn(plot({"a": make_run("a"), "b": make_run("b", slow=2)}, "ttft_by_round"))
    a = fig.axes[0]
    legend = a.get_legend().get_window_extent()
    assert legend.x0 >= a.get_window_extent().x1  # right of the axes, not over the lines


def test_prefix_hits_of_no_runs_draws_no_bars_instead_of_dividing_by_zero() -> None:
    fig = plot({}, "prefix_hits")
    assert not fig.axes[0].patches


def test_error_table_counts_classes_with_one_sample_each() -> None:
    from workbench.metrics import to_frame

    run = make_run()
    idle = "stream idle for more than 60.0s after 3 tokens"
    for r, msg in zip(run.records[:3], [f"TimeoutError: {idle}", f"TimeoutError: {idle}",
                                        "ClientConnectorError: connection refused"],
                      strict=True):
        r.status, r.error = "error", msg  # type: ignore[assignment]
    t = tables.error_table(to_frame(run))
    assert t.index.tolist() == ["error: TimeoutError", "error: ClientConnectorError"]
    assert t["requests"].tolist() == [2, 1]
    # the sample says what it adds to its class, never the class again (as the headline)
    assert t.loc["error: TimeoutError", "sample message"] == idle
    assert t.loc["error: ClientConnectorError", "sample message"] == "connection refused"
    assert tables.error_caption(t, 5).startswith("Errors: 3 of 5 requests")
    empty = tables.error_table(to_frame(make_run()))
    assert len(empty) == 0 and "none" in tables.error_caption(empty, 5)


def test_config_table_says_what_was_run() -> None:
    manifest = {**make_run().manifest.to_dict(), "policy": "trace-reported",
                "trace": {"path": "t.csv", "format": "session", "sha256": "abc",
                          "units": 2, "rounds": 5},
                "target": {"kind": "sim", "engine": {"num_blocks": 80, "block_size": 16},
                           "engine_process": {"own_process": True, "pid": 1}}}
    manifest["config"] = {**manifest["config"], "trace": {"path": "t.csv", "format": "auto"},
                          "arrival": {"mode": "trace-timed", "rate": 2.0,
                                      "max_concurrency": 8}}
    v = tables.config_table(RunManifest.from_dict(manifest))["value"]
    assert v["1 format"] == "session (detected)"
    assert v["2 context policy"] == "trace-reported"
    assert (v["3 arrival"], v["3 rate (units/s)"], v["3 max concurrency"]) == (
        "trace-timed", "2.0", "8")
    assert v["4 backend"] == "openai" and v["target"] == "sim"
    assert v["trace sha256"] == "abc" and v["target engine num_blocks"] == "80"
    assert v["target engine runs in"] == "its own process"
    assert "target engine idle_wake_ms" not in v  # 0 unless a calibration set it


def test_config_table_shows_the_cost_model_and_the_calibrated_knobs() -> None:
    engine = {"block_size": 32, "prefill_coeffs": [2.3485e-06, 0.0122522, 0.0],
              "decode_coeffs": [0.0, 85.5736646, 2.695275], "decode_floor_ms": 2.77469332,
              "decode_seq_ms": 0.033, "request_overhead_ms": 0.0, "intake_ms": 1.92300001,
              "idle_wake_ms": 4.4870001}  # fmt: skip
    manifest = {**make_run().manifest.to_dict(), "target": {"kind": "sim", "engine": engine}}
    v = tables.config_table(RunManifest.from_dict(manifest))["value"]
    assert v["target engine prefill_coeffs"] == "[2.349e-06, 0.01225, 0]"
    assert v["target engine decode_floor_ms"] == "2.775"
    assert (v["target engine intake_ms"], v["target engine idle_wake_ms"]) == ("1.923", "4.487")
    assert v["target engine decode_seq_ms"] == "0.033"
    assert "target engine request_overhead_ms" not in v  # 0: not set
    assert v["target engine block_size"] == "32"


def test_client_caption_names_its_evidence() -> None:
    client = {"cpu_util": 0.19, "release_lag_ms": {"p99": 3.0},
              "steady_release_lag_ms": {"p99": 1.25, "count": 10},
              "client_bottleneck": False, "client_bottleneck_reasons": []}
    s = {**summarize(make_run()), "client": client}
    caption = tables.client_caption(s)
    assert "kept up" in caption
    assert "client CPU 19% of a core (bound 90%)" in caption
    # a p99 of 10 lags is read off the largest: said over how many (docs/metrics.md)
    assert "steady release lag p99 1.2 ms of 10 releases (bound 10 ms)" in caption
    shared = RunManifest.from_dict({"target": {"engine_process": {"own_process": False}}})
    assert "client's event loop" in tables.client_caption(s, shared)


def test_band_table_fits_a_page() -> None:
    from workbench.metrics.breakdown import by_input_band

    t = tables.band_table(by_input_band(make_run()))
    assert len(t.columns) <= 9 and "ttft_ms_p50" in t.columns and t.index.name == "prompt tokens"
    # the headers as every table's (header_text, from the catalog), the export keeps the key
    html = tables.show(t).html()
    assert "TTFT p50 (ms)" in html and "E2E p50 (ms)" in html and "ttft_ms" not in html


def test_config_diff_treats_relative_and_absolute_trace_paths_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.csv").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    a, b = make_run("a"), make_run("b")
    b.manifest.config = {**b.manifest.config,
                            "trace": {"path": str(tmp_path / "t.csv"), "format": "session"}}
    diff = compare.config_diff({"a": a, "b": b})
    assert "trace.path" not in diff["key"].tolist()


def test_late_sends_with_an_idle_client_blame_the_machine_not_the_client() -> None:
    late = {"cpu_util": 0.04, "release_lag_ms": {"p99": 23.4},
            "steady_release_lag_ms": {"p99": 23.4, "count": 50}, "client_bottleneck": True,
            "client_bottleneck_reasons": ["steady release lag p99 23.4 ms (> 10 ms)"]}
    caption = tables.client_caption({**summarize(make_run()), "client": late})
    assert "requests went out late" in caption and "only 4% of a core" in caption
    assert "the client, not the server" not in caption
    busy = {**late, "cpu_util": 0.95,
            "client_bottleneck_reasons": ["client CPU 95% of a core (>= 90%)"]}
    assert "the client, not the server" in tables.client_caption(
        {**summarize(make_run()), "client": busy})


def test_compare_error_table_lists_each_runs_classes() -> None:
    bad = make_run("b")
    bad.records[0].status, bad.records[0].error = "error", "HTTPError: 500 boom"  # type: ignore[assignment]
    t = compare.error_table({"a": make_run("a"), "b": bad})
    assert t[["run", "error class", "requests"]].values.tolist() == [
        ["a", "none", 0], ["b", "error: HTTPError", 1]]


def overlapping_ticks(fig: Figure) -> list[str]:
    """Titles of the axes of ``fig`` (drawn with Agg) where two tick labels overlap."""
    import itertools

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        for ticks, lo, hi in ((ax.get_xticklabels(), "x0", "x1"),
                              (ax.get_yticklabels(), "y0", "y1")):
            boxes = sorted((t.get_window_extent(renderer) for t in ticks
                            if t.get_text() and t.get_visible()), key=lambda b: getattr(b, lo))
            if any(getattr(a, hi) > getattr(b, lo) + 0.5 for a, b in itertools.pairwise(boxes)):
                bad.append(f"{ax.get_title()} ({lo[0]})")
    return bad


@pytest.mark.parametrize("kind", list(RUN_KINDS))
def test_no_tick_labels_overlap_and_each_run_keeps_its_colour(kind: str) -> None:
    """Drawn (Agg), no two tick labels of an axis overlap, and a run's lines have one
    colour in every panel of the figure (issue 22: honest labels)."""
    # labels as long as a legend line (LEGEND_WIDTH): the legend narrows the axes
    runs = {"fast KV cache 8192 blocks": make_run("a", timeline=GAUGE_TIMELINE),
            "slow KV cache 65536 blocks": make_run("b", slow=3, timeline=GAUGE_TIMELINE)}
    fig = plot(runs, kind)
    assert not overlapping_ticks(fig), kind
    for label, colour in (("fast", "C0"), ("slow", "C1")):
        mine = {ln.get_color() for ax in fig.axes for ln in ax.get_lines()
                if ln.get_label().startswith(label)}
        assert mine <= {colour}, (kind, label, mine)
