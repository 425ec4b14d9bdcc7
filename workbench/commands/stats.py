"""``workbench stats``: what a trace asks of a server (sizes, waits, cacheability): a
table, or the summary as JSON. Pandas is imported in ``run`` only (CLI start-up)."""

from __future__ import annotations

import argparse
import inspect
import json
from typing import Any

NAME = "stats"
HELP = "summarize a trace: units, rounds, token sizes, tool waits, planned and ideal prefix hits"

#: the table's sections and rows: each summary key (``--json`` keeps the keys) in words with
#: its unit, as the report's tables name theirs (``TTFT p90 (ms)``, ``duration (s)``)
_SECTIONS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("shape", (("units", "units"), ("sessions", "sessions"),
               ("independent", "independent requests"), ("rounds", "rounds"),
               ("mean_rounds_per_unit", "rounds per unit (mean)"),
               ("arrival_span_ms", "arrival span (ms)"))),
    ("agents", (("agent_tasks", "agent tasks"), ("subagents", "sub-agents"),
                ("max_depth", "sub-agent depth (max)"),
                ("max_fanout", "sub-agents of one round (max)"),
                ("detached_subagents", "detached sub-agents"))),
    ("tokens", (("total_prompt_tokens", "prompt (tokens, total)"),
                ("total_prefix_tokens", "reused prefix (tokens, total)"),
                ("total_input_tokens", "new input (tokens, total)"),
                ("total_output_tokens", "output (tokens, total)"),
                ("folded_prefix_tokens", "folded prefix (tokens, total)"),
                ("major_compaction_rounds", "major compaction rounds"),
                ("mean_input_tokens", "prompt (tokens, mean)"),
                ("mean_output_tokens", "output (tokens, mean)"),
                ("p50_prompt_tokens", "prompt p50 (tokens)"),
                ("p90_prompt_tokens", "prompt p90 (tokens)"),
                ("p99_prompt_tokens", "prompt p99 (tokens)"),
                ("p50_output_tokens", "output p50 (tokens)"),
                ("p90_output_tokens", "output p90 (tokens)"),
                ("p99_output_tokens", "output p99 (tokens)"))),
    ("tool waits", (("total_tool_wait_ms", "tool wait total (ms)"),
                    ("p50_tool_wait_ms", "tool wait p50 (ms)"),
                    ("p90_tool_wait_ms", "tool wait p90 (ms)"),
                    ("p99_tool_wait_ms", "tool wait p99 (ms)"))),
    ("prefix cache", (("planned_prefix_hit_rate", "planned hit rate"),
                      ("ideal_prefix_hit_rate", "ideal hit rate (infinite cache)"),
                      ("block_size", "block size (tokens)"),
                      ("working_set_blocks", "working set (blocks)"),
                      ("working_set_tokens", "working set (tokens)"))),
)  # fmt: skip

#: what to do about a long arrival span, in the flags of the command that replays (``stats``
#: takes neither; docs/arrival.md)
SPAN_REMEDY = ("when replaying it, rescale the arrivals with replay --rate R (arrival.rate, "
               "units/s) or replay --arrival saturated")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from workbench.commands._flags import path_argument
    from workbench.context import POLICIES

    path_argument(parser, "trace", "TRACE", "trace file (any supported format)")
    parser.add_argument(
        "--format", default="auto", metavar="FMT", help="trace format (default: detect)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--block-size",
        type=_block_size,
        metavar="N",
        help="cache block in tokens (default: the trace's own, else 512); also the tokens "
        "per hash id for readers that take it (Mooncake)",
    )
    parser.add_argument(
        "--trace-option", action="append", default=[], metavar="KEY=VALUE",
        help="a reader option (JSON or text), as replay takes it, e.g. model=GPT-4 "
        "(burstgpt), timing=original (weka), tokenizer=PATH/tokenizer.json (sharegpt, "
        "aiperf-*, mooncake text_input: token counts; words without it)",
    )
    parser.add_argument(
        "--policy",
        default=None,
        choices=[*POLICIES.names(), *POLICIES.aliases()],
        help="context policy for raw session traces (default trace-reported); refused with "
        "an already planned session-execution-v2 file, whose prefixes are taken as written",
    )


