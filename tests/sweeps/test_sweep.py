"""Sweeps: points, SLOs, resume, early stop, capacity search and flush between points.

Virtual time (``simulate``) wherever the behaviour does not need sockets; the
flush test runs live against the embedded engine behind HTTP on a port.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import workbench as wb
from workbench.errors import ConfigError
from workbench.storage.rundir import load, read_json
from workbench.sweeps import SLO, load_sweep, spec
from workbench.sweeps.points import pool

MOONCAKE = "workbench/data/mooncake/conversation_trace_head600.jsonl"
TRACELAB = "workbench/data/tracelab/multi_session_example.csv"
# the first 80 Mooncake requests on the default engine: TTFT p90 grows with the rate
# (about 3.8 s at 1 req/s, 5.3 s at 4, 11 s at 8), so this bound breaks between 4 and 8
BASE = {"trace": {"path": MOONCAKE, "max_items": 80}}
SLO_TEXT = "ttft_ms:p90<=8000"


# -- specs --------------------------------------------------------------------------------
def test_slo_text_and_mapping_forms_agree_and_bad_input_names_the_rule() -> None:
    a = SLO.parse(["ttft_ms:p90<=2000", "tpot_ms:p99.9<=50", "ok>=0.95"])
    b = SLO.parse({"ttft_ms:p90": 2000, "tpot_ms:p99.9": 50, "ok": 0.95})
    assert a == b and a is not None
    assert [(x.metric, x.q, x.limit) for x in a.bounds] == [("ttft_ms", 90, 2000),
                                                           ("tpot_ms", 99.9, 50)]
    assert a.min_ok == 0.95 and SLO.parse("e2e_ms:p50<=1").min_ok == 0.99  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="METRIC:pQ<=LIMIT_MS"):
        SLO.parse(["ttft<2000"])
    with pytest.raises(ConfigError, match="unknown; valid: ttft_ms"):
        SLO.parse({"latency:p90": 1})
    with pytest.raises(ConfigError, match="fraction"):
        SLO.parse({"ttft_ms:p90": 1, "ok": 2})


def test_verdict_ratio_and_ok_share() -> None:
    slo = SLO.parse("ttft_ms:p90<=100,tpot_ms:p90<=10")
    assert slo is not None
    held = slo.verdict({"ttft_ms:p90": 50, "tpot_ms:p90": 10}, ok_rate=1.0)
    assert held["held"] and held["worst_ratio"] == 1.0
    broken = slo.verdict({"ttft_ms:p90": 150, "tpot_ms:p90": 5}, ok_rate=1.0)
    assert not broken["held"] and broken["worst_ratio"] == 1.5
    too_few_ok = slo.verdict({"ttft_ms:p90": 1, "tpot_ms:p90": 1}, ok_rate=0.9)
    assert not too_few_ok["held"] and not too_few_ok["ok_held"]


def test_grid_list_and_short_axis_names() -> None:
    grid = spec.expand({"rate": [1, 2], "engine.num_blocks": [64, 128]})
    assert grid == [
        {"arrival.rate": 1, "target.engine.num_blocks": 64},
        {"arrival.rate": 1, "target.engine.num_blocks": 128},
        {"arrival.rate": 2, "target.engine.num_blocks": 64},
        {"arrival.rate": 2, "target.engine.num_blocks": 128},
    ]
    assert spec.expand([{"max_concurrency": 4}, {"tool_wait_scale": 0.5}]) == [
        {"arrival.max_concurrency": 4}, {"arrival.tool_wait_scale": 0.5}]
    with pytest.raises(ConfigError, match="not a RunConfig field"):
        spec.expand({"arrival.speed": [1]})
    with pytest.raises(ConfigError, match="non-empty list"):
        spec.expand({"rate": 3})


def test_a_bad_point_fails_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sweep point .*max_concurrency"):
        wb.sweep(BASE, {"max_concurrency": [2, 0]}, virtual=True, out_dir=tmp_path,
                 sweep_id="bad")
    assert not (tmp_path / "bad" / "runs").exists()


def test_pool_means_and_t_intervals() -> None:
    pooled = pool([{"x": 1.0, "y": None}, {"x": 3.0, "y": None}])
    assert pooled["x"] == 2.0 and pooled["y"] is None and pooled["repeats"] == 2
    # mean 2, s = sqrt(2), t(0.975, 1) = 12.706: half width 12.706 * sqrt(2) / sqrt(2)
    assert pooled["x_lo"] == pytest.approx(2 - 12.706) and pooled["x_hi"] == pytest.approx(14.706)


# -- virtual-time sweeps ------------------------------------------------------------------
def test_virtual_sweep_points_are_ordinary_runs_with_repeats(tmp_path: Path) -> None:
    s = wb.sweep(BASE, {"arrival.rate": [1, 8]}, repeats=2, slo=SLO_TEXT, virtual=True,
                 out_dir=tmp_path, sweep_id="grid")
    assert s.manifest.status == "completed" and s.axes == ["arrival.rate"]
    assert len(s.run_dirs) == 4
    for run_dir in s.run_dirs:
        run = load(run_dir)
        assert run.manifest.mode == "virtual" and len(run.records) == 80
    seeds = [r["seed"] for r in s.points[0]["runs"]]
    assert seeds == [0, 1]
    df = s.frame
    assert list(df["arrival.rate"]) == [1, 8]
    assert list(df["slo_held"]) == [True, False]
    assert df["ttft_ms_p90"][1] > 8000 > df["ttft_ms_p90"][0]
    assert "ttft_ms_p90_lo" in df and "goodput_rps" in df
    # the manifest on disk is the same sweep
    again = load_sweep(tmp_path / "grid")
    assert again.frame.equals(df)


def test_early_stop_skips_the_points_after_a_break_by_the_margin(tmp_path: Path) -> None:
    s = wb.sweep(BASE, {"arrival.rate": [1, 8, 12, 16]}, slo=SLO_TEXT, stop_margin=0.2,
                 virtual=True, out_dir=tmp_path, sweep_id="stop")
    assert s.manifest.status == "stopped_early"
    assert [p["status"] for p in s.points] == ["done", "done", "skipped", "skipped"]
    assert s.manifest.stopped_early["skipped"] == [2, 3]
    assert sorted(p.name for p in (tmp_path / "stop" / "runs").iterdir()) == ["p000-r0",
                                                                            "p001-r0"]


def test_no_early_stop_within_the_margin(tmp_path: Path) -> None:
    s = wb.sweep(BASE, {"arrival.rate": [8, 1]}, slo=SLO_TEXT, stop_margin=10.0,
                 virtual=True, out_dir=tmp_path, sweep_id="margin")
    assert s.manifest.status == "completed"
    assert [p["status"] for p in s.points] == ["done", "done"]


class Interrupt(Exception):
    pass


def test_interrupted_sweep_resumes_from_the_points_on_disk(tmp_path: Path) -> None:
    seen: list[str] = []

    def progress(text: str) -> None:
        seen.append(text)
        if text.startswith("rate=4 #0"):
            raise Interrupt

    over = {"arrival.rate": [1, 2, 4]}
    with pytest.raises(Interrupt):
        wb.sweep(BASE, over, virtual=True, out_dir=tmp_path, sweep_id="r", progress=progress)
    first = load_sweep(tmp_path / "r")
    assert first.manifest.status == "failed"
    assert [p["status"] for p in first.points] == ["done", "done", "pending"]
    started = {d: read_json(Path(d) / "manifest.json")["started_at"] for d in first.run_dirs}
    # a half-written run of the last point is set aside and run again, not trusted
    partial = tmp_path / "r" / "runs" / "p002-r0"
    partial.mkdir()
    (partial / "records.jsonl").write_text('{"request_id": "x"')

    seen.clear()
    resumed = wb.sweep(BASE, over, virtual=True, out_dir=tmp_path, sweep_id="r",
                       parallel=1, progress=seen.append)
    assert resumed.manifest.status == "completed" and len(resumed.manifest.resumed) == 1
    # what was kept and what runs again, each said once, in the sweep's progress lines
    assert seen == ["rate=1 #0: finished before, kept", "rate=1: done",
                    "rate=2 #0: finished before, kept", "rate=2: done",
                    "WARNING: runs/p002-r0 was incomplete: kept as runs/p002-r0.interrupted-0, "
                    "and run again", "rate=4 #0: simulating", "rate=4: done"], seen
    assert [p["status"] for p in resumed.points] == ["done", "done", "done"]
    for d, t in started.items():  # the finished points were not run again
        assert read_json(Path(d) / "manifest.json")["started_at"] == t
    assert (tmp_path / "r" / "runs" / "p002-r0.interrupted-0" / "records.jsonl").exists()
    assert len(load(partial).records) == 80

    with pytest.raises(ConfigError, match="holds a different sweep"):
        wb.sweep(BASE, {"arrival.rate": [1, 2]}, virtual=True, out_dir=tmp_path, sweep_id="r")


def test_capacity_search_finds_the_fine_grids_capacity_within_tolerance(tmp_path: Path) -> None:
    lo, hi, step = 1.0, 8.0, 0.5
    values = [lo + i * step for i in range(int((hi - lo) / step) + 1)]
    grid = wb.sweep(BASE, {"arrival.rate": values}, slo=SLO_TEXT, virtual=True,
                    parallel=2, out_dir=tmp_path, sweep_id="grid")
    held = list(grid.frame["slo_held"])
    assert held[0] and not held[-1]
    grid_capacity = values[held.index(False) - 1]  # highest value below the first break
    assert all(held[: held.index(False)])

    found = wb.capacity_search(BASE, "arrival.rate", lo, hi, SLO_TEXT, tolerance=step,
                               virtual=True, out_dir=tmp_path, sweep_id="cap")
    cap = found.capacity
    assert cap is not None and cap["status"] == "found"
    assert abs(cap["value"] - grid_capacity) <= step
    good, bad = cap["bracket"]
    assert bad - good <= step
    probes = {p["params"]["arrival.rate"]: p["slo"]["held"] for p in found.points}
    assert probes[good] is True and probes[bad] is False
    assert len(probes) < len(values)  # fewer runs than the grid, every one kept
    assert len(found.run_dirs) == len(probes)


def test_capacity_search_reports_below_and_above_the_range(tmp_path: Path) -> None:
    below = wb.capacity_search(BASE, "arrival.rate", 8, 16, SLO_TEXT, tolerance=1,
                               virtual=True, out_dir=tmp_path, sweep_id="below")
    assert below.capacity["status"] == "below_range" and below.capacity["value"] is None
    above = wb.capacity_search(BASE, "arrival.rate", 0.5, 1, SLO_TEXT, tolerance=0.5,
                               max_probes=2, virtual=True, out_dir=tmp_path, sweep_id="above")
    assert above.capacity["status"] == "above_range" and above.capacity["value"] == 1


def test_sweep_command_grid_and_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    from workbench.cli import main

    args = ["sweep", "--trace", MOONCAKE, "--max-items", "80", "--virtual", "-o", str(tmp_path)]
    assert main([*args, "--over", "rate=1,8", "--slo", SLO_TEXT, "--sweep-id", "g"]) == 0
    out = capsys.readouterr().out
    assert "SLO held" in out and f"sweep directory: {tmp_path / 'g'}" in out
    # the headline on top
    assert out.startswith("g: 2 points of arrival.rate 1–8 · virtual time (simulated engine, "
                          "default step times, not a GPU's) · At TTFT p90 ≤ 8 s: "), out
    assert main([*args, "--capacity", "rate", "--lo", "1", "--hi", "8", "--tolerance", "2",
                 "--slo", SLO_TEXT, "--sweep-id", "c"]) == 0
    out = capsys.readouterr().out
    assert "search of arrival.rate: found, bracket [" in out  # the capacity: the headline
    assert "capacity: arrival.rate = " not in out and "found by search" in out
    assert main([*args, "--over", "rate=1", "--slo", "ttft_ms:p90<1"]) == 2
    assert "METRIC:pQ<=LIMIT_MS" in capsys.readouterr().err


# -- live: flush between points -----------------------------------------------------------
async def test_live_sweep_flushes_the_servers_prefix_cache_between_points(tmp_path: Path
                                                                           ) -> None:
    from workbench.sim.server import serve_sim

    async with serve_sim(speedup=1000.0) as handle:
        base = {"trace": {"path": TRACELAB, "max_items": 6}, "target": handle.base_url,
                "backend": "vllm-tokens", "arrival": {"mode": "saturated"}}
        # control: without a flush, a second identical run finds the first one's blocks
        control = {**base, "backend": {"name": "vllm-tokens", "flush_cache": False}}
        first = await wb.run_async(control)
        second = await wb.run_async(control)
        assert wb.summarize(second)["actual_prefix_hit_rate"] > \
            wb.summarize(first)["actual_prefix_hit_rate"]
        # a sweep flushes before every run: both points see an empty cache, so the same
        # prompts hit exactly as often as the first run above did
        s = await wb.sweep_async(base, {"arrival.tool_wait_scale": [0.0, 0.5]},
                                 out_dir=tmp_path, sweep_id="live")
        resets = [r["flush"] for p in s.points for r in p["runs"]]
        assert [(f["endpoint"], f["status"], f["ok"]) for f in resets] == \
            [("POST /reset_prefix_cache", 200, True)] * 2
        assert json.loads(resets[0]["tries"][-1]["body"]) == {"success": True}
        rates = [p["metrics"]["actual_prefix_hit_rate"] for p in s.points]
        assert rates == [wb.summarize(first)["actual_prefix_hit_rate"]] * 2
        # the server's own counters agree: after the last point only its blocks are cached
        stats = handle.engine.stats()
        assert stats["prefix_cache_hits_tokens"] > 0 and stats["running"] == 0


async def test_a_sweep_against_sglang_names_counts_its_retractions_as_preemptions(
        tmp_path: Path) -> None:
    """A server exporting SGLang's names (the embedded engine in ``mode: sglang``, its KV
    cache small enough to retract): the point's preemptions are its retraction counter's
    increase (``sglang:num_retracted_requests_total``), not None for want of vLLM's."""
    from workbench.sim.server import serve_sim

    async with serve_sim(speedup=1000.0, mode="sglang", num_blocks=1200) as handle:
        base = {"trace": {"path": MOONCAKE, "max_items": 12}, "target": handle.base_url,
                "backend": {"name": "sglang-tokens", "scrape_interval_s": 0.01},
                "arrival": {"mode": "saturated"}}
        s = await wb.sweep_async(base, {"arrival.tool_wait_scale": [0.0]}, out_dir=tmp_path,
                                 sweep_id="sglang")
        retracted = handle.engine.stats()["preemptions"]
    assert retracted > 0
    assert s.points[0]["metrics"]["preemptions"] == retracted


