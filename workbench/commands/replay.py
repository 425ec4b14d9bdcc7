"""``workbench replay``: replay a trace against a URL or the embedded engine."""

from __future__ import annotations

import argparse
import json
import sys

from workbench.commands._axes import add_axis_arguments, config_from_args, exit_status

NAME = "replay"
HELP = "replay a trace against a serving endpoint (--target URL) or the embedded engine"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_axis_arguments(p)
    p.add_argument("--target", help="server root URL, or 'sim' for the embedded engine")
    p.add_argument("--dry-run", action="store_true", help="print the plan; send nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from workbench.metrics import summarize
    from workbench.replay import run as run_replay

    extra = {"target.url": args.target} if args.target else {}
    cfg = config_from_args(args, extra)
    if args.dry_run:
        cfg = cfg.replace(dry_run=True)
    bar = None if args.no_progress or cfg.dry_run else tqdm(unit="req", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        result = run_replay(cfg, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if cfg.dry_run:
        print(json.dumps(result.manifest["plan"], indent=2))
        return 0
    summary = summarize(result, cfg.slo)
    print(json.dumps(_brief(summary), indent=2))
    if result.run_dir:
        print(f"run directory: {result.run_dir}")
    return exit_status(summary, result.cancelled, args.max_error_rate)


def _brief(summary: dict) -> dict:
    keys = ("requests", "ok", "errors", "ttft_ms", "tpot_ms", "e2e_ms",
            "actual_prefix_hit_rate", "planned_prefix_hit_rate", "request_throughput_rps")
    return {k: summary[k] for k in keys if k in summary}