def _block_size(text: str) -> int:
    """A block size in tokens: an integer in 1..MAX_ROUND_TOKENS (docs/trace-bounds.md)."""
    from workbench.traces.bounds import MAX_ROUND_TOKENS

    value = int(text) if text.isascii() and text.strip().isdigit() else 0
    if not 1 <= value <= MAX_ROUND_TOKENS:
        raise argparse.ArgumentTypeError(f"must be an integer in 1..{MAX_ROUND_TOKENS}: {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from workbench.arrival.schedule import span_warning
    from workbench.commands._axes import json_items
    from workbench.commands._flags import given_path
    from workbench.config.context import check_not_planned
    from workbench.context import DEFAULT_POLICY
    from workbench.traces.load import FORMATS, available_formats, detect_format
    from workbench.workloads.standard import load_source
    from workbench.workloads.trace_stats import trace_stats

    available_formats()  # registers the built-in readers before names are resolved
    args.trace = given_path(args, "trace", "TRACE")
    options: dict[str, Any] = json_items(args.trace_option, "--trace-option")
    if args.trace.startswith("synthetic:"):  # a standard workload, drawn (no format)
        fmt = "synthetic"
    else:
        fmt = detect_format(args.trace) if args.format == "auto" else FORMATS.canonical(args.format)
        reader = FORMATS.get(fmt).read
        if args.block_size and "block_size" in inspect.signature(reader).parameters:
            options["block_size"] = args.block_size
    workload = load_source(args.trace, fmt, **options)
    check_not_planned(args.policy, workload)

    policy = args.policy or DEFAULT_POLICY
    stats = trace_stats(workload, block_size=args.block_size, policy=policy)
    # a text dataset's token counts: by which tokenizer, or approximated (never silently)
    counted_by = (workload.meta.get("reader") or {}).get("token_count")
    if args.json:
        said = {"token_count": counted_by} if counted_by else {}
        print(json.dumps({"format": fmt, "policy": stats.policy, **said, **stats.summary},
                         indent=2))
        return 0
    how = "detected" if args.format == "auto" else "given"
    print(f"trace   {args.trace}")
    print(f"format  {fmt} ({how})")
    print(f"policy  {stats.policy or 'none (prefixes as the trace gives them)'}")
    if counted_by:
        print(f"tokens  counted as {counted_by}")
    for line in _table(stats.summary):
        print(line)
    if not stats.summary["prefix_sharing_recorded"]:
        print(f"\nnote: the trace records no prefix sharing ({fmt}: no block ids, no cached "
              "prefix lengths): replayed, its prompts share none, so the hit rates above are "
              "0 by construction, not a property of the traffic it was recorded from")
    if warning := span_warning(stats.summary.get("arrival_span_ms") or 0.0, SPAN_REMEDY):
        print(f"\nwarning: {warning}")
    print("\nLRU prefix cache: capacity → hit rate (token-weighted)")
    for line in _curve(stats.hit_vs_capacity):
        print(line)
    return 0


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("_rate"):
        return f"{value:.4f}  ({value:.1%})"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}"


def _table(summary: dict[str, Any]) -> list[str]:
    width = max(len(words) for _, rows in _SECTIONS for _, words in rows)
    out: list[str] = []
    for title, rows in _SECTIONS:
        if title == "agents" and not summary.get("subagents"):
            continue  # no session graph: every unit is its own task
        out.append(f"\n{title}")
        out.extend(f"  {words:<{width}}  {_fmt(k, summary.get(k))}"
                   for k, words in rows if k in summary)
    return out


def _curve(curve: Any, rows: int = 10) -> list[str]:
    """At most ``rows`` points of the curve, evenly spread, always keeping the last."""
    n = len(curve)
    if n == 0:
        return ["  (no cacheable blocks)"]
    picks = sorted({round(i * (n - 1) / max(rows - 1, 1)) for i in range(min(rows, n))})
    out = [f"  {'blocks':>10}  {'tokens':>13}  hit rate"]
    for i in picks:
        row = curve.iloc[i]
        out.append(
            f"  {int(row['capacity_blocks']):>10,}  {int(row['capacity_tokens']):>13,}  "
            f"{row['hit_rate']:.4f}"
        )
    return out