# -- pictures and report ------------------------------------------------------------------
def test_knee_of_a_hockey_stick_and_none_for_a_line() -> None:
    from workbench.report.sweep_plots import knee

    x = [1, 2, 3, 4, 5, 6]
    y = [10, 11, 12, 14, 40, 200]
    # scaled: x - y = 0, .195, .389, .579, .642, 0 -> the point at 40 ms, where the curve bends
    assert knee(x, y) == 4
    assert knee([1, 2, 3], [1, 2, 3]) is None
    assert knee([1, 2], [1, 5]) is None


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("sweeps")
    a = wb.sweep(BASE, {"arrival.rate": [1, 4, 8]}, slo=SLO_TEXT, repeats=2, virtual=True,
                 out_dir=root, sweep_id="default", label="default engine")
    b = wb.sweep({**BASE, "target": {"url": "sim", "engine": {"speedup": 2.0}}},
                 {"arrival.rate": [1, 4, 8]}, slo=SLO_TEXT, virtual=True, out_dir=root,
                 sweep_id="fast", label="2x engine")
    return [str(a.sweep_dir), str(b.sweep_dir)]


def test_sweep_plots_draw_each_sweep_with_slo_line_and_knee(two_sweeps: list[str]) -> None:
    fig = wb.sweep_plot(two_sweeps, "latency")
    ttft_ax = fig.axes[0]
    labels = ttft_ax.get_legend_handles_labels()[1]
    assert "default engine: p90" in labels  # short: the metric is the axis's label
    assert any(lab.startswith("2x engine") for lab in labels)
    assert "SLO p90 ≤ 8000 ms" in labels
    hlines = [ln for ln in ttft_ax.get_lines() if list(ln.get_ydata()) == [8000, 8000]]
    assert hlines
    goodput = wb.sweep_plot(two_sweeps, "goodput")
    assert goodput.axes[0].get_xlabel() == "offered load (arrival.rate, req/s)"
    cache = wb.sweep_plot(two_sweeps, "cache")
    assert [a.get_title() for a in cache.axes] == ["Prefix-cache hits against load",
                                                   "Preemptions against load"]
    with pytest.raises(ValueError, match="valid: latency, goodput, cache, pareto"):
        wb.sweep_plot(two_sweeps, "violin")


