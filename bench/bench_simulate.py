"""Virtual-time replay of the whole Mooncake conversation trace (issue: embedded engine).

Method: load the public trace (12,031 requests, trace-timed, one hour of
arrivals), run ``workbench.simulate`` with the default engine (block size 16,
65,536 blocks, the docs/embedded-engine.md polynomial), and report wall time, CPU time, the
virtual duration and the hit rates. Run from the repo root:

    .venv/bin/python bench/bench_simulate.py [--trace PATH] [--max-items N] [--engine JSON]
        [--digest]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from workbench.executors.virtual import simulate
from workbench.metrics import summarize
from workbench.report.canonical import run_digest

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/mooncake/conversation_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--max-items", type=int, default=None)
    ap.add_argument("--engine", default="{}", help="engine knobs as JSON")
    ap.add_argument("--digest", action="store_true",
                    help="also print the canonical report's sha256 (results identical?)")
    args = ap.parse_args()
    cfg = {"trace": {"path": args.trace, "max_items": args.max_items}}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(cfg, engine=json.loads(args.engine))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    s = summarize(result)
    extra = {"digest": run_digest(result)} if args.digest else {}
    print(json.dumps({
        "requests": s["requests"], "ok": s["ok"],
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "virtual_duration_s": round(result.manifest.virtual_duration_s, 1),
        "actual_prefix_hit_rate": round(s["actual_prefix_hit_rate"], 4),
        "planned_prefix_hit_rate": round(s["planned_prefix_hit_rate"], 4),
        "server_prefix_hit_rate": s["server_prefix_hit_rate"],
        "ttft_ms_p50": round(s["ttft_ms"]["p50"], 1), "ttft_ms_p99": round(s["ttft_ms"]["p99"], 1),
        "tpot_ms_p50": round(s["tpot_ms"]["p50"], 2), **extra,
    }, indent=2))


if __name__ == "__main__":
    main()
