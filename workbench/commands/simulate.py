"""``workbench simulate``: the same replay through the embedded engine in virtual time."""

from __future__ import annotations

import argparse

from workbench.commands._axes import add_axis_arguments, config_from_args, json_items
from workbench.commands._flags import GivenItems
from workbench.commands.replay import add_json_flag, finish, headline_if_stopped

NAME = "simulate"
HELP = "replay a trace through the embedded engine in virtual time (no sockets, no waiting)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_axis_arguments(p)
    p.add_argument("--engine", action=GivenItems, field="target.engine", keyed=True, default=[],
                   metavar="KEY=VALUE",
                   help="engine knob, e.g. --engine num_blocks=4096 (repeatable)")
    p.add_argument("--engine-config", default=None, metavar="FILE",
                   help="engine knobs from a JSON/YAML file (e.g. from `sim calibrate`); "
                        "--engine overrides it")
    p.add_argument("--digest", action="store_true", help="print the canonical report digest")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    from workbench.executors.virtual import simulate

    cfg = config_from_args(args)
    knobs = dict(cfg.target.engine)
    if args.engine_config:
        from workbench.config.engine_file import read_engine_file

        knobs.update(read_engine_file(args.engine_config))
    knobs.update(json_items(args.engine, "--engine"))
    # the knobs go into the config, so the manifest's config says which engine ran (and
    # they are type- and range-checked like --config)
    cfg = cfg.replace(**{"target.engine": knobs})
    with headline_if_stopped(cfg, args) as told:
        result = simulate(cfg, on_cancelled=told, max_error_rate=args.max_error_rate)
    if args.digest:  # no replay follows: the run's hash memo goes before the digest reads
        # the records back; its plan's cycles are left to the collector (a full collection
        # here cost more CPU than its memory was worth: docs/virtual-time.md, "The digest
        # streamed")
        from workbench.replay.rounds import drop_hash_memos

        drop_hash_memos()
    return finish(result, cfg, args, digest=args.digest)
