"""Virtual time costs per event, not per idle second (docs/virtual-time.md).

The README's first example trace (TraceLab's ``round_trace.sanitized.jsonl``: two
sessions 71.8 days apart) used to make ``simulate`` scrape an idle engine every
second of those 71.8 days: 6.2 M samples, 1.8 GB, 5 min. The CLI runs here under a
16 MB file-size limit and a 120 s timeout, so the old behaviour fails fast.
"""

import itertools
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from workbench.data import path as data_path
from workbench.report.plots import plot
from workbench.storage.rundir import load

LONG = str(data_path("tracelab/round_trace.sanitized.jsonl"))
REPO = Path(__file__).resolve().parents[2]


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))


def test_a_71_day_trace_simulates_with_a_timeline_of_kilobytes(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "--trace", LONG, "-o", str(tmp_path),
         "--run-id", "long"],
        capture_output=True, text=True, timeout=120, preexec_fn=_limit_files,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = tmp_path / "long"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["virtual_duration_s"] > 71 * 86400  # the whole span was replayed
    timeline = run_dir / "metrics_timeline.jsonl"
    rows = [json.loads(line) for line in timeline.read_text().splitlines()]
    assert timeline.stat().st_size < 100_000, timeline.stat().st_size
    assert 2 <= len(rows) < 1000, len(rows)
    # a sample is kept only when the engine's state changed (start and end kept)
    states = [{k: v for k, v in r.items() if k != "t_ns"} for r in rows]
    assert all(a != b for a, b in itertools.pairwise(states[1:-1]))
    # the busy engine was sampled: running requests show in both sessions' stretches
    busy = [r["t_ns"] for r in rows if r["vllm:num_requests_running"]]
    t0 = rows[0]["t_ns"]
    assert min(busy) - t0 < 86400e9 < max(busy) - t0

    result = load(run_dir)
    for kind in ("over_time", "timeline", "sessions"):
        fig = plot(result, kind)
        axes = [a for a in fig.axes if a.get_xlabel() or a.get_title()]
        assert all(a.get_xscale() == "function" for a in axes if a.lines or a.collections)
        texts = [t.get_text() for a in fig.axes for t in a.texts]
        assert "idle 71.8 d" in texts, (kind, texts)
