"""Capacity of the embedded engine's HTTP server in streamed tokens per second.

Method: start ``workbench sim serve --zero-cost`` in a subprocess pinned to one
core (every engine step takes no simulated time, so the server's own Python is
the only limit), then open C concurrent ``/v1/completions`` streams from this
process (pinned to another core when there is one), each a 64-token prompt with
``max_tokens`` M, ``return_token_ids`` and usage. Every SSE event is parsed
with orjson and its ``token_ids`` counted; tokens/s = tokens received / wall
time from first request to last ``[DONE]``, and — because the machine may be
shared — tokens per CPU-second of the server process (utime + stime from
``/proc/<pid>/stat``), the capacity of one fully available core. Run: ``.venv/bin/python
bench/bench_sim_server.py [--concurrency 1 8 32] [--max-tokens 4000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import aiohttp
import orjson


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server() -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "workbench", "sim", "serve", "--zero-cost", "--port", "0"]
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        cmd = ["taskset", "-c", "0", *cmd]
        os.sched_setaffinity(0, {1})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, line.split()[-1]


async def one_stream(session: aiohttp.ClientSession, url: str, i: int, n: int) -> int:
    body = {"prompt": list(range(1000 * i, 1000 * i + 64)), "max_tokens": n, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True}  # fmt: skip
    got, tail = 0, b""
    async with session.post(url, json=body) as resp:
        resp.raise_for_status()
        async for data in resp.content.iter_any():  # split events ourselves: cheaper
            events = (tail + data).split(b"\n\n")
            tail = events.pop()
            for event in events:
                if event.startswith(b"data: {"):
                    chunk = orjson.loads(event[6:])
                    if chunk["choices"]:
                        got += len(chunk["choices"][0]["token_ids"])
    if got != n:
        raise RuntimeError(f"stream {i} got {got} tokens, expected {n}")
    return got


async def measure(base: str, concurrency: int, max_tokens: int) -> tuple[int, float]:
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        url = base + "/v1/completions"
        await one_stream(session, url, 999, 10)  # warm up
        t0 = time.perf_counter()
        counts = await asyncio.gather(
            *(one_stream(session, url, i, max_tokens) for i in range(concurrency))
        )
        return sum(counts), time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=4000)
    args = parser.parse_args()
    proc, base = start_server()
    try:
        print(f"server {base} (zero_cost), client pid {os.getpid()}")
        print("concurrency  tokens  wall_s  tokens/s  server_cpu_s  tokens/cpu_s")
        for c in args.concurrency:
            cpu0 = cpu_seconds(proc.pid)
            tokens, secs = asyncio.run(measure(base, c, args.max_tokens))
            cpu = cpu_seconds(proc.pid) - cpu0
            print(
                f"{c:11d}  {tokens:6d}  {secs:6.2f}  {tokens / secs:8.0f}"
                f"  {cpu:12.2f}  {tokens / max(cpu, 1e-9):12.0f}"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
