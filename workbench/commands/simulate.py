"""``workbench simulate``: the same replay through the embedded engine in virtual time."""

from __future__ import annotations

import argparse
import json

from workbench.commands._axes import add_axis_arguments, config_from_args, exit_status
from workbench.commands.replay import _brief

NAME = "simulate"
HELP = "replay a trace through the embedded engine in virtual time (no sockets, no waiting)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_axis_arguments(p)
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine knob, e.g. --engine num_blocks=4096 (repeatable)")
    p.add_argument("--digest", action="store_true", help="print the canonical report digest")


def run(args: argparse.Namespace) -> int:
    from workbench.metrics import summarize
    from workbench.virtual import canonical_report, report_digest, simulate

    cfg = config_from_args(args)
    knobs = dict(cfg.target.engine)
    for item in args.engine:
        key, _, value = item.partition("=")
        knobs[key] = json.loads(value) if value[:1].isdigit() or value in ("true", "false") \
            else value
    cfg = cfg.replace(**{"target.engine": knobs})  # type- and range-checked like --config
    result = simulate(cfg)
    summary = summarize(result, cfg.slo)
    print(json.dumps(_brief(summary), indent=2))
    if args.digest:
        print("digest:", report_digest(canonical_report(result, cfg.slo)))
    if result.run_dir:
        print(f"run directory: {result.run_dir}")
    return exit_status(summary, result.cancelled, args.max_error_rate)