@pytest.mark.slow
def test_report_renders_two_sweeps_side_by_side(two_sweeps: list[str], tmp_path: Path) -> None:
    import glob
    import html as html_mod
    import re

    from workbench.cli import main

    assert main(["report", *two_sweeps, "-o", str(tmp_path), "--run-id", "sw"]) == 0
    page = (tmp_path / "sw" / "report.html").read_text()
    text = html_mod.unescape(re.sub(r"<[^>]+>", "", page))
    for heading in ("Sweep report", "Throughput against latency", "Goodput against offered load",
                    "Prefix cache and preemptions against load"):
        assert heading in text
    assert "default engine" in text and "2x engine" in text
    assert len(glob.glob(str(tmp_path / "sw" / "figures" / "*.png"))) == 4  # and pareto
    points = glob.glob(str(tmp_path / "sw" / "tables" / "sweep_points*.csv"))
    assert points and len(Path(points[0]).read_text().splitlines()) == 1 + 6


def test_sweep_panel_redraws_the_chosen_figure(two_sweeps: list[str]) -> None:
    panel = wb.sweep_panel(two_sweeps)
    assert panel.figure().get_label() == "sweep_latency"
    panel.kind.value = "goodput"
    assert panel.figure().get_label() == "sweep_goodput"
    panel.kind.value, panel.stat.value = "latency", "p99"
    labels = panel.figure().axes[0].get_legend_handles_labels()[1]
    assert any(lab.endswith(": p99") for lab in labels)


