"""``workbench tracegen``: materialize a raw or synthetic trace into the canonical format."""

from __future__ import annotations

import argparse
import dataclasses

from workbench.commands._flags import given_path, path_argument, value_flag
from workbench.context.policy import (
    DEFAULT_POLICY,
    MAJOR_COMPACTION_MIN_DROP_RATIO,
    MAJOR_COMPACTION_MIN_DROP_TOKENS,
    POLICIES,
)

NAME = "tracegen"
HELP = (
    "apply a context policy once and write a canonical session-execution-v2 CSV "
    "(plus OUT.manifest.json and OUT.plan.json)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from workbench.workloads.synthetic import SYNTHETIC_HELP

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        f"{HELP}.\n\nINPUT is a raw session CSV, a TraceLab round JSONL, any session trace "
        "workbench reads, or a synthetic description.\nSessions are ordered and capped "
        "first, then arrivals are drawn (so a capped trace keeps its rate), then\nthe trace "
        "is rebased so its first session arrives at 0.\n\n" + SYNTHETIC_HELP
    )
    path_argument(parser, "input", "INPUT", "trace path or synthetic:KEY=VALUE,...")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.csv", help="output CSV")
    parser.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        choices=[*POLICIES.names(), *POLICIES.aliases()],
        help=f"context policy (default {DEFAULT_POLICY}; "
        + ", ".join(f"{alias} = {name}" for alias, name in POLICIES.aliases().items()) + ")",
    )
    parser.add_argument("--session-order", default="source", choices=["source", "shuffle"])
    value_flag(parser, "--max-sessions", type=int, metavar="N", help="keep the first N sessions")
    parser.add_argument(
        "--arrival",
        choices=["poisson", "constant"],
        help="draw session arrivals at --rate (default: keep the source arrivals; "
        "synthetic inputs default to poisson)",
    )
    value_flag(parser, "--rate", type=float, default=1.0, help="sessions per second (default 1)")
    value_flag(parser, "--seed", type=int, default=0, help="numpy default_rng seed (default 0)")
    parser.add_argument("--format", default="auto", metavar="FMT", help="input format (auto)")
    parser.add_argument(
        "--tool-wait",
        default="union",
        choices=["union", "sum"],
        help="TraceLab input: union of parallel tool intervals (default) or their sum",
    )
    value_flag(
        parser,
        "--major-compaction-min-drop-tokens",
        type=int,
        default=MAJOR_COMPACTION_MIN_DROP_TOKENS,
        metavar="TOKENS",
        help="prefix-preserving: a context drop this large ... (default %(default)s)",
    )
    value_flag(
        parser,
        "--major-compaction-min-drop-ratio",
        type=float,
        default=MAJOR_COMPACTION_MIN_DROP_RATIO,
        metavar="RATIO",
        help="... and this large a share of the context is a major compaction, "
        "prefix 0 (default %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from workbench.workloads.materialize import TracegenSpec, tracegen

    # every field of the spec is the flag of its name (the format's: --format)
    spec = TracegenSpec(fmt=args.format, **{
        f.name: getattr(args, f.name) for f in dataclasses.fields(TracegenSpec) if f.name != "fmt"})
    result = tracegen(given_path(args, "input", "INPUT"), args.output, spec)
    m = result.manifest
    p = m["parameters"]
    print(
        f"wrote {result.csv_path} ({m['sessions']} sessions, {m['rounds']} rounds, "
        f"planned prefix hit rate {m['planned_prefix_hit_rate']:.3f}, "
        f"folded {p['folded_prefix_tokens']} tokens in {p['folded_rounds']} rounds, "
        f"{p['major_compaction_rounds']} major compactions)"
    )
    print(f"wrote {result.manifest_path}")
    print(f"wrote {result.plan_path}")
    return 0
