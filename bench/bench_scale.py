"""A synthetic agentic trace of N requests on a simulated cluster, records on disk (issue 28).

Method: ``--requests`` rounds as agentic sessions drawn in-process (``synthetic:``
distributions: rounds per session, fresh input per round, fixed output, tool waits;
each round carries its whole conversation), streamed: ``synthetic_stream`` draws the
sessions a block at a time as the run admits them and the plan is built per session
(docs/virtual-time.md, "Streamed runs"; ``--materialised`` draws and plans them all
up front, as before), replayed closed-loop
(``--concurrency`` sessions active) in virtual time on ``--workers`` engine workers
behind the prefix-aware router, with ``executor.keep_records`` false and an
``out_dir``: records and lifecycle rows go to disk as they finish, prompts go to the
engine as ``Segments`` (no token ids drawn). Record block hashes are off
(``executor.block_hashes`` false: with 16-token blocks they would be ~400 ints per
record written to disk). A thread samples this process's resident memory every
second; printed: CPU and wall time, peak RSS, RSS after the plan was built, and the
RSS samples' spread over the run (flat in requests means the run's part does not
grow with N). Run from the repo root:

    .venv/bin/python bench/bench_scale.py [--requests 1000000] [--workers 64]
        [--concurrency 1024] [--input lognormal:600,0.8] [--output fixed:100]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from workbench.executors.virtual import simulate
from workbench.workloads.synthetic import parse_synthetic, synthetic_stream, synthetic_workload


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=1024, help="sessions active at once")
    ap.add_argument("--rounds", default="uniform:2..20")
    ap.add_argument("--input", default="lognormal:600,0.8")
    ap.add_argument("--output", default="fixed:100")
    ap.add_argument("--tool-wait", default="uniform:100..5000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="run parent folder (default: a temp dir)")
    ap.add_argument("--num-blocks", type=int, default=None,
                    help="KV blocks a worker (default: the engine's, 65,536); a small cache "
                         "fills early, so the run's steady state shows at fewer requests")
    ap.add_argument("--materialised", action="store_true",
                    help="draw and plan every session up front (the path before streaming)")
    ap.add_argument("--progress", default=None, metavar="FILE",
                    help="append one JSON line per RSS sample (t, rss, records on disk)")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.rounds.removeprefix("uniform:").split(".."))
    sessions = max(1, round(args.requests / ((lo + hi) / 2)))
    spec = parse_synthetic(
        f"synthetic:sessions={sessions},rounds={args.rounds},input={args.input},"
        f"output={args.output},tool_wait={args.tool_wait}"
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-scale-"))
    out.mkdir(parents=True, exist_ok=True)  # --out may name a folder not made yet
    trace = out / "synthetic.jsonl"  # the config names a trace; the workload is given
    trace.write_text("")
    draw = synthetic_workload if args.materialised else synthetic_stream
    workload = dataclasses.replace(draw(spec, np.random.default_rng(args.seed)), source=str(trace))
    cfg = {
        "trace": {"path": str(trace)}, "out_dir": str(out),
        "arrival": {"mode": "saturated", "max_concurrency": args.concurrency},
        "executor": {"keep_records": False, "block_hashes": False},
    }  # fmt: skip
    rss_plan = _rss_mb()
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            samples.append(_rss_mb())
            if args.progress and len(samples) % 10 == 0:
                size = sum(f.stat().st_size for f in out.glob("*/records.jsonl"))
                with open(args.progress, "a") as fh:
                    fh.write(json.dumps({"t_s": round(time.perf_counter() - wall0),
                                         "cpu_s": round(time.process_time() - cpu0),
                                         "rss_mb": round(samples[-1]),
                                         "records_mb": round(size / 2**20, 1)}) + "\n")

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    engine: dict[str, object] = {"workers": args.workers, "router": "prefix-aware"}
    if args.num_blocks:
        engine["num_blocks"] = args.num_blocks
    result = simulate(cfg, engine=engine, workload=workload)
    done.set()
    t.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    m = result.manifest
    half = samples[len(samples) // 2 :] or [rss_plan]
    print(json.dumps({
        "requests": workload.n_rounds, "sessions": sessions, "streamed": workload.streamed,
        "workers": args.workers, "num_blocks": args.num_blocks or "default",
        "concurrency": args.concurrency, "status": m.status,
        "recorded_rounds": (m.completion or {}).get("recorded_rounds"),
        "virtual_duration_s": round(m.virtual_duration_s or 0.0, 1),
        "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
        "us_cpu_per_request": round(cpu / max(workload.n_rounds, 1) * 1e6),
        "rss_after_plan_mb": round(rss_plan),
        "rss_second_half_min_max_mb": [round(min(half)), round(max(half))],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "records_on_disk_mb": round(sum(f.stat().st_size for f in Path(
            result.run_dir or out).glob("*.jsonl")) / 2**20, 1),
    }))  # fmt: skip
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