@pytest.mark.slow
def test_sweep_notebook_runs_a_new_sweep_from_its_parameters(tmp_path: Path) -> None:
    from workbench.report.render import render_report

    html = render_report("sweep", {"out_dir": str(tmp_path / "sweeps"), "values": [1, 8],
                                   "sweep_id": "nb", "max_items": 20}, tmp_path / "reports")
    s = load_sweep(tmp_path / "sweeps" / "nb")
    assert s.manifest.status == "completed" and len(s.run_dirs) == 2
    assert "Throughput against latency" in Path(html).read_text()


def test_capacity_search_on_concurrency_is_on_integers(tmp_path: Path) -> None:
    # saturated, first 40 Mooncake requests: TTFT p90 ~0.6 s up to 4 sessions, 0.96 s at 8,
    # 4.7 s at 16 — the 2 s bound breaks between 8 and 16
    base = {**BASE, "trace": {"path": MOONCAKE, "max_items": 40},
            "arrival": {"mode": "saturated"}}
    s = wb.capacity_search(base, "max_concurrency", 1.0, 32.0, "ttft_ms:p90<=2000",
                           tolerance=1, virtual=True, out_dir=tmp_path, sweep_id="c")
    cap = s.capacity
    assert cap["status"] == "found" and cap["axis"] == "arrival.max_concurrency"
    good, bad = cap["bracket"]
    assert isinstance(good, int) and bad == good + 1 and 8 <= good < 16
    values = [p["params"]["arrival.max_concurrency"] for p in s.points]
    assert all(isinstance(v, int) for v in values) and len(set(values)) == len(values)


