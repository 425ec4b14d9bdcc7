"""The headline: one line per run (and a sentence per sweep) that answers at a glance.

Exact strings from constructed summaries and manifests (docs/metrics.md names), so a
change of wording or number format is a visible, reviewed change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.records import RunManifest
from workbench.report.headline import (
    capacity_sentence,
    engine_note,
    run_headline,
    sig,
)
from workbench.sweeps.store import Sweep, SweepManifest


def summary(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "requests": 303, "ok": 303, "errors": 0, "run_status": "completed",
        "ttft_ms": {"p50": 48.21, "p90": 95.04, "p99": 210.4, "mean": 60.0, "count": 303},
        "tpot_ms": {"p50": 6.113, "p90": 6.279, "p99": 12.51, "mean": 6.0, "count": 303},
        "actual_prefix_hit_rate": 0.8151, "planned_prefix_hit_rate": 0.8174,
        "request_throughput_rps": 7.2961,
        "client": {"client_bottleneck": False, "client_bottleneck_reasons": []},
        "slo": None,
    }
    base.update(over)
    return base


LIVE_SIM = RunManifest.from_dict({"mode": "live", "config": {"target": {"url": "sim"}},
                                  "target": {"kind": "sim", "engine": {"speedup": 20.0}}})
REAL = RunManifest.from_dict({"mode": "live", "config": {"target": {"url": "http://127.0.0.1:8000"}},
                              "target": {"kind": "url"}})


@pytest.mark.parametrize(("value", "text"), [
    (48.21, "48.2"), (6.113, "6.11"), (210.4, "210"), (20771.2, "20771"), (0.05234, "0.0523"),
    (7.0, "7"), (303, "303"), (None, "–"), (float("nan"), "–"), (0.0, "0"),
])  # fmt: skip
def test_numbers_print_with_three_significant_figures_and_integers_whole(value, text):
    assert sig(value) == text


def test_a_clean_run_against_a_real_server():
    assert run_headline(summary(), REAL) == (
        "303/303 ok · TTFT p50/p90/p99 48.2/95/210 ms · TPOT p50/p90/p99 6.11/6.28/12.5 ms"
        " · prefix hit 0.815 of 0.817 planned · 7.3 req/s · client OK"
    )


def test_the_simulated_engines_speedup_and_the_slo_verdict():
    slo = {"bounds": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "requests": 303, "attained": 303,
           "joint_attainment": 1.0}
    assert run_headline(summary(slo=slo), LIVE_SIM) == (
        "303/303 ok · TTFT p50/p90/p99 48.2/95/210 ms · TPOT p50/p90/p99 6.11/6.28/12.5 ms"
        " · prefix hit 0.815 of 0.817 planned · 7.3 req/s · client OK"
        " · SLO met: 303/303 within TTFT ≤ 2 s, TPOT ≤ 50 ms"
        " · simulated engine, 20× real time, default step times, not a GPU's"
    )
    missed = {**slo, "attained": 250, "joint_attainment": 250 / 303}
    assert "· SLO missed: 250/303 within TTFT ≤ 2 s, TPOT ≤ 50 ms ·" in run_headline(
        summary(slo=missed), LIVE_SIM)


def test_failures_an_incomplete_run_a_busy_client_and_no_cache_counts():
    s = summary(ok=120, errors=3, requests=125, run_status="cancelled",
                actual_prefix_hit_rate=None,
                client={"client_bottleneck": True,
                        "client_bottleneck_reasons": ["release lag p99 15.2 ms (> 10 ms)"]})
    assert run_headline(s, REAL) == (
        "INCOMPLETE (cancelled) · 120/125 ok · TTFT p50/p90/p99 48.2/95/210 ms"
        " · TPOT p50/p90/p99 6.11/6.28/12.5 ms · prefix hit unknown (no cached counts)"
        " of 0.817 planned · 7.3 req/s · client LIMITED: release lag p99 15.2 ms > 10 ms"
    )


def test_a_server_holding_streams_open_is_named_not_blamed_on_the_client():
    held = {"requests": 2, "max_ms": 1007.4}
    ok = summary(client={"client_bottleneck": False, "client_bottleneck_reasons": [],
                         "held_after_done": held})
    assert run_headline(ok, REAL).endswith(
        " · 7.3 req/s · client OK (server held streams open after [DONE]:"
        " 2 requests waited up to 1007 ms for a connection)")
    busy = summary(client={"client_bottleneck": True, "held_after_done": {**held, "requests": 1},
                           "client_bottleneck_reasons": ["client CPU 95% of a core (>= 90%)"]})
    assert run_headline(busy, REAL).endswith(
        " · client LIMITED: client CPU 95% of a core >= 90%"
        " (server held streams open after [DONE]: 1 request waited up to 1007 ms for a"
        " connection)")


def test_a_virtual_time_run_says_so_instead_of_a_client_verdict():
    virtual = {"mode": "virtual", "engine": {"speedup": 1.0}, "config": {"target": {"url": "sim"}}}
    line = run_headline(summary(client=None), RunManifest.from_dict(virtual))
    assert line.endswith("· 7.3 req/s · virtual time (simulated engine, default step times, "
                         "not a GPU's)")
    assert engine_note(RunManifest.from_dict({**virtual, "engine": {"speedup": 4.0}})) == (
        "virtual time (simulated engine, 4× real time, default step times, not a GPU's)")
    assert engine_note(REAL) is None


def test_a_simulation_says_which_step_times_timed_it():
    """No preset: the default coefficients, which are no GPU's; a calibrated engine config:
    its own coefficients, with no error to state; a preset: its name and stated error
    (docs/metrics.md, "Headline")."""
    def note(engine: dict) -> str | None:
        return engine_note(RunManifest("", mode="virtual", engine=engine))

    assert note({}) == note({"prefill_coeffs": [4.209989e-7, 1.518344e-2, 16.50142]}) == (
        "virtual time (simulated engine, default step times, not a GPU's)")
    fitted = note({"prefill_coeffs": [0.0, 0.02, 12.0], "decode_floor_ms": 1.0})
    assert fitted == ("virtual time (simulated engine, step times from its engine config, no "
                      "stated error)")
    assert note({"zero_cost": True}) == "virtual time (simulated engine, zero-cost steps)"
    preset = note({"preset": "llama-3.1-8b/h100/tp1"}) or ""
    assert "default step times" not in preset and "preset llama-3.1-8b/h100/tp1: " in preset


def test_no_ok_request_says_not_measured_not_zeros_or_dashes():
    """No value to state: "TTFT not measured", not "TTFT p50/p90/p99 –/–/– ms" (three
    percentiles of nothing) nor zeros; as the summary of an all-failed run has it (an
    empty mapping, or a count of 0)."""
    for empty in ({}, {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}):
        s = summary(ok=0, errors=5, requests=5, ttft_ms=empty, tpot_ms=empty,
                    request_throughput_rps=0.0, actual_prefix_hit_rate=None,
                    planned_prefix_hit_rate=None, client={})
        assert run_headline(s, REAL) == "0/5 ok · TTFT not measured · TPOT not measured · 0 req/s"


def _few(n: int, **stats: float) -> dict[str, Any]:
    return {"mean": 60.0, "p50": 48.21, "p90": 95.04, "p99": 210.4, "max": 212.0,
            "count": n, **stats}


@pytest.mark.parametrize(("n", "ttft"), [
    (303, "TTFT p50/p90/p99 48.2/95/210 ms"),
    (100, "TTFT p50/p90/p99 48.2/95/210 ms"),  # a p99 needs 100 to be other than the max
    (99, "TTFT p50/p90/max 48.2/95/212 ms of 99 requests"),
    (10, "TTFT p50/p90/max 48.2/95/212 ms of 10 requests"),  # a p90 needs 10
    (9, "TTFT p50/max 48.2/212 ms of 9 requests"),
    (3, "TTFT p50/max 48.2/212 ms of 3 requests"),
    (2, "TTFT p50/max 48.2/212 ms of 2 requests"),
    (1, "TTFT 212 ms of 1 request"),
])  # fmt: skip
def test_a_tail_percentile_the_count_cannot_resolve_is_the_max_with_the_count(n, ttft):
    s = summary(requests=n, ok=n, ttft_ms=_few(n), tpot_ms=_few(n, p50=6.113, max=12.9))
    line = run_headline(s, REAL)
    assert line.startswith(f"{n}/{n} ok · {ttft} · TPOT "), line


def test_three_requests_headline_no_p99_and_the_table_under_it_agrees():
    from workbench.report import tables

    s = summary(requests=3, ok=3, ttft_ms=_few(3), tpot_ms=_few(3, p50=6.113, max=12.94))
    assert run_headline(s, REAL) == (
        "3/3 ok · TTFT p50/max 48.2/212 ms of 3 requests · TPOT p50/max 6.11/12.9 ms of 3"
        " requests · prefix hit 0.815 of 0.817 planned · 7.3 req/s · client OK")
    table = tables.summary_table(s)  # the max the headline gives is the table's
    assert table.loc["TTFT (ms)", "max"] == 212.0 and table.loc["TTFT (ms)", "count"] == 3
    assert tables.latency_caption(s) == (
        "Latency of ok requests (ms). TTFT over 3, TPOT over 3: a p99 over fewer than 100"
        " values (a p90 over fewer than 10) is read off the largest ones; the headline"
        " gives the max")
    assert tables.latency_caption(summary(ttft_ms=_few(303), tpot_ms=_few(303))) == (
        "Latency of ok requests (ms)")


def test_the_seconds_rule_reads_the_max_when_it_stands_for_the_p99():
    s = summary(requests=5, ok=5, ttft_ms=_few(5, p50=8500.0, max=12_000.0))
    assert "TTFT p50/max 8.5/12 s of 5 requests ·" in run_headline(s, REAL)


# -- sweeps --------------------------------------------------------------------------------
def point(index: int, rate: float, rps: float, held: bool, p90: float) -> dict[str, Any]:
    return {"index": index, "status": "done", "params": {"arrival.rate": rate},
            "metrics": {"request_throughput_rps": rps, "ttft_ms_p90": p90,
                        "slo:ttft_ms:p90": p90},
            "slo": {"held": held, "worst_ratio": p90 / 2000}, "runs": []}


def sweep(points: list[dict[str, Any]], capacity: dict[str, Any] | None = None,
          axis: str = "arrival.rate") -> Sweep:
    manifest = {"sweep_id": "s", "axes": [axis], "slo": {"ttft_ms:p90": 2000.0},
                "slo_text": "ttft_ms:p90<=2000", "points": points, "capacity": capacity,
                "mode": "virtual"}
    return Sweep(Path("/nonexistent"), SweepManifest.from_dict(manifest))


def test_capacity_of_a_search_offered_against_delivered_with_a_warning():
    # probes in search order: 1, 40, 20, 30, 25, 27 (the zig-zag)
    pts = [point(0, 1, 0.5, True, 900), point(1, 40, 1.7, False, 9000),
           point(2, 20, 1.7, False, 8000), point(3, 30, 1.7, False, 8500),
           point(4, 2.75, 1.6, True, 1900), point(5, 4, 1.62, False, 2500)]
    cap = {"value": 2.75, "status": "found", "axis": "arrival.rate", "bracket": [2.75, 4]}
    assert capacity_sentence(sweep(pts, cap), rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 2 s: capacity 1.6 req/s sustained, at 2.75 req/s offered: the "
        "highest load that held (found by search); it broke at 4 req/s. WARNING: the engine "
        "delivered 1.6 of the 2.75 req/s offered (58 %): it fell behind, or the run was too "
        "short for its ramp-up and drain to be negligible."
    )


def test_capacity_of_a_grid_in_sessions_when_units_have_rounds():
    pts = [point(0, 8, 9.0, False, 6000), point(1, 1, 6.2, True, 500),
           point(2, 2, 12.1, True, 900), point(3, 4, 20.0, False, 2100)]
    assert capacity_sentence(sweep(pts), rounds_per_unit=6.2) == (
        "At TTFT p90 ≤ 2 s: capacity 12.1 req/s sustained, at 2 sessions/s offered "
        "(12.4 req/s): the highest load that held; it broke at 4 sessions/s (24.8 req/s)."
    )


def test_capacity_when_every_point_held_or_none_did():
    held = [point(0, 1, 1.0, True, 100), point(1, 2, 2.0, True, 200)]
    assert capacity_sentence(sweep(held), rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 2 s: capacity at least 2 req/s sustained, at 2 req/s offered: the "
        "SLO held at every point, so the capacity is above the range.")
    broken = [point(0, 1, 1.0, False, 3000), point(1, 2, 2.0, False, 4000)]
    assert capacity_sentence(sweep(broken), rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 2 s: the SLO broke at every point, from 1 req/s offered: the "
        "capacity is below the range.")
    assert capacity_sentence(Sweep(Path("/x"), SweepManifest(points=held))) == (
        "No SLO: the sweep has no capacity to state.")


def test_capacity_of_an_interrupted_sweep_is_not_above_a_range_it_did_not_finish():
    # points at 4 and 8 req/s never finished: "above the range" would claim a load
    # nobody tried; the sentence and the cell say only what finished
    pending = [{"index": 2, "status": "pending", "params": {"arrival.rate": 4}, "runs": []},
               {"index": 3, "status": "pending", "params": {"arrival.rate": 8}, "runs": []}]
    held = [point(0, 1, 1.0, True, 100), point(1, 2, 2.0, True, 200)]
    sw = sweep(held + pending)
    assert capacity_sentence(sw, rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 2 s: capacity at least 2 req/s sustained, at 2 req/s offered: the "
        "SLO held at every point that finished; 2 higher loads (4 to 8 req/s) did not "
        "finish, so the capacity is not known beyond 2 req/s.")
    from workbench.report.headline import capacity_brief
    from workbench.sweeps.groups import capacities

    [cap] = capacities(sw)
    assert capacity_brief(cap) == ("≥ 2 req/s sustained (2 req/s offered; higher loads "
                                   "unfinished)")
    # a pending point below the highest that held changes nothing
    low = [{"index": 2, "status": "pending", "params": {"arrival.rate": 0.5}, "runs": []}]
    assert "above the range" in capacity_sentence(sweep(held + low), rounds_per_unit=1.0)


def test_capacity_on_a_concurrency_axis_has_no_offered_rate():
    pts = [{**point(0, 1, 0.8, True, 500), "params": {"arrival.max_concurrency": 4}},
           {**point(1, 1, 1.6, True, 1900), "params": {"arrival.max_concurrency": 12}},
           {**point(2, 1, 1.7, False, 4000), "params": {"arrival.max_concurrency": 16}}]
    cap = {"value": 12, "status": "found", "axis": "arrival.max_concurrency"}
    assert capacity_sentence(sweep(pts, cap, axis="arrival.max_concurrency")) == (
        "At TTFT p90 ≤ 2 s: capacity 1.6 req/s sustained, at arrival.max_concurrency = 12: "
        "the highest load that held (found by search); it broke at "
        "arrival.max_concurrency = 16.")


# -- where it is printed ------------------------------------------------------------------
def test_simulate_prints_the_headline_and_json_only_on_request(tmp_path, capsys):
    import json

    from workbench.cli import main
    from workbench.data import path as data_path

    trace = str(data_path("tracelab/multi_session_example.csv"))
    args = ["simulate", "--trace", trace, "-o", str(tmp_path), "--slo", "ttft_ms<=2000"]
    assert main([*args, "--run-id", "h"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    summary = json.loads((tmp_path / "h" / "summary.json").read_text())
    manifest = RunManifest.from_dict(json.loads((tmp_path / "h" / "manifest.json").read_text()))
    assert first == run_headline(summary, manifest)
    assert first.startswith("8/8 ok · TTFT") and first.endswith(
        "· SLO met: 8/8 within TTFT ≤ 2 s (too few requests to show 99 % at 95 % "
        "confidence: needs 299) · virtual time (simulated engine, default step times, not a "
        "GPU's)")
    assert main([*args, "--run-id", "j", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.split("\n}\n")[0] + "}")["requests"] == 8


# -- sweep figures and tables in load order ----------------------------------------------------
def test_sweep_figures_draw_in_load_order_and_mark_the_capacity(tmp_path):
    """A capacity search probes out of order; every line is drawn sorted by the swept
    value, the capacity is a vertical line and a sentence under the goodput figure."""
    import workbench as wb
    from workbench.data import path as data_path
    from workbench.report import sweep_plots, sweep_tables

    base = {"trace": {"path": str(data_path("tracelab/multi_session_example.csv"))},
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0}}
    s = wb.capacity_search(base, "max_concurrency", 1, 3, "ttft_ms:p90<=30", tolerance=1,
                           virtual=True, out_dir=tmp_path, sweep_id="c")
    probes = [p["params"]["arrival.max_concurrency"] for p in s.points]
    assert probes != sorted(probes)  # the search did probe out of order
    fig = wb.sweep_plot(s, "goodput")
    ax = fig.axes[0]
    delivered = next(ln for ln in ax.get_lines() if ln.get_label() == "delivered")
    assert list(delivered.get_xdata()) == sorted(probes)
    cap = s.capacity["value"]
    assert s.capacity["status"] == "found"
    vlines = [ln for ln in ax.get_lines() if ln.get_label() == "capacity (SLO held)"]
    assert vlines and list(vlines[0].get_xdata()) == [cap, cap]
    sentence = capacity_sentence(s)
    assert sentence.startswith("At TTFT p90 ≤ 30 ms: capacity ")
    assert f"sustained, at arrival.max_concurrency = {cap}: the highest load that held " \
        "(found by search)" in sentence
    assert sentence in [t.get_text().replace("\n", " ") for t in fig.texts]
    latency = wb.sweep_plot(s, "latency").axes[0]
    assert any(lab.startswith("capacity: ") for lab in latency.get_legend_handles_labels()[1])
    cache = wb.sweep_plot(s, "cache").axes[0]
    assert list(cache.get_lines()[0].get_xdata()) == sorted(probes)
    from test_plots import overlapping_ticks

    for kind in sweep_plots.SWEEP_KINDS:
        assert not overlapping_ticks(wb.sweep_plot(s, kind)), kind
    table = sweep_tables.points_table(sweep_plots.as_sweeps(s))
    assert list(table["arrival.max_concurrency"]) == sorted(probes)
    assert len(table.columns) <= 11  # fits a page


def test_a_sweep_headline_names_its_points_engine_and_capacity(tmp_path):
    import json

    from workbench.report.headline import sweep_headline, sweeps_headline

    pts = [point(0, 1, 1.0, True, 100), point(1, 2, 1.2, True, 200)]
    pts[0]["runs"] = [{"run_dir": "runs/p000-r0"}]  # its plan: 1 request per unit
    (tmp_path / "runs" / "p000-r0").mkdir(parents=True)
    (tmp_path / "runs" / "p000-r0" / "manifest.json").write_text(
        json.dumps({"plan": {"units": 40, "rounds": 40}}))
    s = Sweep(tmp_path, sweep(pts).manifest)
    s.manifest.base_config = {"target": {"url": "sim", "engine": {"speedup": 20.0}}}
    s.manifest.mode = "live"
    line = sweep_headline(s, "fast engine")
    assert line.startswith("fast engine: 2 points of arrival.rate 1–2 · simulated engine, "
                           "20× real time, default step times, not a GPU's · At TTFT p90 ≤ 2 "
                           "s: capacity at least 1.2 req/s sustained, at 2 req/s offered: the "
                           "SLO held at every point")
    head = sweeps_headline({"fast engine": s})
    assert head.lines[0] == line.split(" WARNING: ")[0]  # the warning on a line of its own
    assert head.lines[1] == ("WARNING: the engine delivered 1.2 of the 2 req/s offered (60 %): "
                             "it fell behind, or the run was too short for its ramp-up and "
                             "drain to be negligible.")  # no second capacity, no threshold


def test_a_preset_runs_headline_says_which_preset_and_its_stated_error() -> None:
    """A figure simulated from a preset says so and what error the preset states
    (per class the larger of the fit's leave-one-source-out and in-sample medians, the
    figure a plan's band applies: docs/hardware.md "Fit"); a GPU no table covers:
    extrapolated."""
    from workbench.report.headline import engine_note
    from workbench.sim.presets.stated import stated

    for preset, extrapolated in (("llama-3.1-8b/h100/tp1", False),
                                 ("llama-3.1-8b/b200/tp1", True)):
        errs = stated(preset)  # its GPU and TP's cell where measured, or in sample
        note = engine_note(RunManifest("", mode="virtual", engine={"preset": preset}))
        assert note is not None and note.startswith("virtual time (simulated engine, preset ")
        assert preset in note and f"ITL {errs['itl']:.1%}" in note
        assert f"TTFT {errs['ttft']:.1%}" in note
        assert ("extrapolated (llama-3.1-8b on b200)" in note) is extrapolated
    assert "preset" not in (engine_note(RunManifest("", mode="virtual", engine={})) or "")


def test_a_delivery_gap_from_a_run_shorter_than_its_sessions_says_so(tmp_path):
    """20 sessions at 4/s arrive within about 4.75 s of a 22.3 s run: the rest is their
    later rounds draining, so the delivered 5.66 req/s is set by how long the sessions
    last. The warning said "it fell behind, or the run was too short"; the arrival span
    against the duration shows which (docs/sweeps.md, "Capacity")."""
    import json

    pts = [point(0, 4, 5.66, True, 60)]
    pts[0]["metrics"]["duration_s"] = 22.3
    pts[0]["runs"] = [{"run_dir": "runs/p000-r0"}]
    (tmp_path / "runs" / "p000-r0").mkdir(parents=True)
    (tmp_path / "runs" / "p000-r0" / "manifest.json").write_text(
        json.dumps({"plan": {"units": 20, "rounds": 126}}))
    s = Sweep(tmp_path, sweep(pts).manifest)
    assert capacity_sentence(s) == (
        "At TTFT p90 ≤ 2 s: capacity at least 5.66 req/s sustained, at 4 sessions/s offered "
        "(25.2 req/s): the SLO held at every point, so the capacity is above the range. "
        "WARNING: the engine delivered 5.66 of the 25.2 req/s offered (22 %). The run was "
        "too short for that rate: its 20 sessions arrive within about 4.75 s of its 22.3 s, "
        "the rest is their later rounds finishing, so the delivered rate is set by how long "
        "the sessions last, not by the engine; replay more sessions (--max-items) to "
        "measure the engine.")
    # sessions arriving over most of the run: either cause may hold, both are named
    pts[0]["metrics"]["duration_s"] = 6.0
    assert capacity_sentence(Sweep(tmp_path, sweep(pts).manifest)).endswith(
        "(22 %): it fell behind, or the run was too short for its ramp-up and drain to be "
        "negligible.")


def test_latencies_of_ten_seconds_and_more_print_in_seconds():
    """A Mooncake slice on one H100 preset printed ``TTFT p50/p90/p99 459453/881685/943300
    ms``: six-digit milliseconds a reader has to count the digits of. From 10 s at the
    triple's p99 all three are seconds, with the same three significant figures."""
    long = summary(ttft_ms={"p50": 459453.2, "p90": 881685.0, "p99": 943300.4, "count": 9})
    assert run_headline(long, REAL).startswith(
        "303/303 ok · TTFT p50/p90/p99 459/882/943 s · TPOT p50/p90/p99 6.11/6.28/12.5 ms")
    mixed = summary(ttft_ms={"p50": 850.0, "p90": 4210.0, "p99": 12030.0, "count": 9})
    assert "TTFT p50/p90/p99 0.85/4.21/12 s ·" in run_headline(mixed, REAL)
    assert "TTFT p50/p90/p99 48.2/95/210 ms ·" in run_headline(summary(), REAL)


def test_the_capacity_cell_of_a_sweep_in_sessions_has_no_parentheses_in_parentheses():
    """The sweeps table's cell read ``≥ 5.66 req/s sustained (4 sessions/s offered (25.2
    req/s); above the range)``."""
    from workbench.report.headline import capacity_brief
    from workbench.sweeps.groups import capacities

    pts = [point(0, 2, 4.65, True, 60), point(1, 4, 5.66, True, 62)]
    (cap,) = capacities(sweep(pts))
    assert capacity_brief(cap, 6.3) == (
        "≥ 5.66 req/s sustained (4 sessions/s offered, 25.2 req/s; above the range)")
    (held,) = capacities(sweep([point(0, 2, 4.65, True, 60), point(1, 4, 5.66, False, 2100)]))
    assert capacity_brief(held, 6.3) == "4.65 req/s sustained (2 sessions/s offered, 12.6 req/s)"
    assert capacity_brief(held, 1.0) == "4.65 req/s sustained (2 req/s offered)"


def test_simulate_prints_a_partial_runs_round_counts_under_its_headline(tmp_path, capsys):
    """``INCOMPLETE (partial) · 23/31 ok`` says nothing of the 33 rounds never sent (the
    console had them only in a log line's dict): the next line gives the counts in words,
    and the command exits 1, as ``report`` of the run does (it exited 0: one rule for both,
    ``commands._run_end``)."""
    from workbench.cli import main
    from workbench.data import path as data_path

    trace = str(data_path("tracelab/multi_session_large.csv"))
    assert main(["simulate", "--trace", trace, "--max-items", "10", "--max-model-len", "3000",
                 "-o", str(tmp_path), "--run-id", "p"]) == 1  # ExitCode.FAILED
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("INCOMPLETE (partial) · 23/31 ok · ")
    assert lines[1] == ("INCOMPLETE: partial (of 64 planned rounds, 31 were recorded, 8 of "
                        "them skipped, and 33 never sent)")


def test_the_goodput_figure_says_the_swept_rate_is_in_sessions(tmp_path):
    """Its x axis read ``offered load (arrival.rate)`` beside a y axis in requests/s, so
    4 on the x axis looked like 4 req/s against the grey offered line at 25.2."""
    import json

    import workbench as wb

    pts = [point(0, 2, 4.65, True, 60), point(1, 4, 5.66, True, 62)]
    for p in pts:
        p["metrics"].update({"goodput_rps": p["metrics"]["request_throughput_rps"],
                             "actual_prefix_hit_rate": 0.8})
    pts[0]["runs"] = [{"run_dir": "runs/p000-r0"}]
    (tmp_path / "runs" / "p000-r0").mkdir(parents=True)
    (tmp_path / "runs" / "p000-r0" / "manifest.json").write_text(
        json.dumps({"plan": {"units": 20, "rounds": 126}}))
    fig = wb.sweep_plot(Sweep(tmp_path, sweep(pts).manifest), "goodput")
    assert fig.axes[0].get_xlabel() == "offered load (arrival.rate, sessions/s)"


def test_the_points_table_marks_a_point_over_the_error_rate():
    # sweep --max-error-rate judged the point (its manifest: over_max_error_rate); the
    # report's table says so beside the SLO verdict, as the sweep's own table did
    from workbench.report import sweep_plots, sweep_tables

    pts = [point(0, 1, 1.0, True, 100), point(1, 2, 2.0, True, 200)]
    pts[1]["over_max_error_rate"] = True
    pts[0]["over_max_error_rate"] = False
    table = sweep_tables.points_table(sweep_plots.as_sweeps(sweep(pts)))
    assert list(table["over --max-error-rate"]) == [False, True]
    plain = sweep_tables.points_table(sweep_plots.as_sweeps(sweep(pts[:1])))
    assert "over --max-error-rate" not in plain  # no point over: no column
