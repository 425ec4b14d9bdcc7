"""``workbench simulate``: the same replay through the embedded engine in virtual time."""

from __future__ import annotations

import argparse
import json

from workbench.commands._axes import add_axis_arguments, config_from_args
from workbench.commands.replay import _brief

NAME = "simulate"
HELP = "replay a trace through the embedded engine in virtual time (no sockets, no waiting)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_axis_arguments(p)
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine knob, e.g. --engine num_blocks=4096 (repeatable)")
    p.add_argument("--engine-config", default=None, metavar="FILE",
                   help="engine knobs from a JSON/YAML file (e.g. from `sim calibrate`); "
                        "--engine overrides it")
    p.add_argument("--digest", action="store_true", help="print the canonical report digest")


def run(args: argparse.Namespace) -> int:
    from workbench.metrics import summarize
    from workbench.virtual import canonical_report, report_digest, simulate

    cfg = config_from_args(args)
    knobs = dict(cfg.target.engine)
    if args.engine_config:
        from workbench.sim.calibrate import read_engine_file

        knobs.update(read_engine_file(args.engine_config))
    for item in args.engine:
        key, _, value = item.partition("=")
        try:  # numbers, booleans, objects ({"prefill": 2, "decode": 2}); else a string
            knobs[key] = json.loads(value)
        except ValueError:
            knobs[key] = value
    result = simulate(cfg, engine=knobs)
    print(json.dumps(_brief(summarize(result, cfg.slo)), indent=2))
    if args.digest:
        print("digest:", report_digest(canonical_report(result, cfg.slo)))
    if result.run_dir:
        print(f"run directory: {result.run_dir}")
    return 0