# -- parallel points ------------------------------------------------------------------------
def test_virtual_points_default_to_the_cores_and_give_the_same_outcome_in_processes(
        tmp_path: Path) -> None:
    """``parallel`` unset: a virtual sweep runs its points in as many processes as this
    process may use cores (here pinned to two); each point's outcome is the one it has
    when the points run one after another in this process."""
    import os

    from workbench.cores import usable_cores
    from workbench.sweeps.sweep_runner import SweepRunner

    over = {"arrival.rate": [1, 4, 8]}
    cfg = wb.RunConfig.from_dict(BASE)
    runner = SweepRunner(cfg, kind="grid", spec={}, axes=["arrival.rate"], virtual=True,
                         out_dir=tmp_path, sweep_id="default")
    assert runner.parallel == usable_cores()
    live = SweepRunner(cfg, kind="grid", spec={}, axes=["arrival.rate"],
                       out_dir=tmp_path, sweep_id="live")
    assert live.parallel == 1
    old = os.sched_getaffinity(0)
    if len(old) < 2:
        pytest.skip("one core: nothing runs in parallel here")
    os.sched_setaffinity(0, sorted(old)[:2])
    try:
        two = wb.sweep(BASE, over, slo=SLO_TEXT, virtual=True, out_dir=tmp_path,
                       sweep_id="two")
    finally:
        os.sched_setaffinity(0, old)
    one = wb.sweep(BASE, over, slo=SLO_TEXT, virtual=True, parallel=1, out_dir=tmp_path,
                   sweep_id="one")
    cols = ["arrival.rate", "ok", "slo_held", "ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50",
            "prefix_hit_rate"]
    cols = [c for c in cols if c in one.frame]
    assert len(cols) >= 5, list(one.frame.columns)
    assert two.frame[cols].equals(one.frame[cols])
    assert list(two.frame["slo_held"]) == [True, True, False]


