"""The notebooks as a JupyterLab user meets them, in headless Chromium.

Each notebook is opened from a fresh copy, *Run All* is chosen from the Run
menu, and the test waits (on the DOM, with generous bounds) until every code
cell has an execution count; then *Run All* again in the same kernel, until
every cell has a newer count. Neither leaves an error output. The replay
panel is driven as a person drives it: a session trace picked, Run, the
status line and a live figure followed while the run goes, Stop, "stopping…"
and the cancelled result. A screenshot of each page is kept under the test's
``tmp_path``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

RUN_ALL_S = 300_000  # ms: a cold kernel, a 2-core machine shared with other work
LIVE_S = 120_000  # ms: the panel's run starts its engine and shows its first records
ERROR_MIME = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
EXECUTED_AFTER = """(after) => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every(p => {
    const m = /\\[(\\d+)\\]/.exec(p.textContent);
    return m !== null && Number(m[1]) > after;
  });
}"""
LAST_COUNT = """() => Math.max(0, ...[...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
  .map(p => Number((/\\[(\\d+)\\]/.exec(p.textContent) || [0, 0])[1])))"""
# every text the panel's status line shows, in order (a change observer: no polling)
WATCH_STATUS = """() => {
  window.wbStatuses = [];
  const el = document.querySelector('.wb-status');
  const note = () => {
    const t = el.innerText.trim();
    if (window.wbStatuses[window.wbStatuses.length - 1] !== t) window.wbStatuses.push(t);
  };
  note();
  new MutationObserver(note).observe(el, {subtree: true, childList: true,
                                          characterData: true});
}"""
RUNNING = r"running (\d+)/(\d+)"


def open_notebook(page: Any, lab: Any, name: str) -> None:
    page.goto(lab.notebook_url(name))
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", state="visible")
    # the kernel is up when the status bar says "Python 3 (ipykernel) | Idle"
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(
        timeout=RUN_ALL_S)


def run_all(page: Any) -> None:
    """Run All, then wait until every code cell ran (again) and the kernel is idle."""
    after = page.evaluate(LAST_COUNT)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(EXECUTED_AFTER, arg=after, timeout=RUN_ALL_S)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for(
        timeout=RUN_ALL_S)


def errors(page: Any) -> list[str]:
    return [e.inner_text()[:2000] for e in page.query_selector_all(ERROR_MIME)]


def shot(page: Any, tmp_path: Path, name: str, full: bool = True) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    assert path.stat().st_size > 10_000
    return path


def top(page: Any) -> None:
    """Scroll the notebook back to its first cell (what a person sees first)."""
    page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()


EXPECT = {  # what each notebook shows after Run All: tables, images at least
    "replay": (0, 0), "compare": (3, 3), "trace_explorer": (3, 3), "sweep": (3, 3),
    "parity": (5, 0),  # no campaign given: the bundled example, run in the kernel
}


@pytest.mark.parametrize("name", ["replay", "compare", "trace_explorer", "sweep", "parity"])
def test_run_all_twice_in_one_kernel_shows_no_error(
    page: Any, lab: Any, tmp_path: Path, name: str
) -> None:
    open_notebook(page, lab, f"{name}.ipynb")
    run_all(page)
    assert errors(page) == []
    tables, images = EXPECT[name]
    assert page.locator(".jp-OutputArea-output table.wb-table").count() >= tables
    assert page.locator(".jp-OutputArea-output img").count() >= images
    top(page)
    shot(page, tmp_path, f"{name}-first-screen", full=False)
    shot(page, tmp_path, f"{name}-run-all")
    if name == "trace_explorer":  # the what-if sliders render as widgets
        assert page.locator(".jupyter-widgets .widget-slider, .jupyter-widgets "
                            ".slider-container").count() >= 1
        assert page.get_by_text("WhatIf(").count() == 0
    if name == "replay":  # the panel, rendered as widgets, and sections waiting for it
        assert page.locator("button.jupyter-button", has_text="Run").count() == 1
        assert page.get_by_text("Press Run in the panel above").count() >= 5
    run_all(page)  # the same kernel again: every cell runs to the end once more
    shot(page, tmp_path, f"{name}-run-all-again")
    assert errors(page) == []


def field(page: Any, kind: str, label: str) -> Any:
    """The input of the panel's widget of ``kind`` whose description is ``label``."""
    box = page.locator(f".widget-{kind}").filter(
        has=page.locator("label", has_text=re.compile(f"^{re.escape(label)}$")))
    return box.locator("select, input").first


def test_replay_panel_runs_from_the_browser(page: Any, lab: Any, tmp_path: Path) -> None:
    open_notebook(page, lab, "replay.ipynb")
    run_all(page)
    run = page.locator("button.jupyter-button", has_text="Run")
    run.scroll_into_view_if_needed()
    assert errors(page) == []
    run.click()
    status = page.locator(".wb-status", has_text="done:")
    status.wait_for(timeout=RUN_ALL_S)
    # the panel's own output and the sections below show the run's tables
    page.wait_for_function(
        "() => document.querySelectorAll('.widget-output table.wb-table')"
        ".length >= 5", timeout=RUN_ALL_S)
    run.scroll_into_view_if_needed()
    shot(page, tmp_path, "replay-after-run")
    assert "0 errors" in status.inner_text()
    assert page.get_by_text("Press Run in the panel above").count() == 0
    # the outcome is said first, the final figures follow (CDFs, over time, the swimlane)
    page.wait_for_function("() => document.querySelectorAll('.wb-live img').length >= 3",
                           timeout=RUN_ALL_S)
    assert page.locator(".wb-live img").count() == 3
    assert errors(page) == []


def test_replay_panel_goes_live_on_a_session_trace_and_stops(
    page: Any, lab: Any, tmp_path: Path
) -> None:
    open_notebook(page, lab, "replay.ipynb")
    run_all(page)
    # the bundled TraceLab session trace (303 requests, 48 sessions), all of it, slowed down
    # (JupyterLab lays out only the cells in view: scroll to the panel first)
    field(page, "dropdown", "trace").evaluate("e => e.scrollIntoView({block: 'center'})")
    field(page, "dropdown", "trace").select_option("tracelab/multi_session_large.csv")
    units = field(page, "text", "units (0 = all)")
    units.fill("0")
    units.press("Enter")
    speed = field(page, "text", "sim speed-up ×")
    speed.fill("2")
    speed.press("Enter")
    run = page.locator("button.jupyter-button", has_text="Run")
    page.wait_for_function("() => document.querySelector('.wb-check').innerText.trim() === ''")
    run.scroll_into_view_if_needed()
    page.evaluate(WATCH_STATUS)
    run.click()
    status = page.locator(".wb-status")
    # the status line advances: running n/303, then a larger n
    page.wait_for_function(
        "() => /running [1-9]\\d*\\/303/.test(document.querySelector('.wb-status').innerText)",
        timeout=LIVE_S)
    first = int(re.search(RUNNING, status.inner_text()).group(1))  # type: ignore[union-attr]
    page.wait_for_function(
        """(n) => { const m = /running (\\d+)\\/303/.exec(
                      document.querySelector('.wb-status').innerText);
                    return m !== null && Number(m[1]) > n; }""",
        arg=first, timeout=LIVE_S)
    # a live figure with data (an image, not a sentence) while the run goes
    page.locator(".wb-live img").first.wait_for(timeout=LIVE_S)
    assert "running" in status.inner_text()
    page.locator(".wb-live").scroll_into_view_if_needed()
    shot(page, tmp_path, "replay-panel-live")
    stop = page.locator("button.jupyter-button", has_text="Stop")
    stop.click()
    page.wait_for_function("() => window.wbStatuses.includes('stopping…')", timeout=10_000)
    assert stop.is_disabled()
    # the cancelled result within seconds of Stop
    page.locator(".wb-status", has_text="cancelled:").wait_for(timeout=15_000)
    seen = page.evaluate("() => window.wbStatuses")
    assert seen[0] == "ready" or seen[0].startswith("done")
    assert any(s.startswith("starting engine") for s in seen), seen
    assert seen.index("stopping…") < len(seen) - 1 and seen[-1].startswith("cancelled:")
    assert "(303 planned)" in seen[-1]
    shot(page, tmp_path, "replay-panel-cancelled")
    assert errors(page) == []
