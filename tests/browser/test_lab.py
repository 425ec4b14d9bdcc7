"""The notebooks as a JupyterLab user meets them, in headless Chromium.

Each notebook is opened from a fresh copy, *Run All* is chosen from the Run
menu, and the test waits (on the DOM, with generous bounds) until every code
cell has an execution count. Then: no cell shows an error, the widgets render
as widgets (not as their text fallback), and in the replay notebook a click
on the panel's Run button replays against the embedded engine and shows the
result table, in the panel and in the report sections below it. A screenshot
of each page is kept under the test's ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]

RUN_ALL_S = 300_000  # ms: a cold kernel, a 2-core machine shared with other work
ERROR_MIME = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
ALL_EXECUTED = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""


def open_notebook(page: Any, lab: Any, name: str) -> None:
    page.goto(lab.notebook_url(name))
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", state="visible")
    # the kernel is up when the status bar says "Python 3 (ipykernel) | Idle"
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(
        timeout=RUN_ALL_S)


def run_all(page: Any) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(ALL_EXECUTED, timeout=RUN_ALL_S)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(
        timeout=RUN_ALL_S)


def errors(page: Any) -> list[str]:
    return [e.inner_text()[:2000] for e in page.query_selector_all(ERROR_MIME)]


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


@pytest.mark.parametrize("name", ["compare", "trace_explorer"])
def test_run_all_shows_no_error(page: Any, lab: Any, tmp_path: Path, name: str) -> None:
    open_notebook(page, lab, f"{name}.ipynb")
    run_all(page)
    shot(page, tmp_path, f"{name}-run-all")
    assert errors(page) == []
    assert page.locator(".jp-OutputArea-output table.wb-table").count() >= 3
    assert page.locator(".jp-OutputArea-output img").count() >= 3
    if name == "trace_explorer":  # the what-if sliders render as widgets
        assert page.locator(".jupyter-widgets .widget-slider, .jupyter-widgets "
                            ".slider-container").count() >= 1
        assert page.get_by_text("WhatIf(").count() == 0


def test_replay_panel_runs_from_the_browser(page: Any, lab: Any, tmp_path: Path) -> None:
    open_notebook(page, lab, "replay.ipynb")
    run_all(page)
    run = page.locator("button.jupyter-button", has_text="Run")
    run.scroll_into_view_if_needed()
    shot(page, tmp_path, "replay-run-all")
    assert errors(page) == []
    assert run.count() == 1 and run.is_enabled()  # the panel, rendered as widgets
    assert page.get_by_text("Press Run in the panel above").count() >= 5
    run.click()
    status = page.locator(".widget-label", has_text="done:")
    status.wait_for(timeout=RUN_ALL_S)
    # the panel's own output and the sections below show the run's tables
    page.wait_for_function(
        "() => document.querySelectorAll('.widget-output table.wb-table')"
        ".length >= 5", timeout=RUN_ALL_S)
    run.scroll_into_view_if_needed()
    shot(page, tmp_path, "replay-after-run")
    assert "0 errors" in status.inner_text()
    assert page.get_by_text("Press Run in the panel above").count() == 0
    assert errors(page) == []
