"""A 10-point virtual-time sweep over the whole Mooncake conversation trace (issue 16).

Method: ``wb.sweep`` over ``arrival.rate`` (10 rates, the trace's timeline
rescaled) with ``virtual=True`` and ``parallel`` worker processes (default: the
cores there are, ``os.cpu_count()``); every point is a whole ``simulate`` of the 12,031
requests on the default engine, saved as a run directory. Prints the wall time
of the sweep and each point's numbers. Run from the repo root:

    .venv/bin/python bench/bench_sweep.py [--trace PATH] [--parallel N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import workbench as wb

DEFAULT = Path(__file__).resolve().parents[1] / "../shared/data/mooncake/conversation_trace.jsonl"
RATES = [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--parallel", type=int, default=os.cpu_count() or 1,
                    help="worker processes (default: the cores there are)")
    ap.add_argument("--out", default=None, help="sweep parent folder (default: a temp dir)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-sweep-"))
    t0 = time.perf_counter()
    s = wb.sweep({"trace": {"path": args.trace}}, {"arrival.rate": RATES}, virtual=True,
                 parallel=args.parallel, slo="ttft_ms:p90<=2000,tpot_ms:p90<=50",
                 out_dir=out, sweep_id="mooncake-10")
    wall = time.perf_counter() - t0
    cols = ["arrival.rate", "requests", "ttft_ms_p90", "tpot_ms_p90",
            "request_throughput_rps", "actual_prefix_hit_rate", "preemptions", "slo_held",
            "simulate_wall_s", "simulate_cpu_s"]
    print(s.frame[cols].to_string(index=False))
    print(json.dumps({"points": len(s.frame), "parallel": args.parallel,
                      "sweep_wall_s": round(wall, 1),
                      "point_cpu_s_mean": round(float(s.frame["simulate_cpu_s"].mean()), 1),
                      "load_average": os.getloadavg()}))
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
