"""How live the replay panel stays on a busy machine, in ms (issue 40): the gaps between the
status line's changes and between the live figures' new images while the run goes.

The scenario of ``tests/browser/test_panel_live.py`` run to its end: ``replay.ipynb`` in
JupyterLab and headless Chromium, Run All, the bundled TraceLab session trace (303
requests, 48 sessions) chosen whole at the notebook's own speed-up, Run pressed while a
CPU hog keeps one core busy (``--no-hog``: none). The page records every text of the
status line and every new image of the three live figures with ``performance.now()``
(the test's ``WATCH``); each round prints, from the first "running" to "finalizing…",
how long the traffic went, how many times the status line changed and its largest gap
(issue 40's bound: 1,000 ms), and the live figures' images and their largest gap (the
last one to the traffic's end), with the load average. The test checks the order of
these events; this script times them (our tests assert no wall time).

Needs JupyterLab, Playwright and ``/usr/bin/chromium`` (``pip install -e '.[browser]'``):
``PYTHONPATH=$PWD .venv/bin/python bench/bench_panel_live.py --rounds 3``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' browser helpers

from tests.browser.jupyter_lab import (
    chromium,
    missing_browser,
    missing_lab,
    new_page,
    running_lab,
)
from tests.browser.test_lab import RUN_ALL_S, open_notebook, run_all
from tests.browser.test_panel_live import HOG_S, WATCH, whole_trace


def gaps_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The round's figures from the page's events (``WATCH``), first "running" to
    "finalizing…"."""
    texts = [e.get("s") for e in events]
    first = next(k for k, s in enumerate(texts) if s and s.startswith("running"))
    end = texts.index("finalizing…")
    times = [e["t"] for e in events[first:end + 1] if "s" in e]
    figures = [e["t"] for e in events[first:end + 1] if "f" in e]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    shown = [*figures, times[-1]]  # a figure redrawn, ..., the traffic's end
    figure_gaps = [b - a for a, b in itertools.pairwise(shown)]
    return {"running_s": round((times[-1] - times[0]) / 1000, 1),
            "status_changes": len(gaps), "largest_gap_ms": round(max(gaps)),
            "figure_images": len(figures),
            "largest_figure_gap_ms": round(max(figure_gaps)) if figure_gaps else None,
            "final": texts[-1]}


def one_round(browser: Any, lab: Any, hog: bool) -> dict[str, Any]:
    with new_page(browser) as page:
        open_notebook(page, lab, "replay.ipynb")
        run_all(page)
        whole_trace(page)
        page.evaluate(WATCH)
        code = (f"import time\nend = time.monotonic() + {HOG_S}\n"
                "while time.monotonic() < end:\n    pass\n")
        proc = subprocess.Popen([sys.executable, "-c", code]) if hog else None
        try:
            page.locator("button.jupyter-button", has_text="Run").click()
            page.locator(".wb-status", has_text="done:").wait_for(timeout=RUN_ALL_S)
        finally:
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)
        out = gaps_of(page.evaluate("() => window.wbEvents"))
    out["load_1min"] = round(os.getloadavg()[0], 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-hog", action="store_true", help="no CPU hog beside the run")
    args = ap.parse_args()
    why = missing_lab() or missing_browser()
    if why:
        print(f"bench_panel_live: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-panel-live-") as tmp, \
            running_lab(Path(tmp)) as lab, chromium() as browser:
        for k in range(args.rounds):
            print(json.dumps({"round": k, **one_round(browser, lab, not args.no_hog)}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
