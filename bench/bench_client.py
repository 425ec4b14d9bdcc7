"""workbench as a load client: one replay of independent requests against a URL.

The workload is the one of issue 7: N independent requests (``--requests``),
``--prompt`` tokens in, ``--output`` tokens out, all released at t=0
(``saturated``) under ``--concurrency``. It writes an ``independent`` trace,
replays it with ``workbench.executors.dispatch.run`` (records, lifecycle, summary written to
a run directory, exactly as a user's run), and prints one JSON line::

    {"client": "workbench", "run_dir": ..., "requests_ok": ..., "req_per_s": ...,
     "tokens_per_s": ..., "ttft_ms_mean": ..., "client": {...summary["client"]...}}

``req_per_s`` / ``tokens_per_s`` count successes over a window from the run's
start (every unit's ``scheduled_ns``: before any request was prepared) to the
last end. That is wider than the summary's (first request on the wire → last
end) and than agentic-bench's (its first request's start → last end), so the
comparison never flatters workbench; the summary's figure is kept as
``summary_req_per_s``. ``bench/peers/run_peers.py`` drives this
script and agentic-bench side by side; ``--profile out.txt`` wraps the run in
pyinstrument (if installed) for hot-path work.

Memory check (``--memory``): replays ``--requests`` (e.g. 100,000) queued
requests against the instant fake server and reports the peak RSS
(``ru_maxrss``) of this process.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    """Resident set size now (Linux ``/proc/self/statm``), in MB."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
    except OSError:
        return float("nan")
    return pages * resource.getpagesize() / 2**20


def write_trace(path: Path, n: int, prompt: int, output: int) -> Path:
    with open(path, "w") as fh:
        fh.write("id,arrival_time,input_len,output_len\n")
        for i in range(n):
            fh.write(f"r{i},0,{prompt},{output}\n")
    return path


def start_to_end(run_dir: Path) -> tuple[float, int, int]:
    """(window s from the run's start to the last end, successes, their output tokens)."""
    import orjson

    start, end, ok, tokens = None, 0, 0, 0
    with open(run_dir / "records.jsonl", "rb") as fh:
        for line in fh:
            r = orjson.loads(line)
            if r.get("warmup"):
                continue
            t0 = r["scheduled_ns"] if r["scheduled_ns"] is not None else r["dispatch_ns"]
            start = t0 if start is None else min(start, t0)
            end = max(end, r["end_ns"] or 0)
            if r["status"] == "ok":
                ok += 1
                tokens += r["completion_tokens"] or 0
    return ((end - start) / 1e9 if start is not None else float("nan")), ok, tokens


def config(args: argparse.Namespace, trace: Path, out_dir: Path) -> dict[str, Any]:
    return {
        "trace": {"path": str(trace), "format": "independent"},
        "arrival": {"mode": "saturated", "max_concurrency": args.concurrency},
        "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
        "target": {"url": args.url},
        "out_dir": str(out_dir),
        "label": "bench_client",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8000")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out-dir", default=None, help="run directories go here (default: a temp dir)")
    ap.add_argument("--profile", default=None, help="write a pyinstrument text profile here")
    ap.add_argument("--memory", action="store_true", help="report peak RSS (MB)")
    keep = ap.add_mutually_exclusive_group()
    keep.add_argument("--no-keep-records", dest="keep_records", action="store_const",
                      const=False, help="executor.keep_records false: records on disk only")
    keep.add_argument("--keep-records", dest="keep_records", action="store_const", const=True,
                      help="executor.keep_records true (default: auto, the run's default)")
    ap.add_argument("--http", default="httptools", choices=("httptools", "aiohttp"),
                    help="executor.http: the HTTP client (default httptools)")
    ap.add_argument("--pace-ms", default="auto",
                    help="executor.pace_ms: auto (the run's default), 0 (off) or a budget in ms")
    args = ap.parse_args(argv)

    from workbench.executors.dispatch import run

    tmp = Path(args.out_dir or tempfile.mkdtemp(prefix="wb-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    trace = write_trace(tmp / "trace.csv", args.requests, args.prompt, args.output)
    cfg = config(args, trace, tmp)
    pace = args.pace_ms if args.pace_ms == "auto" else float(args.pace_ms)
    cfg["executor"] = {"workers": args.workers, "http": args.http, "pace_ms": pace,
                       "record_flush_ms": 50.0}  # batched (docs/design-notes.md)
    if args.keep_records is not None:
        cfg["executor"]["keep_records"] = args.keep_records
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
    t0 = time.perf_counter()
    peak_run = [rss_mb()]
    if args.memory:  # RSS while requests are queued and in flight (before the summary)
        def progress(done: int, total: int) -> None:
            if done % 2000 == 0 or done == total:
                peak_run[0] = max(peak_run[0], rss_mb())

        result = run(cfg, progress=progress)
    else:
        result = run(cfg)
    wall = time.perf_counter() - t0
    if profiler is not None:
        profiler.stop()
        Path(args.profile).write_text(profiler.output_text(unicode=False, show_all=False))
    run_dir = Path(result.run_dir or "")
    summary = json.loads((run_dir / "summary.json").read_text())
    window_s, ok, tokens = start_to_end(run_dir)
    out = {
        "client": "workbench",
        "run_dir": result.run_dir,
        "requests_ok": summary["ok"],
        "requests": summary["requests"],
        "req_per_s": ok / window_s,
        "tokens_per_s": tokens / window_s,
        "summary_req_per_s": summary["request_throughput_rps"],
        "ttft_ms_mean": summary["ttft_ms"]["mean"],
        "itl_ms_mean": summary["itl_ms"]["mean"],
        "wall_s_total": wall,
        "self": summary.get("client"),
    }
    if args.memory:
        out["rss_mb_during_run_peak"] = peak_run[0]
        out["max_rss_mb_incl_summary"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
