"""``workbench demo``: the README's main job, end to end on a laptop: a bundled trace
replayed against the embedded engine, then its report (``MOONCAKE_EXAMPLE``,
``WEKA_EXAMPLE``: the README's other examples)."""

from __future__ import annotations

import argparse
import sys

from workbench.commands._axes import json_items
from workbench.commands._flags import value_flag
from workbench.commands._run_end import run_exit_status
from workbench.commands.replay import replay_with_progress
from workbench.commands.report import print_report
from workbench.config import RunConfig

NAME = "demo"
HELP = "replay the bundled real trace against the embedded engine and render the report"

DEMO_TRACE = "tracelab/multi_session_large.csv"
MOONCAKE_EXAMPLE = ("--trace", "mooncake/conversation_trace_head600.jsonl",
                    "--max-items", "120", "--rate", "1")
#: two captured Claude Code conversations with 6 sub-agents, think times capped at 1 s, on
#: an engine 10x faster than its cost model (308 s of engine time: long outputs decode)
WEKA_EXAMPLE = ("--trace", "weka/cc_traces_sample.jsonl", "--max-items", "2",
                "--trace-option", "max_delay_s=1", "--speedup", "10")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", default="reports", help="reports folder (default: reports)")
    p.add_argument("--trace", default=DEMO_TRACE, help=f"bundled trace name or a path "
                   f"(default {DEMO_TRACE})")
    value_flag(p, "--max-items", type=int, help="replay only the first N units")
    value_flag(p, "--rate", type=float, help="rescale arrivals to R units/s")
    value_flag(p, "--tool-wait-scale", type=float, default=1.0,
               help="multiply every tool wait (think time)")
    p.add_argument("--trace-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a reader option, e.g. max_delay_s=1 for the weka sample "
                        "(docs/weka-traces.md)")
    value_flag(p, "--speedup", type=float,
               help="run the embedded engine N times faster than its cost model (the "
               "report says so); default 1")
    p.add_argument("--run-id", default="demo", help="report folder name (default demo)")
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from workbench.report.render import render_report
    from workbench.workloads.standard import bundled_or_path

    cfg = RunConfig.from_dict({
        "trace": {"path": str(bundled_or_path(args.trace)), "max_items": args.max_items,
                  "options": json_items(args.trace_option, "--trace-option")},
        "arrival": {"mode": "trace-timed", "rate": args.rate,
                    "tool_wait_scale": args.tool_wait_scale},
        "backend": "openai",
        "target": {"url": "sim", **({} if args.speedup is None else
                                     {"engine": {"speedup": args.speedup}})},
        "out_dir": args.out,
        "run_id": args.run_id,
        "overwrite": True,  # the demo's folder is its own: each demo replaces the last
    })
    print(f"replaying {args.trace} against the embedded engine (its own process)…", file=sys.stderr)
    result = replay_with_progress(cfg, progress=not args.no_progress)
    print(f"rendering the report of {result.run_dir}…", file=sys.stderr)
    params = {"run_dir": str(result.run_dir), "run_id": args.run_id, "out_dir": args.out}
    html = render_report("replay", params, args.out, show_code=args.show_code,
                         progress=not args.no_progress)
    print_report(html)  # its headline says how a run that is not whole ended
    # the rule of every command that makes a run; the demo has no --max-error-rate
    return run_exit_status(result.manifest.status, cancelled=result.cancelled)
