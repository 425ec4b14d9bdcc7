"""``workbench sim serve``: run the embedded engine behind HTTP until Ctrl-C.

Imports aiohttp only when the command runs, so ``workbench --help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from typing import Any

NAME = "sim"
HELP = "run the embedded (simulated) serving engine"

_KNOBS: list[tuple[str, type, str]] = [
    ("model", str, "served model name"),
    ("mode", str, "metrics dialect: vllm | sglang"),
    ("block-size", int, "KV block size in tokens (default 16)"),
    ("num-blocks", int, "KV capacity in blocks (default 65536)"),
    ("max-num-batched-tokens", int, "per-step token budget (default 8192)"),
    ("max-num-seqs", int, "max running requests (default 256)"),
    ("max-model-len", int, "max prompt + output tokens (default 131072)"),
    ("speedup", float, "divide every step time by this (default 1.0)"),
    ("seed", int, "seed of output ids and fault draws (default 0)"),
    ("error-rate", float, "fault: fraction of requests answered with HTTP 500"),
    ("disconnect-after-tokens", int, "fault: drop the connection after N tokens"),
    ("stall-after-tokens", int, "fault: stop sending after N tokens for --stall-s"),
    ("stall-s", float, "fault: stall length in seconds"),
    ("sglang-prompt-echo", int, "fault: prepend N prompt-tail ids to SGLang output_ids"),
    ("error-status", int, "fault: HTTP status of --error-rate answers (200: JSON error body)"),
    ("usage-fault", str, "fault: broken usage counts: string | huge | negative"),
]
_FLAGS = [
    ("zero-cost", "every step takes no time (throughput tests)"),
    ("no-prefix-caching", "disable prefix caching"),
    ("omit-usage", "fault: send no usage block"),
    ("sglang-cumulative", "fault: SGLang output_ids repeat everything so far"),
    ("text-cumulative", "fault: chat/completions text repeats everything so far"),
    ("error-echo-auth", "fault: --error-rate messages repeat the Authorization header"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sim_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve the four wire protocols, /metrics and friends")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    for name, kind, text in _KNOBS:
        serve.add_argument(f"--{name}", type=kind, default=None, help=text)
    for name, text in _FLAGS:
        serve.add_argument(f"--{name}", action="store_true", help=text)


def knobs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The engine knobs the user set (unset ones keep ``EngineConfig`` defaults)."""
    knobs: dict[str, Any] = {}
    for name, _, _ in _KNOBS:
        value = getattr(args, name.replace("-", "_"))
        if value is not None:
            knobs[name.replace("-", "_")] = value
    for name, _ in _FLAGS:
        if getattr(args, name.replace("-", "_")):
            key = name.replace("-", "_")
            if key == "no_prefix_caching":
                knobs["enable_prefix_caching"] = False
            else:
                knobs[key] = True
    return knobs


def run(args: argparse.Namespace) -> int:
    from workbench.sim.config import EngineConfig
    from workbench.sim.server import serve_forever

    try:
        config = EngineConfig.from_knobs(**knobs_from_args(args))
    except (TypeError, ValueError) as exc:
        print(f"workbench sim serve: error: {exc}", file=sys.stderr)
        return 2

    def ready(handle: Any) -> None:
        print(f"embedded engine on {handle.base_url}", flush=True)
        knobs = {k: v for k, v in dataclasses.asdict(config).items() if k != "faults"}
        print(f"config: {knobs}", flush=True)
        if config.faults.active:
            print(f"faults: {dataclasses.asdict(config.faults)}", flush=True)

    try:
        asyncio.run(serve_forever(args.host, args.port, config, ready))
    except KeyboardInterrupt:
        return 0
    return 0
