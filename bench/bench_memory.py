"""Benchmark: the client's memory is flat in the number of requests (``keep_records: false``).

Method: one live replay (``workbench.executors.dispatch.run``, the CLI's path) of ``--requests``
independent requests (512 tokens in, ``--output`` out), all due at t=0
(``saturated``) under ``--concurrency``, with ``executor.keep_records: false``,
against an HTTP server started for the run in its own process: the instant fake
server (``bench/fake_server.py``, default) or the embedded engine
(``--server sim``: ``workbench sim serve --zero-cost``). The trace is written by
this script (one CSV row per request).

The process's RSS (``/proc/self/statm``) is sampled from the progress callback
every ``requests/20`` finished requests. Reported: RSS before the run (the
interpreter and imports), at 10 % of the requests (trace and plan built, the
first waves done), at the end of the traffic (before the summary), the peak RSS
of the whole process (``ru_maxrss``, including the summary scan), and the
**slope** from 10 % to 100 % in bytes per request (least squares over the
samples): what each further request costs while the run goes on. A flat
client has a slope near zero; what stays is the trace and the plan, held from
the start (their cost per request is the 10 % point minus the baseline, divided
by the requests).

Run: ``.venv/bin/python bench/bench_memory.py --requests 100000 [--server sim]``
(``nice -n 19`` for the 1M point). Results: ``bench/README.md``, area "memory"
(``#memory``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_client import rss_mb, write_trace

ROOT = Path(__file__).resolve().parent.parent


def write_sessions(path: Path, n: int, rounds: int, output: int) -> Path:
    """``n`` requests as sessions of ``rounds`` rounds (256 fresh tokens a round, the
    conversation so far as prefix, no tool waits): prompts grow round by round."""
    with open(path, "w") as fh:
        fh.write("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                 "tool_wait_after_ms\n")
        for i in range(n):
            s, k = divmod(i, rounds)
            fh.write(f"{s},0,{k},{k * (256 + output)},256,{output},0\n")
    return path


def start_server(kind: str) -> tuple[subprocess.Popen, str]:
    """The server process and its root URL, once it listens (bounded wait on its stdout)."""
    if kind == "fake":
        cmd = [sys.executable, str(ROOT / "bench" / "fake_server.py"), "--mode", "instant"]
        marker = "LISTENING "
    else:
        cmd = [sys.executable, "-m", "workbench", "sim", "serve", "--port", "0", "--zero-cost"]
        marker = "http://"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:  # the server prints its address once, then nothing
        if marker in line:
            url = line[line.index("http://"):].split()[0].rstrip(",")
            return proc, url
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"server {kind} did not start")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--output", type=int, default=16)
    ap.add_argument("--server", choices=("fake", "sim"), default="fake")
    ap.add_argument("--url", default=None, help="use a running server instead")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds per session (1: independent requests; >1: agentic sessions "
                    "whose prompts grow by the conversation so far)")
    ap.add_argument("--no-uvloop", action="store_true", help="executor.uvloop false (asyncio)")
    ap.add_argument("--no-gc-freeze", action="store_true", help="executor.gc_freeze false")
    args = ap.parse_args(argv)

    from workbench.executors.dispatch import run

    baseline = rss_mb()
    tmp = Path(args.out_dir or tempfile.mkdtemp(prefix="wb-mem-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if args.rounds > 1:
        trace, fmt = write_sessions(tmp / "sessions.csv", args.requests, args.rounds,
                                    args.output), "session"
    else:
        trace, fmt = write_trace(tmp / "trace.csv", args.requests, 512, args.output), "independent"
    server, url = (None, args.url) if args.url else start_server(args.server)
    cfg = {
        "trace": {"path": str(trace), "format": fmt},
        "arrival": {"mode": "saturated", "max_concurrency": args.concurrency},
        "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
        "target": {"url": url},
        "executor": {"keep_records": False, "record_flush_ms": 50.0,
                     "uvloop": not args.no_uvloop, "gc_freeze": not args.no_gc_freeze},
        "out_dir": str(tmp),
        "label": "bench_memory",
    }
    every = max(1, args.requests // 20)
    samples: list[tuple[int, float]] = []
    blocks: list[int] = []

    def progress(done: int, total: int) -> None:
        if done % every == 0 or done == total:
            samples.append((done, rss_mb()))
            blocks.append(sys.getallocatedblocks())

    t0 = time.perf_counter()
    try:
        result = run(cfg, progress=progress)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    wall = time.perf_counter() - t0
    summary = json.loads(Path(result.run_dir or "", "summary.json").read_text())
    first = next(s for s in samples if s[0] >= args.requests // 10)
    last = samples[-1]
    fit = [s for s in samples if s[0] >= first[0]]
    slope = float(np.polyfit([d for d, _ in fit], [m * 2**20 for _, m in fit], 1)[0])
    out = {
        "requests": args.requests, "rounds": args.rounds, "ok": summary["ok"],
        "server": args.url or args.server,
        "concurrency": args.concurrency, "wall_s": round(wall, 1),
        "req_per_s": round(args.requests / wall, 1),
        "rss_mb_baseline": round(baseline, 1), "rss_mb_at_10pct": round(first[1], 1),
        "rss_mb_end_of_traffic": round(last[1], 1),
        "rss_mb_peak_during_traffic": round(max(m for _, m in samples), 1),
        "max_rss_mb_incl_summary": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10),
        "slope_bytes_per_request_10_to_100pct": round(slope, 1),  # least squares
        "samples": [(d, round(m, 1)) for d, m in samples],
        "python_blocks": blocks,  # sys.getallocatedblocks(): live Python allocations
    }  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
