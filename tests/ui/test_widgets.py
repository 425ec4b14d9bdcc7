"""The run panel: controls ↔ RunConfig, Run in a process of its own followed from the
running loop, Stop keeps finished records, live sections never drawn empty."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
from pathlib import Path
from typing import Any

import pytest

from workbench.config import RunConfig, available
from workbench.data import path as data_path
from workbench.errors import ConfigError, stderr_tail
from workbench.ui.controls import OWN_FILE
from workbench.ui.widgets import POLICY_DEFAULT, panel, what_if

DEMO = "tracelab/multi_session_example.csv"


def notebook_params(**over: Any) -> dict[str, Any]:
    """The replay notebook's parameters cell (defaults), with overrides."""
    params: dict[str, Any] = {
        "trace_path": "", "bundled_trace": DEMO, "trace_format": "auto", "trace_options": {},
        "max_items": 3,
        "policy": None, "arrival": "trace-timed", "rate": None, "max_concurrency": None,
        "backend": "openai", "target": "sim", "engine": {"speedup": 20.0}, "seed": 0,
        "out_dir": "reports", "run_id": None,
    }
    params.update(over)
    return params


def config_from_params(p: dict[str, Any]) -> RunConfig:
    """Exactly what the replay notebook's config cell builds from its parameters."""
    return RunConfig.from_dict({
        "trace": {"path": p["trace_path"] or str(data_path(p["bundled_trace"])),
                  "format": p["trace_format"], "max_items": p["max_items"],
                  "options": p["trace_options"]},
        "context": {"policy": p["policy"]},
        "arrival": {"mode": p["arrival"], "rate": p["rate"],
                    "max_concurrency": p["max_concurrency"]},
        "backend": p["backend"],
        "target": {"url": p["target"], "engine": p["engine"]},
        "seed": p["seed"], "out_dir": p["out_dir"], "run_id": p["run_id"],
    })


def test_untouched_controls_give_back_the_config() -> None:
    cfg = config_from_params(notebook_params(policy="prefix-preserving", max_concurrency=2))
    assert panel(cfg).config() == cfg


def test_setting_controls_builds_the_same_config_as_the_parameters() -> None:
    p = panel(config_from_params(notebook_params()))
    c = p.controls
    c.trace_choice.value = "request-factory/session_rounds_v2_example.csv"  # a bundled name
    c.max_items.value = 2
    c.policy.value = "prefix-preserving"
    c.arrival.value = "trace-timed"
    c.rate.value = 4.0
    c.max_concurrency.value = 2
    c.backend.value = "vllm-tokens"
    c.speedup.value = 50.0
    c.num_blocks.value = 4096
    expected = config_from_params(notebook_params(
        bundled_trace="request-factory/session_rounds_v2_example.csv", max_items=2,
        policy="prefix-preserving", rate=4.0, max_concurrency=2, backend="vllm-tokens",
        engine={"speedup": 50.0, "num_blocks": 4096},
    ))
    assert p.config() == expected


def test_zero_means_unset_and_url_targets() -> None:
    p = panel(config_from_params(notebook_params(max_items=3, rate=2.0)))
    p.controls.max_items.value = 0
    p.controls.rate.value = 0.0
    p.controls.target.value = "url"
    p.controls.url.value = "http://127.0.0.1:9"
    cfg = p.config()
    assert cfg.trace.max_items is None and cfg.arrival.rate is None
    assert cfg.target.url == "http://127.0.0.1:9" and cfg.target.engine == {"speedup": 20.0}


def test_choices_come_from_the_registries() -> None:
    from workbench.context import POLICIES

    c = panel().controls
    names = available()
    assert list(c.backend.options) == names["backends"]
    assert list(c.arrival.options) == names["arrival_modes"]
    assert list(c.policy.options) == [POLICY_DEFAULT, *POLICIES.names()]
    assert set(names["context_policies"]) - set(c.policy.options) == set(POLICIES.aliases())
    assert list(c.format.options) == names["trace_formats"]


