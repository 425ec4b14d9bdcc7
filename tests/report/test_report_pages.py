"""The rendered reports answer at a glance: replay, compare and sweep reports and the
index, as a reader gets them (HTML files), and as headless Chromium draws them.

Each report opens with its headline (within the first ``FIRST_SCREEN`` characters of
the body's text), has a ``<title>`` naming the run, loads no script (nothing from a
CDN) and carries none of the notebook's JupyterLab instructions.
"""

from __future__ import annotations

import html as html_mod
import json
import re
import subprocess
from pathlib import Path

import pytest

from workbench.report.render import render_report

pytestmark = pytest.mark.slow
FIRST_SCREEN = 700  # characters of body text before the headline must have started
INSTRUCTIONS = ("press Run", "Press Run", "JupyterLab", "interactive = True", "Run All")
KINDS = ("replay", "compare", "sweep", "plan")


def body_text(page: str) -> str:
    body = page[page.index("<body"):]
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", body, flags=re.S)
    return " ".join(html_mod.unescape(re.sub(r"<[^>]+>", " ", body)).split())


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder with a replay, a compare, a sweep and a plan report (and so an index of
    four)."""
    out = tmp_path_factory.mktemp("report-pages")
    render_report("replay", {"max_items": 2, "engine": {"speedup": 50.0},
                             "run_id": "replay"}, out)
    render_report("compare", {"n_boot": 200, "run_id": "compare"}, out)
    # a capacity search probes out of order (1, 8, 4.5, ...); the default engine cannot
    # deliver the Mooncake slice's offered rate, so the headline warns
    render_report("sweep", {"out_dir": str(out / "sweeps"), "values": [1, 8],
                            "capacity_tolerance": 1.0, "slo": {"ttft_ms:p90": 5000},
                            "sweep_id": "cap", "max_items": 40, "run_id": "sweep"}, out)
    render_report("plan", {"max_items": 20, "scales": [1.0], "run_id": "plan",
                           "out_dir": str(out / "plans")}, out)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_report_opens_with_its_headline_and_loads_nothing(reports: Path, kind: str) -> None:
    page = (reports / kind / "report.html").read_text()
    meta = json.loads((reports / kind / "report.json").read_text())
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title and html_mod.unescape(title.group(1)) == f"{meta['title']}: {kind}"
    assert "<script" not in page  # no require.js, MathJax, mermaid or widget manager
    text = body_text(page)
    assert not [s for s in INSTRUCTIONS if s in text], text[:2000]
    assert meta["headline"], "no headline displayed"
    first = meta["headline"][0]
    at = text.find(first)
    assert 0 <= at < FIRST_SCREEN, (at, text[:FIRST_SCREEN])
    assert '<div class="wb-headline" ' in page


def test_each_kinds_headline_says_what_it_should(reports: Path) -> None:
    heads = {k: json.loads((reports / k / "report.json").read_text())["headline"]
             for k in KINDS}
    summary = json.loads((reports / "replay" / "summary.json").read_text())
    assert heads["replay"][0].startswith(f"{summary['ok']}/{summary['requests']} ok · TTFT ")
    assert heads["replay"][0].endswith(
        "· simulated engine, 50× real time, default step times, not a GPU's")
    differs, base, other = heads["compare"][:3]
    assert differs == "What differs: target.engine.num_blocks (8192 → 65536)"  # the knob first
    assert base.startswith("KV cache 8192 blocks (baseline): ")
    assert "virtual time (simulated engine, default step times, not a GPU's)" in base
    assert other.startswith("KV cache 65536 blocks: ")
    # the example's 48 sessions of several rounds, replayed by both runs: resampled by
    # session, paired, said so
    assert heads["compare"][3].startswith("  KV cache 65536 blocks vs KV cache 8192 blocks "
                                          "(intervals by session, paired): TTFT p50 ")
    assert "significant" in heads["compare"][3]
    sweep = heads["sweep"][0]
    assert sweep.startswith("cap: ") and "At TTFT p90 ≤ 5 s: " in sweep
    # one capacity: what the engine sustained, the offered load beside it (docs/sweeps.md)
    assert re.search(r": capacity [0-9.]+ req/s sustained, at [0-9.]+ req/s offered: the "
                     r"highest load that held \(found by search\); it broke at [0-9.]+ req/s\.$",
                     sweep), sweep
    assert heads["sweep"][1].startswith("WARNING: the engine delivered ")  # a line of its own


def test_the_index_lists_every_report_with_its_headline(reports: Path) -> None:
    index = (reports / "index.html").read_text()
    text = body_text(index)
    for kind in KINDS:
        assert f'href="{kind}/report.html"' in index
        first = json.loads((reports / kind / "report.json").read_text())["headline"][0]
        assert first in text
    assert "<script" not in index and "<title>workbench reports</title>" in index


@pytest.mark.browser
def test_screenshots_of_each_report_kind(reports: Path) -> None:
    """Headless Chromium draws the first screen of each report and the index into
    ``<reports>/screenshots/`` (the test's output folder, printed)."""
    import os
    import shutil

    chromium = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
    if not shutil.which(chromium):
        if os.environ.get("CI"):
            pytest.fail(f"{chromium} missing")
        pytest.skip(f"{chromium} missing")
    shots = reports / "screenshots"
    shots.mkdir(exist_ok=True)
    pages = {kind: reports / kind / "report.html" for kind in KINDS}
    pages["index"] = reports / "index.html"
    for name, page in pages.items():
        png = shots / f"{name}.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1280,900",
                        f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 20_000, (name, len(data))
    print(f"screenshots: {shots}")
