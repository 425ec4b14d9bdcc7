"""Measurement fidelity against the embedded engine (issue 4): client TTFT vs engine truth.

For each concurrency (default 1, 32, 256) it replays independent requests
(``--prompt`` tokens in, ``--output`` out, all due at t=0, ``max_concurrency`` =
c) with ``workbench.executors.dispatch.run_async`` against the embedded engine, then reads
the engine's own per-request truth (``GET /debug/requests``: ``arrival_ns`` when
the engine accepted the request, ``first_token_ns`` when it emitted the first
token, ``sent_ns`` when each token's bytes were written to the socket) and
joins it to the client's records by request id (``x-request-id``). All stamps
are ``time.perf_counter_ns`` = CLOCK_MONOTONIC, one clock base on this host.

Reported per request, then p50 / p99 / mean over requests:

- ``ttft_bias_ms`` = client TTFT − engine TTFT (``first_token_ns − arrival_ns``):
  everything the client adds (building and sending the request, HTTP parsing on
  both sides, the event loop noticing the bytes);
- ``ttft_bias_vs_write_ms`` = client TTFT − (first write − arrival): the same
  without the engine's own emission → socket delay;
- ``request_path_ms`` (client dispatch → engine arrival) and
  ``response_path_ms`` (engine first write → client stamp): where the bias is.

The engine runs in its own process (``workbench sim serve``) so client and
engine do not share an event loop; ``--in-process`` runs ``serve_sim`` on the
client's loop instead (what a notebook does), to show what sharing costs.

    .venv/bin/python bench/bench_fidelity.py [--concurrency 1 32 256] [--in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench.executors.dispatch import run_async

REQUESTS = {1: 40, 32: 256, 256: 768}


Truth = Callable[[], dict[str, dict[str, Any]]]


@contextlib.asynccontextmanager
async def engine(in_process: bool, speedup: float) -> AsyncIterator[tuple[str, Truth]]:
    """``(base_url, truth)``: the engine's URL and a function returning its truth by id."""
    if in_process:  # on this loop: read the log directly (a blocking GET would deadlock)
        from workbench.sim.server import serve_sim

        async with serve_sim(speedup=speedup) as handle:
            yield handle.base_url, lambda: {r["request_id"]: r for r in handle.debug_requests()}
        return
    cmd = [sys.executable, "-m", "workbench", "sim", "serve", "--port", "0",
           "--speedup", str(speedup)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        if "embedded engine on " not in line:
            raise RuntimeError(f"engine did not start: {line!r}")
        url = line.split("embedded engine on ")[1].strip()
        yield url, lambda: fetch_truth(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def fetch_truth(base_url: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(base_url + "/debug/requests", timeout=30) as resp:
        rows = json.loads(resp.read())
    return {r["request_id"]: r for r in rows}


def write_trace(path: Path, n: int, prompt: int, output: int, tag: str) -> Path:
    lines = ["id,arrival_time,input_len,output_len"]
    lines += [f"{tag}-{i},0,{prompt},{output}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p99": None, "mean": None}
    p50, p99 = np.percentile(xs, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "mean": float(np.mean(xs))}


async def one(
    base_url: str, truth_of: Truth, c: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    n = args.requests or REQUESTS.get(c, 4 * c)
    trace = write_trace(tmp / f"c{c}.csv", n, args.prompt, args.output, f"c{c}")
    cfg = {
        "trace": {"path": str(trace), "format": "independent"},
        "arrival": {"mode": "saturated", "max_concurrency": c},
        "backend": {"name": "openai", "scrape_interval_s": None},
        "target": base_url,
        "out_dir": str(tmp),
    }
    result = await run_async(cfg)
    truth = truth_of()
    names = ("ttft_bias_ms", "ttft_bias_vs_write_ms", "request_path_ms", "response_path_ms")
    cols: dict[str, list[float]] = {k: [] for k in names}
    for r in result.records:
        t = truth.get(r.request_id)
        if r.status != "ok" or t is None or not r.token_times_ns or not t.get("first_token_ns"):
            continue
        ttft = r.token_times_ns[0] - (r.dispatch_ns or 0)
        first_write = t["sent_ns"][0] if t.get("sent_ns") else t["first_token_ns"]
        cols["ttft_bias_ms"].append((ttft - (t["first_token_ns"] - t["arrival_ns"])) / 1e6)
        cols["ttft_bias_vs_write_ms"].append((ttft - (first_write - t["arrival_ns"])) / 1e6)
        cols["request_path_ms"].append((t["arrival_ns"] - (r.dispatch_ns or 0)) / 1e6)
        cols["response_path_ms"].append((r.token_times_ns[0] - first_write) / 1e6)
    client = result.manifest.client or {}
    return {
        "concurrency": c, "requests": n, "joined": len(cols["ttft_bias_ms"]),
        **{k: stats(v) for k, v in cols.items()},
        "client_cpu_util": client.get("cpu_util"),
        "release_lag_p99_ms": (client.get("release_lag_ms") or {}).get("p99"),
        "client_bottleneck": client.get("client_bottleneck"),
    }  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| c | requests joined | TTFT bias p50 / p99 / mean ms | vs first write p50 / p99 ms "
           "| request path mean ms | response path mean ms | client CPU | lag p99 ms |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip

    def f(x: float | None, nd: int = 2) -> str:
        return "–" if x is None else f"{x:.{nd}f}"

    for r in rows:
        b, w = r["ttft_bias_ms"], r["ttft_bias_vs_write_ms"]
        out.append(
            f"| {r['concurrency']} | {r['joined']}/{r['requests']} | "
            f"{f(b['p50'])} / {f(b['p99'])} / {f(b['mean'])} | {f(w['p50'])} / {f(w['p99'])} | "
            f"{f(r['request_path_ms']['mean'])} | {f(r['response_path_ms']['mean'])} | "
            f"{f(r['client_cpu_util'])} | {f(r['release_lag_p99_ms'])} |"
        )
    return "\n".join(out)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="wb-fidelity-") as d:
        async with engine(args.in_process, args.speedup) as (url, truth_of):
            for c in args.concurrency:
                rows.append(await asyncio.wait_for(one(url, truth_of, c, args, Path(d)), 600))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 256])
    ap.add_argument("--requests", type=int, default=None, help="per point (default by c)")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--speedup", type=float, default=1.0, help="engine speed-up factor")
    ap.add_argument("--in-process", action="store_true", help="engine on the client's loop")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    from workbench.replay.prepare import run_on_fast_loop

    rows = run_on_fast_loop(main_async(args))
    print(f"engine {'in-process' if args.in_process else 'subprocess'}, "
          f"load avg {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(table(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
