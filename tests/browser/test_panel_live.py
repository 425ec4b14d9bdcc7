"""The replay panel stays live on a busy machine (issue 40), in JupyterLab and headless
Chromium, judged by the order of what the page shows, never by the clock: the bundled
TraceLab session trace (303 requests, 48 sessions) run from the panel while another
process keeps a core busy (a bounded CPU hog, killed at the end). Every text the status
line shows and every new image of the live figures is recorded in the browser, in one
sequence, as it is shown (MutationObservers: no polling). While the run goes, the status
line goes through its states in order ("starting engine…", then "running n/303 · t s",
n never going back and t always forward, many of them), each of the three live figures
shows new images (redrawn while the run goes, not only at its end), and Stop, pressed
mid-run, is answered before the run's end: "stopping…", "finalizing…", then the
cancelled result, of fewer than 303 requests. A kernel whose loop the run or a redraw held
would show no intermediate state, or answer Stop only once the run had ended ("done: 303
ok"). How far apart the status line's changes are, in ms (issue 40's bound: 1 s), is
measured by ``bench/bench_panel_live.py`` (bench/README.md), not asserted here. Also:
"2.5" typed in "sessions at once" stays "2.5" and is refused with a message (never read
as 25).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_lab import (
    RUN_ALL_S,
    errors,
    field,
    open_notebook,
    run_all,
    shot,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

HOG_S = 600  # the hog's own bound, should the test be stopped before it kills it
TRACE = "tracelab/multi_session_large.csv"
REDRAWS = 2  # new images of each live figure while the run goes, before Stop
MIN_RUNNING = 10  # distinct "running …" states before Stop (a poll every 0.1 s shows ~10/s)
# every text the status line shows ({s}) and every image a live figure shows that it did not
# show before ({f: its index}), in the order the page showed them, with the time
# (performance.now(), ms: read by bench/bench_panel_live.py only)
WATCH = """() => {
  window.wbEvents = [];
  const push = (e) => { e.t = performance.now(); window.wbEvents.push(e); };
  const el = document.querySelector('.wb-status');
  let shown;
  const note = () => {
    const s = el.innerText.trim();
    if (s !== shown) { shown = s; push({s}); }
  };
  note();
  new MutationObserver(note).observe(el, {subtree: true, childList: true,
                                          characterData: true});
  const live = document.querySelector('.wb-live');
  const last = ['', '', ''];
  new MutationObserver(() => {
    [...live.querySelectorAll(':scope > .widget-output')].forEach((out, i) => {
      const img = out.querySelector('img');
      const src = img ? img.src : '';
      if (src && src !== last[i]) push({f: i});
      last[i] = src;
    });
  }).observe(live, {subtree: true, childList: true, attributes: true,
                    characterData: true});
}"""
# each live figure has shown ``n`` new images
REDRAWN = """(n) => [0, 1, 2].every(
  i => window.wbEvents.filter(e => e.f === i).length >= n)"""
# a state of a run going: "starting engine…" (first without the clock), "running… · 0.4 s",
# "running 12/303 · 3.1 s"
STATE = re.compile(r"^(?:starting engine…|running(?: (\d+)/(\d+)|…))(?: · ([\d.]+) s)?$")


@pytest.fixture
def cpu_hog() -> Iterator[subprocess.Popen[bytes]]:
    """A process that keeps one core busy (bounded by HOG_S), killed at the end."""
    code = (f"import time\nend = time.monotonic() + {HOG_S}\n"
            "while time.monotonic() < end:\n    pass\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def whole_trace(page: Any, speedup: str | None = None) -> None:
    """The panel set to run the whole TraceLab session trace (at ``speedup``, if given),
    its check cleared, the Run button in view."""
    field(page, "dropdown", "trace").evaluate("e => e.scrollIntoView({block: 'center'})")
    field(page, "dropdown", "trace").select_option(TRACE)
    fields = [("units (0 = all)", "0"), *([("sim speed-up ×", speedup)] if speedup else [])]
    for label, value in fields:
        box = field(page, "text", label)
        box.fill(value)
        box.press("Enter")
    page.wait_for_function("() => document.querySelector('.wb-check').innerText.trim() === ''")
    page.wait_for_function(
        "() => [...document.querySelectorAll('button.jupyter-button')]"
        ".some(b => b.innerText.trim() === 'Run' && !b.disabled)", timeout=30_000)
    page.locator("button.jupyter-button", has_text="Run").scroll_into_view_if_needed()


def test_the_status_line_goes_through_the_run_and_stop_is_answered_under_a_cpu_hog(
    page: Any, lab: Any, tmp_path: Path, cpu_hog: subprocess.Popen[bytes]
) -> None:
    open_notebook(page, lab, "replay.ipynb")
    run_all(page)
    whole_trace(page, speedup="1")  # real time (~5 min): Stop comes long before the end
    page.evaluate(WATCH)
    assert cpu_hog.poll() is None  # the hog is busy while the run goes
    page.locator("button.jupyter-button", has_text="Run").click()
    # each live figure redrawn while the run goes (waited for; a failure bound only)
    page.wait_for_function(REDRAWN, arg=REDRAWS, timeout=RUN_ALL_S)
    page.evaluate("() => window.wbEvents.push({stop: true})")  # where Stop was pressed
    page.locator("button.jupyter-button", has_text="Stop").click()
    page.locator(".wb-status", has_text="cancelled:").wait_for(timeout=RUN_ALL_S)
    assert cpu_hog.poll() is None
    page.locator(".wb-live").scroll_into_view_if_needed()
    shot(page, tmp_path, "replay-panel-under-load-stopped")
    events = page.evaluate("() => window.wbEvents")
    (tmp_path / "events.json").write_text(json.dumps(events))
    stop = next(k for k, e in enumerate(events) if e.get("stop"))
    before = [e["s"] for e in events[:stop] if "s" in e][1:]  # after the text before Run
    after = [e["s"] for e in events[stop:] if "s" in e]

    # before Stop: "starting engine…", then "running …", in order, the clock always forward
    states = [STATE.match(s) for s in before]
    assert before and all(states), before
    clocks = [float(m.group(3)) for m in states if m and m.group(3)]
    assert clocks == sorted(clocks), before
    assert before[0].startswith("starting engine"), before
    running = [m for m in states if m and m.group(0).startswith("running") and m.group(3)]
    counts = [int(m.group(1)) for m in running if m.group(1)]
    assert counts == sorted(counts), before
    assert len(running) >= MIN_RUNNING and len(set(counts)) >= 2, before
    assert before[-1].startswith("running") and counts[-1] < 303, before  # mid-run
    # the live figures were redrawn while the run went (not at its end), all three
    first_running = next(k for k, e in enumerate(events) if e.get("s", "").startswith("running"))
    for i in range(3):
        drawn = [k for k, e in enumerate(events[:stop]) if e.get("f") == i]
        assert len(drawn) >= REDRAWS and drawn[0] > first_running, (i, events[:stop])

    # Stop answered before the run's end: stopping…, finalizing…, the cancelled result
    assert "stopping…" in after and "finalizing…" in after, after
    assert after.index("stopping…") < after.index("finalizing…") < len(after) - 1, after
    assert all(STATE.match(s) for s in after[:after.index("stopping…")]), after
    end = re.match(r"cancelled: (\d+) ok, \d+ errors, \d+ cancelled of (\d+) requests "
                   r"\(303 planned\)", after[-1])
    assert end is not None and int(end.group(2)) < 303, after
    assert errors(page) == []


def test_a_non_integer_in_sessions_at_once_is_refused_in_the_browser(
    page: Any, lab: Any, tmp_path: Path
) -> None:
    open_notebook(page, lab, "replay.ipynb")
    run_all(page)
    sessions = field(page, "text", "sessions at once (0 = ∞)")
    sessions.evaluate("e => e.scrollIntoView({block: 'center'})")
    sessions.fill("")
    sessions.press_sequentially("2.5")
    sessions.press("Enter")
    # the check follows each keystroke ("'2.' is not a whole number" may come first):
    # wait for the one of the whole value typed
    check = page.locator(".wb-check", has_text="'2.5' is not a whole number")
    check.wait_for(timeout=30_000)
    assert "sessions at once (0 = ∞): '2.5' is not a whole number" in check.inner_text()
    assert sessions.input_value() == "2.5"  # as typed: never 25
    assert page.locator("button.jupyter-button", has_text="Run").is_disabled()
    shot(page, tmp_path, "replay-panel-refuses-2.5", full=False)
    sessions.fill("2")
    sessions.press("Enter")
    page.wait_for_function("() => document.querySelector('.wb-check').innerText.trim() === ''")
    # the button's state is a message of its own after the check's: waited for (CI read
    # it still disabled right after the check cleared)
    page.wait_for_function(
        "() => [...document.querySelectorAll('button.jupyter-button')]"
        ".some(b => b.innerText.trim() === 'Run' && !b.disabled)", timeout=30_000)
    assert not page.locator("button.jupyter-button", has_text="Run").is_disabled()
