"""The whole Mooncake conversation trace on a simulated cluster, by router policy.

Method: load the public trace once (12,031 requests, trace-timed over one hour),
then for each router run ``workbench.simulate`` with ``workers`` engine workers
(each the default engine unless ``--engine`` says otherwise: block 16, 65,536
blocks = 1 Mi KV tokens per worker) and report wall time, CPU time of this
process, the virtual duration, the actual hit rate against the trace's ideal
(planned) one, TTFT p50/p90, and the spread of load over the workers (requests
per worker min/max, waiting queue at arrival max). Run from the repo root:

    .venv/bin/python bench/bench_cluster.py [--workers 4 8 16] [--routers prefix-aware ...]
        [--max-items N] [--engine JSON] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

from workbench.executors.virtual import simulate
from workbench.metrics import summarize
from workbench.replay.prepare import coerce_config, load_workload
from workbench.sim.router import ROUTERS

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/mooncake/conversation_trace.jsonl"


def one(cfg: dict, workload: object, engine: dict) -> dict:
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(cfg, engine=engine, workload=workload)  # type: ignore[arg-type]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    s = summarize(result)
    workers = s.get("workers") or []
    reqs = [w["requests"] for w in workers]
    waits = [w["waiting_at_arrival_max"] or 0 for w in workers]
    out = {
        "router": engine.get("router"), "workers": engine.get("workers"),
        "disagg": engine.get("disagg"),
        "requests": s["requests"], "ok": s["ok"],
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "virtual_duration_s": round(result.manifest.virtual_duration_s, 1),
        "actual_hit": round(s["actual_prefix_hit_rate"], 4),
        "planned_hit": round(s["planned_prefix_hit_rate"], 4),
        "recovered": round(s["actual_prefix_hit_rate"] / s["planned_prefix_hit_rate"], 3),
        "ttft_p50_s": round(s["ttft_ms"]["p50"] / 1e3, 3),
        "ttft_p90_s": round(s["ttft_ms"]["p90"] / 1e3, 3),
        "tpot_p50_ms": round(s["tpot_ms"]["p50"], 2),
        "requests_per_worker": [min(reqs), max(reqs)] if reqs else None,
        "waiting_at_arrival_max": max(waits) if waits else None,
    }  # fmt: skip
    del result
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--max-items", type=int, default=None)
    ap.add_argument("--workers", type=int, nargs="*", default=[16],
                    help="worker counts to sweep (default 16)")
    ap.add_argument("--routers", nargs="*", default=sorted(ROUTERS))
    ap.add_argument("--engine", default="{}", help="further engine knobs as JSON")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    cfg = coerce_config({"trace": {"path": args.trace, "max_items": args.max_items}})
    workload = load_workload(cfg)
    rows = []
    for workers in args.workers:
        for router in args.routers:
            engine = {**json.loads(args.engine), "workers": workers, "router": router}
            rows.append(one(cfg, workload, engine))  # type: ignore[arg-type]
            print(json.dumps(rows[-1]), flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
