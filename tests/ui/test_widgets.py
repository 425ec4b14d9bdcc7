"""The run panel: controls ↔ RunConfig, Run on the running loop, Stop keeps finished records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from workbench.config import RunConfig, available
from workbench.data import path as data_path
from workbench.ui.widgets import POLICY_DEFAULT, panel, what_if

DEMO = "tracelab/multi_session_example.csv"


def notebook_params(**over: Any) -> dict[str, Any]:
    """The replay notebook's parameters cell (defaults), with overrides."""
    params: dict[str, Any] = {
        "trace_path": "", "bundled_trace": DEMO, "trace_format": "auto", "max_items": 3,
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
                  "format": p["trace_format"], "max_items": p["max_items"]},
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
    c.trace.value = "request-factory/session_rounds_v2_example.csv"  # a bundled name
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
    c = panel().controls
    names = available()
    assert list(c.backend.options) == names["backends"]
    assert list(c.arrival.options) == names["arrival_modes"]
    assert list(c.policy.options) == [POLICY_DEFAULT, *names["context_policies"]]
    assert list(c.format.options) == names["trace_formats"]


def test_click_outside_a_loop_explains_itself() -> None:
    p = panel()
    p.run_button.click()
    assert p.task is None and "no running event loop" in p.status.value


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
    assert headline.startswith("5/5 ok · TTFT p50/p90/p99 ")
    assert "ttft_ms" in p.output.outputs[1]["data"]["text/html"]
    assert "image/png" in p.output.outputs[3]["data"]
    assert p.status.value.startswith("done: 5 ok")
    assert not p.run_button.disabled and p.stop_button.disabled
    assert Path(result.run_dir or "").parent == tmp_path


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
        result = await p.task
    assert result is not None and result.cancelled
    statuses = [r.status for r in result.records]
    assert statuses.count("ok") >= 1
    assert statuses.count("ok") < 8  # stopped before the whole trace ran
    assert p.status.value.startswith("stopped:")
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
    p.run_button.click()
    assert p.task is not None
    async with asyncio.timeout(10):
        assert await p.task is None
    assert p.status.value.startswith("config error: target 'url' needs a server URL")
    assert not p.run_button.disabled


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
    cfg = config_from_params(notebook_params(out_dir=str(tmp_path), max_items=2,
                                             engine={"speedup": 2.0}))
    p = panel(cfg)
    view = report_view(p)
    latency, figure = view.table("latency"), view.plot("cdf")
    live = asyncio.Event()
    refresh = view.refresh

    def spy(report: Any, note: str = "") -> None:
        refresh(report, note)
        if note.startswith("live:"):
            live.set()

    view.refresh = spy  # type: ignore[method-assign]
    p.run_button.click()
    async with asyncio.timeout(120):
        await live.wait()  # drawn from the records on disk while the run went on
        assert p.running
        assert "live:" in latency.outputs[0]["data"]["text/plain"]
        result = await p.task  # type: ignore[misc]
    assert result is not None and p.latest is result
    assert "ttft_ms" in latency.outputs[0]["data"]["text/html"]  # the final run, no note
    assert "image/png" in figure.outputs[0]["data"]
    later = report_view(p).table("errors")  # a section made after the run shows it at once
    assert "none (all 5 requests ended ok)" in later.outputs[0]["data"]["text/html"]


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