def test_parallel_must_be_a_positive_integer_and_live_points_run_one_at_a_time(
        tmp_path: Path) -> None:
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ConfigError, match="sweep parallel must be"):
            wb.sweep(BASE, {"arrival.rate": [1]}, virtual=True, parallel=bad,
                     out_dir=tmp_path, sweep_id=f"bad{bad}")
    with pytest.raises(ConfigError, match="live points share one server"):
        wb.sweep(BASE, {"arrival.rate": [1]}, parallel=2, out_dir=tmp_path, sweep_id="live")


def test_a_trace_error_in_a_points_process_reaches_the_caller_whole(tmp_path: Path) -> None:
    """A point's process raises the trace's error to the sweep as it is (its path, line
    and rule), not a broken process pool: workbench's errors pickle whole."""
    import pickle

    from workbench.errors import OutputWriteError, TraceFormatError

    missing = tmp_path / "gone.jsonl"
    with pytest.raises(TraceFormatError) as info:
        wb.sweep({"trace": {"path": str(missing)}}, {"arrival.rate": [1, 2]}, virtual=True,
                 parallel=2, out_dir=tmp_path, sweep_id="gone")
    assert (info.value.path, info.value.line) == (str(missing), 0)
    assert "no such file" in info.value.rule
    for exc in (TraceFormatError("t.jsonl", 7, "field 'x' must be an int"),
                OutputWriteError("run/records.jsonl", OSError(28, "No space left on device"))):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc)
        assert vars(back) == vars(exc)


