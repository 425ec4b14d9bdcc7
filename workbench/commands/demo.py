"""``workbench demo``: the README's main job, end to end on a laptop.

Starts the embedded engine, replays a bundled public agent trace against it
(TraceLab's 48-session example: 303 rounds with prefix reuse and tool waits,
trace-timed), and renders the replay report (``reports/<run_id>/report.html``,
indexed in ``reports/index.html``). ``--trace`` picks another bundled trace
(e.g. ``mooncake/conversation_trace_head600.jsonl`` with ``--rate 2``) or a path.
"""

from __future__ import annotations

import argparse

NAME = "demo"
HELP = "replay the bundled real trace against the embedded engine and render the report"

DEMO_TRACE = "tracelab/multi_session_large.csv"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", default="reports", help="reports folder (default: reports)")
    p.add_argument("--trace", default=DEMO_TRACE, help=f"bundled trace name or a path "
                   f"(default {DEMO_TRACE})")
    p.add_argument("--max-items", type=int, default=None, help="replay only the first N units")
    p.add_argument("--rate", type=float, default=None, help="rescale arrivals to R units/s")
    p.add_argument("--run-id", default="demo", help="report folder name (default demo)")
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from workbench.report.render import render_report

    trace = {"trace_path": args.trace} if Path(args.trace).is_file() else {
        "bundled_trace": args.trace}
    params = {
        **trace,
        "max_items": args.max_items,
        "arrival": "trace-timed",
        "rate": args.rate,
        "backend": "openai",
        "target": "sim",
        "engine": {},
        "out_dir": args.out,
        "run_id": args.run_id,
    }
    html = render_report("replay", params, args.out, show_code=args.show_code)
    print(f"report: {html}")
    print(f"index:  {html.parent.parent / 'index.html'}")
    return 0
