"""Benchmark: aggregate client capacity of the Ray executor with 1, 2 and 4 Ray workers.

Method: ``bench/fake_server.py --mode instant`` runs in a subprocess (the whole
response — ``--output`` token events, usage, ``[DONE]`` — is written in one
write as soon as the request is read, so the server costs little and the
clients are what is measured). One local Ray cluster is started in this process
with ``num_cpus=4`` *logical* CPUs so that 4 one-CPU actors can be placed on
this host. For each worker count W (and, for reference, the ``local``
one-process executor) the same workload is replayed: ``--requests`` independent
requests (``--prompt`` tokens in, ``--output`` out), all released at t=0
(``saturated``) under ``--concurrency`` (divided between the W shards), no
preflight, no ``/metrics`` scrape. Capacity = the summary's
``request_throughput_rps`` (ok requests over first dispatch → last end);
ratios are against W=1. ``client.cpu_s`` (all actors' CPU) is reported too.
Each configuration is run ``--repeat`` times and the best is kept.

Run: ``.venv/bin/python bench/bench_ray.py [--requests N] [--workers 1 2 4]``.
Results go in ``bench/README.md`` (area "scale-out (Ray)", ``#scale-out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def start_fake_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_server.py"), "--mode", "instant"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("LISTENING"):
            return proc, line.split()[1]
    proc.kill()
    raise RuntimeError("fake server did not start")


def write_trace(path: Path, n: int, prompt: int, output: int) -> Path:
    with open(path, "w") as fh:
        fh.write("id,arrival_time,input_len,output_len\n")
        fh.writelines(f"r{i},0,{prompt},{output}\n" for i in range(n))
    return path


def one_run(url: str, trace: Path, out: Path, args: argparse.Namespace, executor: dict) -> dict:
    from workbench.executors.dispatch import run_async

    cfg = {
        "trace": {"path": str(trace), "format": "independent"},
        "arrival": {"mode": "saturated", "max_concurrency": args.concurrency},
        "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
        "target": {"url": url},
        "executor": executor,
        "out_dir": str(out),
    }
    t0 = time.perf_counter()
    result = asyncio.run(asyncio.wait_for(run_async(cfg), 900))
    wall = time.perf_counter() - t0
    s = json.loads((Path(result.run_dir or "") / "summary.json").read_text())
    client = s.get("client") or {}
    return {
        "ok": s["ok"], "req_per_s": s["request_throughput_rps"],
        "tokens_per_s": s["output_token_throughput_tps"], "duration_s": s["duration_s"],
        "wall_s": wall, "client_cpu_s": client.get("cpu_s"), "cpu_util": client.get("cpu_util"),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=16)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    import ray

    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-ray-"))
    trace = write_trace(tmp / "trace.csv", args.requests, args.prompt, args.output)
    server, url = start_fake_server()
    ray.init(num_cpus=max(4, *args.workers), include_dashboard=False, log_to_driver=False)
    rows: list[dict[str, Any]] = []
    try:
        cases: list[tuple[str, dict]] = [("local (1 process)", {"kind": "local"})]
        cases += [(f"ray, {w} worker(s)", {"kind": "ray", "workers": w}) for w in args.workers]
        for name, executor in cases:
            best = max(
                (one_run(url, trace, tmp, args, executor) for _ in range(args.repeat)),
                key=lambda r: r["req_per_s"] or 0,
            )
            rows.append({"case": name, **best})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        ray.shutdown()
        server.terminate()
        server.wait(timeout=10)
    base = next(r["req_per_s"] for r in rows if r["case"].startswith("ray, 1 "))
    print(f"\n{platform.python_version()} {platform.machine()}, {os.cpu_count()} cores, "
          f"{args.requests} requests x {args.output} tokens, concurrency {args.concurrency}\n")
    print("| executor | req/s | ratio to 1 Ray worker | output tok/s | client CPU s | wall s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['req_per_s']:,.0f} | {r['req_per_s'] / base:.2f} | "
              f"{r['tokens_per_s']:,.0f} | {r['client_cpu_s'] or 0:.1f} | {r['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