def test_every_command_takes_a_bundled_traces_name(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``mooncake/conversation_trace_head600.jsonl`` (as the notebooks and ``plan`` list
    it) is that bundled file from any folder, in a sweep's point processes too."""
    monkeypatch.chdir(tmp_path)
    name = "mooncake/conversation_trace_head600.jsonl"
    s = wb.sweep({"trace": {"path": name, "max_items": 20}}, {"arrival.rate": [1, 2]},
                 virtual=True, parallel=2, out_dir=tmp_path, sweep_id="named")
    assert [p["status"] for p in s.points] == ["done", "done"]
    run = wb.simulate({"trace": {"path": name, "max_items": 20}})
    assert len(run.records) == 20 and run.manifest.trace["path"].endswith(name)


def test_capacity_search_in_two_processes_probes_two_values_a_round(tmp_path: Path) -> None:
    """``parallel=2`` in virtual time: lo with hi, then two points cutting the bracket in
    three a round: the same capacity within the tolerance, in fewer rounds than one probe
    a round takes; every probe kept."""
    kw = {"tolerance": 0.5, "virtual": True, "out_dir": tmp_path}
    one = wb.capacity_search(BASE, "arrival.rate", 1.0, 8.0, SLO_TEXT, parallel=1,
                             sweep_id="one", **kw)
    two = wb.capacity_search(BASE, "arrival.rate", 1.0, 8.0, SLO_TEXT, parallel=2,
                             sweep_id="two", **kw)
    a, b = one.capacity, two.capacity
    assert a["status"] == b["status"] == "found"
    for cap, sweep in ((a, one), (b, two)):
        good, bad = cap["bracket"]
        assert bad - good <= 0.5
        verdicts = {p["params"]["arrival.rate"]: p["slo"]["held"] for p in sweep.points}
        assert verdicts[good] is True and verdicts[bad] is False
        assert len(cap["probes"]) == len(sweep.points) == len(sweep.run_dirs)
    assert abs(a["value"] - b["value"]) <= 0.5  # the same capacity, within the tolerance
    assert b["rounds"] < a["rounds"] == len(a["probes"])  # one probe a round
    rates = [p["params"]["arrival.rate"] for p in two.points]
    assert rates[:2] == [1.0, 8.0]  # lo and hi in the first round


@pytest.mark.parametrize("width", [1, 2, 3])
def test_capacity_rounds_on_a_known_verdict(width: int) -> None:
    """The search's arithmetic on a verdict known in advance (held up to 37): found
    within the tolerance; integers stay integers; ``max_probes`` bounds the probes."""
    import asyncio

    from workbench.sweeps.capacity import _search

    seen: list[float] = []

    async def held(values: list[float]) -> list[bool]:
        seen.extend(values)
        return [v <= 37 for v in values]

    res = asyncio.run(_search(held, 1, 8, 1, 2.0, 24, True, width))
    assert res["status"] == "found" and res["value"] == 37 and res["bracket"] == [37, 38]
    assert all(isinstance(v, int) for v in seen) and len(set(seen)) == len(seen)
    seen.clear()
    res = asyncio.run(_search(held, 1.0, 8.0, 0.25, 2.0, 24, False, width))
    assert res["status"] == "found" and 37 - 0.25 <= res["value"] <= 37
    seen.clear()
    capped = asyncio.run(_search(held, 1, 8, 1, 2.0, 5, True, width))
    assert len(seen) <= 5 and capped["status"] in ("max_probes", "found")
    above = asyncio.run(_search(held, 1, 2, 1, 2.0, 3, True, width))
    assert above["status"] == "above_range" and above["value"] <= 37


@pytest.mark.parametrize("slo_text", [
    "ttft_ms:p90<=8000,tpot_ms:p99<=40,e2e_ms:p50<=9000",
    "ttft_ms:p50<=5000,itl_ms:p90<=30",  # pooled gaps: the columns need the token times
])
def test_a_points_numbers_from_its_columns_equal_those_from_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slo_text: str) -> None:
    """A virtual point keeps its records on disk; its SLO values, ok rate and goodput are
    read from ``records.parquet``'s columns and equal those of the records read back."""
    import workbench.storage.rundir as rundir
    from workbench.sweeps.points import point_metrics, simulate_and_measure

    slo = SLO.parse(slo_text)
    assert slo is not None
    cfg = {**BASE, "out_dir": str(tmp_path)}
    real_load = rundir.load

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the point's records were parsed back")

    monkeypatch.setattr(rundir, "load", no_load)
    run_dir, cols = simulate_and_measure(cfg, slo.to_dict())
    monkeypatch.setattr(rundir, "load", real_load)
    records = point_metrics(run_dir, slo, load(run_dir))  # the records in memory
    assert not load(run_dir).records_on_disk
    keys = [k for k in records if k.startswith("slo:")] + ["ok_rate", "goodput_rps",
                                                          "preemptions"]
    assert len(keys) == len(slo.bounds) + 3
    for k in keys:
        assert cols[k] == pytest.approx(records[k], rel=1e-12), k
    assert all(cols[k] is not None for k in keys)
    # without pyarrow (no columns to read) the stored run's records are read back instead
    import workbench.metrics.columns as columns

    loads: list[object] = []

    def counted_load(*args: object, **kwargs: object) -> object:
        loads.append(args)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(columns, "available", lambda: False)
    monkeypatch.setattr(rundir, "load", counted_load)
    fallback = point_metrics(run_dir, slo)
    assert len(loads) == 1
    for k in keys:
        assert fallback[k] == pytest.approx(records[k], rel=1e-12), k


