"""The panel's release lag beside the CLI's, same config, measured side by side (issue 22).

The config is the one of issue 22: the bundled TraceLab trace
(``tracelab/multi_session_large.csv``: 48 sessions, 303 requests), 4 sessions at
once, ``vllm-tokens``, the embedded engine at 20× real time. Each round runs it

- **cli**: ``python -m workbench replay --config CFG -o DIR`` in a process of its own,
  exactly as a user types it;
- **panel**: ``wb.panel(cfg)`` driven from a running event loop in this process, as a
  kernel drives it (the Run button's handler, the panel's poll task on this loop), with
  every report section of the replay notebook following it (``report_view(panel)``:
  10 tables, 8 figures) redrawn with ``LIVE_MIN_S = 0``, ``LIVE_DUTY = 1`` and
  ``LIVE_SECTIONS_S`` unbounded (every section at every redraw, the next one after the
  shortest rest: far more often than the panel's defaults), plus the panel's own three
  live figures, all rendered in the panel's render process (``workbench.ui.render``);

alternately, ``--rounds`` times, and prints each run's release lag (p50, p99, max, ms)
from its ``summary.json["client"]`` and how many times the sections were redrawn while
the panel's run went on. Usage: ``python bench/bench_panel.py --rounds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TRACE = "tracelab/multi_session_large.csv"
PLOTS = ("cdf", "over_time", "ttft_vs_uncached", "prefix_hits", "hit_by_round",
         "ttft_by_round", "sessions", "timeline")


def config(out_dir: Path) -> dict[str, Any]:
    from workbench import data

    return {"trace": {"path": str(data.path(TRACE))}, "arrival": {"max_concurrency": 4},
            "backend": "vllm-tokens", "target": {"url": "sim", "engine": {"speedup": 20.0}},
            "out_dir": str(out_dir)}


def lag_of(run_dir: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    lag = summary["client"]["release_lag_ms"]
    return {"ok": summary["ok"], "p50": lag["p50"], "p99": lag["p99"], "max": lag["max"]}


def cli_run(out_dir: Path) -> dict[str, Any]:
    cfg_file = out_dir / "cfg.json"
    cfg = config(out_dir)
    cfg_file.write_text(json.dumps({k: v for k, v in cfg.items() if k != "out_dir"}))
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "replay", "--config", str(cfg_file),
         "-o", str(out_dir), "--run-id", "cli", "--no-progress"],
        capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"workbench replay failed: {done.stderr[-2000:]}")
    return lag_of(out_dir / "cli")


async def panel_run(out_dir: Path) -> dict[str, Any]:
    import workbench.ui.widgets as widgets
    from workbench.config import RunConfig
    from workbench.report.sections import TABLE_NAMES
    from workbench.ui.live import report_view

    widgets.LIVE_MIN_S, widgets.LIVE_DUTY = 0.0, 1.0  # type: ignore[misc]
    widgets.LIVE_SECTIONS_S = 1e9  # type: ignore[misc]  # every section, every redraw
    cfg = RunConfig.from_dict({**config(out_dir), "run_id": "panel"})
    p = widgets.panel(cfg)
    view = report_view(p)
    for name in TABLE_NAMES:
        view.table(name)
    for kind in PLOTS:
        view.plot(kind)
    p.run_button.click()
    assert p.task is not None
    result = await asyncio.wait_for(p.task, 600)
    if result is None:
        raise RuntimeError(f"the panel's run failed: {p.error}")
    return {**lag_of(out_dir / "panel"), "live_redraws": len(p.redraws)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-panel-") as tmp:
        for k in range(args.rounds):
            for kind in ("cli", "panel"):
                out = Path(tmp) / f"{kind}{k}"
                out.mkdir()
                row = cli_run(out) if kind == "cli" else asyncio.run(panel_run(out))
                rows.append({"round": k, "kind": kind, **row})
                print(json.dumps(rows[-1]), flush=True)
    for kind in ("cli", "panel"):
        p99 = sorted(r["p99"] for r in rows if r["kind"] == kind)
        print(f"{kind}: release lag p99 {', '.join(f'{x:.1f}' for x in p99)} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