def test_click_outside_a_loop_explains_itself() -> None:
    p = panel()
    p.run_button.click()
    assert p.task is None and "no running event loop" in p.status_text


async def test_run_button_replays_in_the_background_and_shows_results(tmp_path: Path) -> None:
    cfg = config_from_params(notebook_params(out_dir=str(tmp_path), max_items=2,
                                             engine={"speedup": 50.0}))
    p = panel(cfg)
    p.run_button.click()
    assert p.task is not None and p.run_button.disabled and not p.stop_button.disabled
    async with asyncio.timeout(60):
        result = await p.task
    assert p.error is None, p.error
    assert result is p.result and result is not None
    assert [r.status for r in result.records] == ["ok"] * 5  # sessions 0 and 1: 3 + 2 rounds
    assert p.progress.value == p.progress.max == 5
    headline = p.output.outputs[0]["data"]["text/plain"]  # the headline on top
    # 5 values resolve no p90 or p99: the max in their place, with the count
    assert headline.startswith("5/5 ok · TTFT p50/max ") and " ms of 5 requests · " in headline
    latency = p.output.outputs[1]["data"]["text/html"]
    assert "TTFT (ms)" in latency and "TTFT over 5" in latency  # the caption says why
    for section in p.figures:  # latency CDFs, in flight and TTFT over time, the swimlane
        assert "image/png" in section.output.outputs[0]["data"], section.name
    assert p.status_text.startswith("done: 5 ok")
    assert not p.run_button.disabled and p.stop_button.disabled
    assert Path(result.run_dir or "").parent == tmp_path
    assert result.manifest.status == "completed"


async def test_stop_cancels_in_flight_requests_and_keeps_finished_ones(tmp_path: Path) -> None:
    cfg = config_from_params(notebook_params(out_dir=str(tmp_path), max_items=None,
                                             engine={"speedup": 0.2}))
    p = panel(cfg)
    first_done = asyncio.Event()  # the progress bar's own change event: one request finished
    p.progress.observe(lambda change: change["new"] >= 1 and first_done.set(), names="value")
    p.run_button.click()
    assert p.task is not None
    async with asyncio.timeout(60):
        await first_done.wait()
        p.stop_button.click()
        assert p.stop_button.disabled and p.status_text == "stopping…"
        result = await p.task
    assert result is not None and result.cancelled
    statuses = [r.status for r in result.records]
    assert statuses.count("ok") >= 1
    assert statuses.count("ok") < 8  # stopped before the whole trace ran
    assert p.status_text.startswith("cancelled:")
    from workbench.storage.rundir import load

    stored = load(result.run_dir or "")
    assert [r.request_id for r in stored.records if r.status == "ok"] == [
        r.request_id for r in result.records if r.status == "ok"
    ]


@pytest.mark.parametrize("blocks", [64, 65536])
async def test_what_if_runs_simulate_off_the_loop(blocks: int) -> None:
    cfg = RunConfig.from_dict({"trace": {"path": str(data_path(DEMO)), "max_items": 3}})
    ui = what_if(cfg)
    ui.num_blocks.value = blocks
    assert ui.config().target.engine == {"num_blocks": blocks, "block_size": 16}
    async with asyncio.timeout(60):
        result = await ui.run()
    assert len(result.records) == 8
    assert "actual_prefix_hit_rate" in ui.output.outputs[0]["data"]["text/html"]


async def test_a_bad_config_is_reported_in_the_panel_and_run_stays_enabled() -> None:
    p = panel()
    p.controls.target.value = "url"  # with no URL typed
    assert p.run_button.disabled  # checked as typed
    p.run_button.click()  # a click that gets through anyway is answered, not run
    assert p.task is not None
    async with asyncio.timeout(10):
        assert await p.task is None
    assert p.status_text.startswith("config error: target 'url' needs a server URL")
    p.controls.url.value = "http://127.0.0.1:9"
    assert not p.run_button.disabled