def test_a_sweep_says_how_long_its_first_point_takes_before_it_runs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """docs/arrival.md, "How long a run takes": the first said line of a sweep whose point
    waits 11 minutes on tools and sub-agents (the weka sample's first conversation), said
    once: not again by each point's run, nor to the log beside the progress callback."""
    seen: list[str] = []
    base = {"trace": {"path": "workbench/data/weka/cc_traces_sample.jsonl", "max_items": 1}}
    over = {"arrival.tool_wait_scale": [1, 0.9, 0.5]}
    with caplog.at_level(logging.WARNING, "workbench"):
        wb.sweep(base, over, virtual=True, out_dir=tmp_path, sweep_id="w",
                 progress=seen.append)
    assert seen[0] == (
        "WARNING: the first point: this run takes at least 11 min 3 s of simulated time "
        "before any server time: its longest agent task (trace_0277) waits 11 min 3 s on "
        "tools and sub-agents; to shorten it: --tool-wait-scale, --max-items, or a cap on "
        "waits where the reader has one (weka: --trace-option max_delay_s=S)")
    assert not any("this run takes" in t for t in seen[1:])
    assert "this run takes" not in caplog.text  # every point's run > 3 min: none says so
    caplog.clear()
    with caplog.at_level(logging.WARNING, "workbench"):  # no callback: the log, once
        wb.sweep(base, over, virtual=True, out_dir=tmp_path, sweep_id="w2")
    assert caplog.text.count("this run takes at least") == 1
    assert "sweep w2: the first point: this run takes at least 11 min 3 s" in caplog.text
    seen.clear()  # resumed with every point done: none runs, so none is announced
    wb.sweep(base, over, virtual=True, out_dir=tmp_path, sweep_id="w", progress=seen.append)
    assert not any("this run takes" in t for t in seen), seen
    assert seen[0] == "tool_wait_scale=1 #0: finished before, kept", seen


def _days_apart(tmp_path: Path) -> str:
    """Three one-request sessions 50,000 s apart: their releases span 1.2 days."""
    trace = tmp_path / "days_apart.csv"
    trace.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                     "tool_wait_after_ms\n"
                     "0,0,0,0,512,16,0\n1,50000000,0,0,400,16,0\n2,100000000,0,0,300,16,0\n")
    return str(trace)


def test_a_sweep_says_its_points_arrival_span_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """docs/arrival.md, "Arrival span": releases spread over more than a day are said once
    per sweep, before the first point, naming the points (and each one's span when they
    differ), not again as each point's run starts; a swept rate's advice is a higher rate,
    not ``--rate`` (which the points replace)."""
    seen: list[str] = []
    base = {"trace": {"path": _days_apart(tmp_path)}}
    with caplog.at_level(logging.WARNING, "workbench"):
        wb.sweep(base, {"engine.max_num_seqs": [1, 2]}, virtual=True, parallel=1,
                 out_dir=tmp_path, sweep_id="same", progress=seen.append)
    span = [t for t in seen if "arrivals span" in t]
    assert span == [
        "WARNING: arrivals span 1.2 days (100,000,000 ms) at max_num_seqs=1 and "
        "max_num_seqs=2: the last unit is released that long after the first; "
        "rescale the arrivals with --rate R (arrival.rate, units/s) or replay --arrival "
        "saturated"], seen
    assert seen.index(span[0]) < seen.index("max_num_seqs=1 #0: simulating")
    # the first point's floor states the same span in the same unit (durations.duration_text)
    assert ("WARNING: the first point: this run takes at least 1.2 days of simulated time "
            "before any server time: the units' releases span 1.2 days;") in "\n".join(seen)
    assert "arrivals span" not in caplog.text  # no point's run said it again
    seen.clear()
    with caplog.at_level(logging.WARNING, "workbench"):
        wb.sweep(base, {"arrival.rate": [1e-05, 2e-05, 1]}, virtual=True, parallel=1,
                 out_dir=tmp_path, sweep_id="rates", progress=seen.append)
    assert [t for t in seen if "arrivals span" in t] == [
        "WARNING: arrivals span 2.3 days (200,000,000 ms) at rate=1e-05, 1.2 days "
        "(100,000,000 ms) at rate=2e-05: the last unit is released that long after "
        "the first; sweep higher arrival.rate values (units/s)"], seen
    assert "arrivals span" not in caplog.text


def test_the_span_warning_names_a_few_points_and_counts_the_rest() -> None:
    from workbench.sweeps.sweep_runner import SPAN_NAMED, _span_sentence

    day = 86_400_000.0
    long = [(f"rate={i}", day * (2 + i // 4)) for i in range(SPAN_NAMED + 4)]
    said = _span_sentence(long, "R")
    assert said.startswith("arrivals span 2.0 days (172,800,000 ms) at rate=0, rate=1, "
                           "rate=2, rate=3, 3.0 days (259,200,000 ms) at rate=4 and rate=5, "
                           "and 4 more points: the last unit"), said
    assert said.endswith("; R")
