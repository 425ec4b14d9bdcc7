"""``workbench plan``: the fewest replicas of each hardware option that hold an SLO."""

from __future__ import annotations

import argparse
import contextlib

from workbench.commands._flags import GivenItems, value_flag
from workbench.errors import ConfigError

NAME = "plan"
HELP = ("capacity plan in virtual time: fewest replicas of each preset (or calibrated "
        "engine) holding an SLO at the trace's rate and scaled rates, with the cost")


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--{what}: expected numbers separated by commas, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="trace file (or a bundled name, e.g. "
                   "mooncake/conversation_trace_head600.jsonl)")
    p.add_argument("--preset", action=GivenItems, field="plan.preset", default=[],
                   metavar="MODEL/GPU/tpN[/fp8|/fp8w]",
                   help="an option to compare (repeatable); an engine .json from "
                        "`sim calibrate` stands in for a preset")
    p.add_argument("--slo", action=GivenItems, field="slo", default=[], required=True,
                   help="SLO bound, e.g. 'ttft_ms:p90<=2000' (repeatable)")
    value_flag(p, "--scale", default="1,2", field="plan.scales",
               help="rate multiples of the trace's own rate (default 1,2)")
    value_flag(p, "--router", default="prefix-aware", field="plan.router",
               help="routers to try, comma-separated (default prefix-aware)")
    value_flag(p, "--host-kv-gb", default="0", field="target.engine.host_kv_gb",
               help="host KV tier sizes per replica to try, GB, comma-separated (default 0: "
               "none)")
    p.add_argument("--price", default=None, metavar="GPU=USD,...",
                   help="USD per GPU-hour per GPU, e.g. h100=2.5,h200=3.7, over the default "
                        "table of published on-demand prices (docs/plan.md, \"Prices\"); "
                        "a bare number, e.g. 2.5, is every GPU's price")
    value_flag(p, "--max-items", type=int, default=None, field="trace.max_items",
               help="first N units of the trace")
    value_flag(p, "--max-replicas", type=int, default=64, field="plan.max_replicas")
    value_flag(p, "--tool-wait-scale", type=float, default=1.0,
               field="arrival.tool_wait_scale",
               help="multiply every tool wait in every probe, as replay, simulate and sweep "
                    "do (default 1: the trace's waits)")
    value_flag(p, "--parallel", type=int, default=None, metavar="N", field="plan.parallel",
               help="searches (option × scale) run at once, each in a process of its "
               "own (default: the cores this process may use; 1: one at a time)")
    p.add_argument("-o", "--out", dest="out_dir", default="plans",
                   help="parent folder of the plan directory (default: plans)")


def run(args: argparse.Namespace) -> int:
    from workbench.plan import claim_plan_dir, plan
    from workbench.workloads.standard import bundled_or_path

    trace = str(bundled_or_path(args.trace))
    scales = _floats(args.scale, "scale")
    host_kv_gb = _floats(args.host_kv_gb, "host-kv-gb")
    claimed = claim_plan_dir(args.out_dir)  # before the plan is computed: never lost after
    try:
        result = plan(
            trace, args.preset, args.slo, scales=scales,
            routers=[r.strip() for r in args.router.split(",") if r.strip()],
            host_kv_gb=host_kv_gb, prices=args.price, max_items=args.max_items,
            max_replicas=args.max_replicas, parallel=args.parallel,
            tool_wait_scale=args.tool_wait_scale,
            progress=lambda _, line: print(f"  {line}", flush=True),
        )
    except BaseException:
        with contextlib.suppress(OSError):
            claimed.rmdir()  # still empty: nothing of the plan came
        raise
    out = result.save(args.out_dir, claimed=claimed)
    print(result.answer())
    print(f"plan directory: {out}  (render: workbench report {out})")
    return 0