def _message(d: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(d)
    return html.escape(str(err.value))


def test_input_is_checked_as_typed_with_the_configs_own_messages(tmp_path: Path) -> None:
    p = panel()
    c = p.controls
    assert p.check.value == "" and not p.run_button.disabled
    c.arrival.value = "closed-loop"  # without a concurrency cap
    assert _message({"arrival": {"mode": "closed-loop"}}) in p.check.value
    assert p.run_button.disabled
    c.max_concurrency.value = 2
    assert p.check.value == "" and not p.run_button.disabled
    c.output_len.value = "fixed:x"
    assert _message({"arrival": {"output_len": "fixed:x"}}) in p.check.value
    c.output_len.value = "fixed:32"
    c.trace_choice.value = OWN_FILE
    c.trace_path.value = str(tmp_path / "missing.csv")
    assert "no such file" in p.check.value and p.run_button.disabled
    c.trace_path.value = "synthetic:random,requests=8"  # a standard workload, no file
    assert p.check.value == "" and not p.run_button.disabled
    assert p.config().trace.path == "synthetic:random,requests=8"
    c.trace_path.value = str(data_path(DEMO))  # any path is accepted
    assert p.check.value == ""
    cfg = p.config()
    assert cfg.trace.path == str(data_path(DEMO))
    assert (cfg.arrival.mode, cfg.arrival.max_concurrency, cfg.arrival.output_len) == (
        "closed-loop", 2, "fixed:32")


def shown(widget: Any) -> bool:
    return widget.layout.display != "none"


def test_fields_show_only_where_they_apply() -> None:
    c = panel().controls
    assert shown(c.speedup) and not shown(c.url) and not shown(c.model)
    assert shown(c.rate) and not shown(c.duration) and not shown(c.trace_path)
    assert shown(c.trace_choice)  # each field hides alone (no layout shared between fields)
    c.target.value = "url"
    assert shown(c.url) and shown(c.model) and shown(c.api_key_env) and not shown(c.num_blocks)
    c.arrival.value = "closed-loop"
    assert shown(c.duration) and not shown(c.rate)
    c.trace_choice.value = OWN_FILE
    assert shown(c.trace_path)


def test_warmup_tool_waits_output_length_model_and_key_variable_reach_the_config() -> None:
    p = panel(config_from_params(notebook_params()))
    c = p.controls
    c.warmup.value, c.tool_wait_scale.value, c.output_len.value = 1, 0.5, "budget:64"
    c.target.value, c.url.value = "url", "http://127.0.0.1:9"
    c.model.value, c.api_key_env.value = "qwen", "MY_KEY"
    cfg = p.config()
    assert (cfg.arrival.warmup, cfg.arrival.tool_wait_scale, cfg.arrival.output_len) == (
        1, 0.5, "budget:64")
    assert cfg.backend.options["model"] == "qwen" and cfg.backend.api_key_env == "MY_KEY"
    assert cfg.backend.stream is True and c.stream.value is True
    c.stream.value = False  # non-streaming (docs/wire-protocols.md): the panel's checkbox
    assert p.config().backend.stream is False


def test_aliases_are_not_listed_twice_and_show_as_their_name() -> None:
    from workbench.context import POLICIES

    c = panel(config_from_params(notebook_params(policy="monotonic"))).controls
    assert "monotonic" not in c.policy.options
    assert c.policy.value == POLICIES.canonical("monotonic") == "prefix-preserving"


def test_the_default_panel_is_the_clis_default_config() -> None:
    cfg = panel().config()
    assert cfg == RunConfig.from_dict({"trace": {"path": str(data_path(DEMO))}})
    assert cfg.target.engine == {} and cfg.out_dir is None  # the CLI's: engine defaults


# -- issue 14: the report sections follow the panel (Run All never raises) ------------------
def test_sections_over_a_panel_say_press_run_until_it_has_a_result() -> None:
    from workbench.ui.live import LiveReport, report_view

    view = report_view(panel())
    assert isinstance(view, LiveReport)
    out = view.table("latency")
    assert "Press Run in the panel above" in out.outputs[0]["data"]["text/plain"]
    assert "Press Run" in view.plot("cdf").outputs[0]["data"]["text/plain"]


async def test_sections_fill_in_while_the_run_goes_and_show_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import workbench.ui.widgets as widgets_mod
    from workbench.ui.live import report_view

    monkeypatch.setattr(widgets_mod, "LIVE_MIN_S", 0.05)  # redraw often, for the test
    monkeypatch.setattr(widgets_mod, "LIVE_DUTY", 1.0)
    cfg = config_from_params(notebook_params(  # 6 sessions, 37 requests over ~15 s
        out_dir=str(tmp_path), bundled_trace="tracelab/multi_session_large.csv", max_items=6,
        engine={"speedup": 1.0}))
    p = panel(cfg)
    view = report_view(p)
    latency, figure = view.table("latency"), view.plot("cdf")
    live = asyncio.Event()

    def spy(change: Any) -> None:  # the CDF drawn (two ok requests) while the run goes
        new = change["new"]
        if new and new[0]["data"].get("text/plain", "").startswith("live:") and (
                "image/png" in new[-1]["data"]):
            live.set()

    figure.observe(spy, names="outputs")
    p.run_button.click()
    assert "a new run is starting" in latency.outputs[0]["data"]["text/plain"]
    async with asyncio.timeout(120):
        await live.wait()  # drawn from the records on disk while the run went on
        assert p.running
        assert "live:" in latency.outputs[0]["data"]["text/plain"]
        assert "image/png" in figure.outputs[-1]["data"]
        result = await p.task  # type: ignore[misc]
    assert result is not None and p.latest is result
    assert "TTFT (ms)" in latency.outputs[0]["data"]["text/html"]  # the final run, no note
    assert "image/png" in figure.outputs[0]["data"]
    later = report_view(p).table("errors")  # a section made after the run shows it at once
    n = len(result.records)
    assert f"none (all {n} requests ended ok)" in later.outputs[0]["data"]["text/html"]


def test_a_section_waits_for_data_instead_of_drawing_empty_axes() -> None:
    from workbench.executors.virtual import simulate
    from workbench.ui.live import waiting_for

    records = simulate(config_from_params(notebook_params(max_items=2))).records
    first_rounds = [r for r in records if r.round_idx == 0]
    assert waiting_for("cdf", []) == "fills in from the first finished request"
    assert waiting_for("cdf", first_rounds[:1]) == "fills in from the second ok request"
    assert waiting_for("over_time", first_rounds[:1]) is None
    assert waiting_for("cdf", first_rounds) is None
    # a session trace whose second rounds have not finished is not "sessionless"
    assert waiting_for("sessions", first_rounds) == "fills in when a session's second round ends"
    assert waiting_for("sessions", records) is None
    failed = [dataclasses.replace(r, status="error") for r in first_rounds]
    assert waiting_for("latency", failed) == (
        "fills in from the first ok request (2 finished, none ok yet)")
    assert waiting_for("errors", failed) is None


async def test_run_clears_the_last_results_at_once_and_after_a_failed_run(tmp_path: Path) -> None:
    from workbench.ui.live import report_view

    cfg = config_from_params(notebook_params(out_dir=str(tmp_path), max_items=1,
                                             engine={"speedup": 50.0}))
    p = panel(cfg)
    latency = report_view(p).table("latency")
    p.run_button.click()
    async with asyncio.timeout(60):
        assert await p.task is not None  # type: ignore[misc]
    assert "TTFT (ms)" in latency.outputs[0]["data"]["text/html"] and p.output.outputs
    broken = tmp_path / "broken.csv"
    broken.write_text("session_id,arrival_time\n0,zero\n")
    p.controls.trace_choice.value = OWN_FILE
    p.controls.trace_path.value = str(broken)
    p.run_button.click()
    assert p.output.outputs == ()  # gone the moment Run is pressed
    assert "a new run is starting" in latency.outputs[0]["data"]["text/plain"]
    async with asyncio.timeout(60):
        assert await p.task is None  # type: ignore[misc]
    assert p.status_text.startswith("failed: TraceFormatError: ")
    assert str(broken) in p.status_text
    text = latency.outputs[0]["data"]["text/plain"]
    assert "the run failed" in text and "ttft_ms" not in str(latency.outputs)
    assert p.latest is None and not p.run_button.disabled


async def test_the_panels_measurement_is_not_disturbed_by_its_redraws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo replay (303 requests, 48 sessions, 4 at once, vllm-tokens) from the panel,
    every report section redrawing as often as it can on this loop: release lag p99 within
    the bound of the issue (< 50 ms; the CLI's, side by side: bench/bench_panel.py)."""
    import workbench.ui.widgets as widgets_mod
    from workbench.report.sections import TABLE_NAMES
    from workbench.ui.live import report_view

    monkeypatch.setattr(widgets_mod, "LIVE_MIN_S", 0.0)  # redraw back to back (duty-bound)
    monkeypatch.setattr(widgets_mod, "LIVE_DUTY", 1.0)
    monkeypatch.setattr(widgets_mod, "LIVE_SECTIONS_S", 1e9)  # every section, every redraw
    cfg = RunConfig.from_dict({
        "trace": {"path": str(data_path("tracelab/multi_session_large.csv"))},
        "arrival": {"max_concurrency": 4}, "backend": "vllm-tokens",
        "target": {"url": "sim", "engine": {"speedup": 20.0}}, "out_dir": str(tmp_path)})
    p = panel(cfg)
    view = report_view(p)
    for name in TABLE_NAMES:
        view.table(name)
    for kind in ("cdf", "over_time", "ttft_vs_uncached", "prefix_hits", "hit_by_round",
                 "ttft_by_round", "sessions", "timeline"):
        view.plot(kind)
    redraws = []

    def count(change: Any) -> None:  # "live: 120 of 303 requests finished (run going)"
        text = change["new"][0]["data"].get("text/plain", "") if change["new"] else ""
        if text.startswith("live:"):
            redraws.append(int(text.split()[1]))

    view.sections[-1].output.observe(count, names="outputs")  # the last: all redrawn
    p.run_button.click()
    try:
        async with asyncio.timeout(240):
            result = await p.task  # type: ignore[misc]
    except TimeoutError:
        job = p.job
        raise AssertionError(f"no result: {p.status_text!r}, {job and job.snapshot()}, "
                             f"{redraws}, {job and stderr_tail(job._stderr)}") from None
    assert result is not None and p.error is None
    assert len([r for r in result.records if r.status == "ok"]) == 303
    # the sections redrew while it ran (how often depends on the host's load: the render
    # process runs at a lower priority; 3-8 times on a quiet host, once at load 8)
    assert redraws and redraws[0] < 303
    # each redraw kept with its start, wall and CPU time (the last one shown may have been
    # cut by the run's end before it was kept; a short run may end before any)
    assert len(p.redraws) >= len(redraws) - 1
    assert all(start >= 0 and wall >= 0 and cpu >= 0 for start, wall, cpu in p.redraws)
    lag = result.manifest.client["release_lag_ms"]
    assert lag["count"] == 303 and lag["p99"] < 50.0, lag


def test_report_view_of_a_stored_run_is_the_tables_themselves(tmp_path: Path) -> None:
    from workbench.executors.virtual import simulate
    from workbench.report.tables import Table
    from workbench.ui.live import report_view

    result = simulate(config_from_params(notebook_params(out_dir=str(tmp_path), max_items=2)))
    view = report_view(result)
    table = view.table("config")
    assert isinstance(table, Table)
    assert table.frame.loc["1 format", "value"] == "session (detected)"
    assert view.plot("sessions").get_label() == "sessions"


def test_arrival_process_burstiness_and_ramp_reach_the_config_and_show_where_they_apply(
) -> None:
    """gamma's burstiness, a linear or exponential ramp over the units or over seconds
    (docs/arrival.md): shown for the modes that draw arrivals, in the config as the CLI's
    flags put them; a mode change leaves none of them behind."""
    p = panel(config_from_params(notebook_params()))
    c = p.controls
    assert not shown(c.burstiness) and not shown(c.ramp) and not shown(c.ramp_start)
    c.arrival.value, c.rate.value, c.burstiness.value = "gamma", 3.0, 0.5
    assert shown(c.burstiness) and shown(c.ramp) and not shown(c.ramp_end)
    a = p.config().arrival
    assert (a.mode, a.rate, a.burstiness, a.ramp_up_strategy) == ("gamma", 3.0, 0.5, None)
    c.ramp.value = "linear"
    assert shown(c.ramp_start) and shown(c.ramp_end) and shown(c.ramp_duration)
    assert not shown(c.rate)  # the ramp sets the rate
    c.ramp_start.value, c.ramp_end.value, c.ramp_duration.value = 1.0, 8.0, 30.0
    a = p.config().arrival
    assert (a.rate, a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps,
            a.ramp_up_duration_s) == (None, "linear", 1.0, 8.0, 30.0)
    c.ramp_duration.value = 0.0  # 0: the ramp goes over the units (vLLM's form)
    assert p.config().arrival.ramp_up_duration_s is None
    assert panel(p.config()).config() == p.config()  # a ramped config shows as itself
    c.ramp.value, c.ramp_start.value = "exponential", 0.0
    assert "cannot start at 0" in (c.check(p.base) or "")
    c.arrival.value = "poisson"
    assert not shown(c.burstiness)
    assert "burstiness 0.5 shapes gamma gaps" in (c.check(p.base) or "")
    c.arrival.value = "trace-timed"  # no process: burstiness and ramp are dropped
    a = p.config().arrival
    assert (a.burstiness, a.ramp_up_strategy, a.ramp_up_start_rps) == (1.0, None, None)


# -- issue 40: a whole-number field refuses what is not one, visibly -------------------------
WHOLE_FIELDS = ("max_items", "max_concurrency", "warmup", "block_size", "num_blocks")


def test_no_integer_field_of_the_panel_can_change_what_is_typed() -> None:
    """ipywidgets' IntText/BoundedIntText drop the dot in the browser ("2.5" → 25): none is
    left in the panel; every whole-number field is a ``WholeNumber`` (the text as typed)."""
    import ipywidgets as w

    from workbench.ui.controls import WholeNumber

    c = panel().controls
    assert not [f.description for f in c.fields()
                if isinstance(f, w.IntText | w.BoundedIntText | w.IntSlider)]
    assert {name for name, f in vars(c).items() if isinstance(f, WholeNumber)} == set(
        WHOLE_FIELDS)


@pytest.mark.parametrize("name", WHOLE_FIELDS)
@pytest.mark.parametrize("typed", ["2.5", "2,5", "1e3", "two", "", "0x10"])
def test_a_non_integer_in_an_integer_field_is_refused_with_a_message(name: str,
                                                                     typed: str) -> None:
    p = panel(config_from_params(notebook_params()))
    field = getattr(p.controls, name)
    field.value = typed
    assert field.value == typed  # kept as typed, never changed into another number
    label = html.escape(field.description)
    assert p.check.value.startswith('<span style="color:#b00">config: ')
    assert label in p.check.value
    assert (f"{html.escape(repr(typed))} is not a whole number" in p.check.value
            if typed else "type a whole number" in p.check.value)
    assert p.run_button.disabled
    with pytest.raises(ConfigError, match="whole number"):
        p.config()
    field.value = " 2 "  # a whole number (spaces around it are no change): accepted
    assert "whole number" not in p.check.value


def test_whole_numbers_typed_reach_the_config_as_ints() -> None:
    p = panel(config_from_params(notebook_params()))
    c = p.controls
    c.max_concurrency.value = "3"
    c.max_items.value = 2  # assigned in code: kept as its digits
    c.num_blocks.value = " 4096 "
    assert c.max_items.value == "2"
    cfg = p.config()
    assert (cfg.arrival.max_concurrency, cfg.trace.max_items) == (3, 2)
    assert cfg.target.engine["num_blocks"] == 4096
    c.max_concurrency.value = "0"  # 0: no cap, as the label says
    assert p.config().arrival.max_concurrency is None


async def test_the_status_line_runs_a_clock_and_always_says_finalizing(tmp_path: Path) -> None:
    """Issue 40: while the run starts and goes the status line carries the time since Run
    (it advances at every poll, whether or not a request ended), and "finalizing…" shows
    between the traffic's end and the outcome, however short the run's own finalizing."""
    cfg = config_from_params(notebook_params(out_dir=str(tmp_path), max_items=2,
                                             engine={"speedup": 10.0}))
    p = panel(cfg)
    seen: list[str] = []
    p.status.observe(lambda change: seen.append(p.status_text), names="value")
    p.run_button.click()
    async with asyncio.timeout(60):
        assert await p.task is not None  # type: ignore[misc]
    assert seen[0] == "starting engine…"  # at once on Run, then from the first poll on:
    clocked = [s for s in seen[1:] if s.startswith(("starting engine…", "running"))]
    assert clocked and all(re.fullmatch(r".* · \d+\.\d s", s) for s in clocked), seen
    running = [i for i, s in enumerate(seen) if s.startswith("running")]
    final = seen.index("finalizing…")
    assert running and max(running) < final < len(seen) - 1, seen
    assert seen[-1].startswith("done: 5 ok"), seen


def test_the_render_process_follows_a_run_directory_renders_and_ends_with_its_stdin(
    tmp_path: Path,
) -> None:
    """Issue 40: the live sections are rendered in ``python -m workbench.ui.render`` (no
    interpreter lock shared with the kernel's loop); it reads the run's records itself,
    answers with display_data outputs, says what it could not do, and exits with status 0
    when its stdin ends (the kernel gone)."""
    from workbench.executors.virtual import simulate
    from workbench.ui.render import RenderError, RenderProcess

    result = simulate(config_from_params(notebook_params(out_dir=str(tmp_path),
                                                         max_items=3)))
    run_dir = str(result.run_dir)
    proc = RenderProcess()
    try:
        assert proc.call("warm_up") >= 0
        assert proc.call("render", run_dir, "plot", "cdf", {}, "") == ((), 0.0)  # none read
        assert proc.call("follow", run_dir, result.run_id, 200_000) == (8, 8)
        assert proc.call("follow", run_dir, result.run_id, 200_000) == (0, 8)  # each once
        entries, cpu = proc.call("render", run_dir, "plot", "cdf", {}, "live: 8 of 8")
        assert entries[0]["data"]["text/plain"] == "live: 8 of 8" and cpu > 0
        assert "image/png" in entries[1]["data"]
        (table,), _ = proc.call("render", run_dir, "table", "latency", {}, "")
        assert "TTFT (ms)" in table["data"]["text/html"]
        with pytest.raises(RenderError, match="KeyError"):
            proc.call("no such call")
        assert proc.alive()  # a failed call leaves it running
    finally:
        proc.close()
    assert proc.proc.returncode == 0
