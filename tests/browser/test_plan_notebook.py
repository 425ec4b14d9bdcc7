"""plan.ipynb as a JupyterLab user meets it, in headless Chromium (docs/plan.md).

The notebook is opened from a fresh copy with its own parameters (a new plan of the
bundled Mooncake slice on two presets, virtual time), *Run All* is chosen from the Run
menu, and the test waits on the DOM until every code cell ran. Then: no error output,
the answer sentence as the headline (the answer first, then the preset's stated error), the
tables, the curve as an image, and the closing note quoting the same sentence. A
screenshot of the page is kept under the test's ``tmp_path``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.test_lab import errors, open_notebook, run_all, shot, top

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_plan_notebook_runs_all_and_shows_its_answer(page: Any, lab: Any,
                                                      tmp_path: Path) -> None:
    open_notebook(page, lab, "plan.ipynb")
    run_all(page)
    assert errors(page) == []
    headline = page.locator(".wb-headline").first
    answer = headline.locator("p").first.inner_text()
    # the answer first (replicas of an option, their GPUs), the stated error after it
    assert re.match(r"\d+(–\d+)? replicas? of llama-3\.1-8b/h[12]00/tp1 · prefix-aware "
                    r"\(\d+(–\d+)? GPUs?", answer), answer
    assert "TTFT p90 ≤ 2 s" in answer, answer
    assert "llama-3.1-8b/h100/tp1" in answer and "llama-3.1-8b/h200/tp1" in answer
    # each preset states its own GPU and TP's error (two presets may state two)
    assert answer.index("Simulated; ") > answer.index("TTFT p90 ≤ 2 s"), answer
    assert "preset error on published tables, median abs held out / fitted: ITL " in answer
    # the first screen: the title, then the answer, before the explanation below it
    page_text = page.locator("body").inner_text()
    assert page_text.index(answer) < page_text.index("Above, the answer")
    assert page.locator(".jp-OutputArea-output table.wb-table").count() >= 3
    assert page.locator(".jp-OutputArea-output img").count() >= 1  # the curve
    note = page.locator(".wb-closing-note").first.inner_text()
    assert note == f"In one sentence: {answer}"
    top(page)
    shot(page, tmp_path, "plan-first-screen", full=False)
    shot(page, tmp_path, "plan-run-all")
