"""The TTFT the capture proxy adds: direct vs through ``workbench capture``, at concurrency C.

Method: start ``workbench sim serve --zero-cost`` (every engine step takes no simulated
time: TTFT is the HTTP stack's and the proxy's, not a cost model's) pinned to core 0,
and ``workbench capture --upstream <engine>`` pinned to ``--proxy-core`` (default 0,
beside the engine; the machine has two cores). This process, pinned to core 1, runs C
agents at once: each a session (``X-Session-ID``) of rounds, streaming
``/v1/chat/completions`` with usage, every round's messages the last round's plus the
reply and a tool result (so the proxy does its whole job: session assignment, the
upstream ``/tokenize`` call, block hashing, file rewrites), no tool wait; after
``--rounds`` rounds an agent starts a new session. TTFT = first response byte after the
request was sent, per request. Modes alternate (direct, proxy, direct, proxy, …
``--reps`` each) so that the machine's drift hits both; the figures are the pooled
percentiles per mode and their differences, plus the proxy's CPU seconds per request
(utime + stime from ``/proc``). Run: ``.venv/bin/python bench/bench_capture.py
[--concurrency 64] [--requests 20] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp
import orjson


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pinned(core: int | None, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *cmd] if core is not None else cmd


def start(cmd: list[str], marker: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(5):  # bounded: the URL is on one of the first lines
        line = proc.stdout.readline()
        if marker in line:
            return proc, next(w for w in line.split() if w.startswith("http://"))
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not start: {line!r}")


async def agent(http: aiohttp.ClientSession, url: str, index: int, requests: int,
                rounds: int, words: int, out: list[float]) -> None:
    system = " ".join(f"agent{index}word{k}" for k in range(words))
    messages: list[dict[str, Any]] = []
    session = ""
    for n in range(requests):
        if n % rounds == 0:
            session = f"bench-{index}-{n}"
            messages = [{"role": "system", "content": f"{session} {system}"},
                        {"role": "user", "content": "fix the bug"}]
        body = orjson.dumps({"model": "workbench-sim", "messages": messages, "max_tokens": 32,
                             "stream": True, "stream_options": {"include_usage": True}})
        headers = {"X-Session-ID": session, "Content-Type": "application/json",
                   "Authorization": "Bearer sk-bench-not-a-key"}
        t0 = time.perf_counter()
        first = None
        chunks = []
        async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
            async for piece in resp.content.iter_any():
                if first is None:
                    first = time.perf_counter()
                chunks.append(piece)
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {b''.join(chunks)[:200]!r}")
        assert first is not None
        out.append(first - t0)
        reply = " ".join(orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                         for line in b"".join(chunks).split(b"\n")
                         if line.startswith(b"data: {") and b'"choices":[{' in line)
        messages = [*messages, {"role": "assistant", "content": reply},
                    {"role": "tool", "content": f"result {n} " * 20}]


async def run_mode(url: str, concurrency: int, requests: int, rounds: int,
                   words: int) -> list[float]:
    out: list[float] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as http:
        await asyncio.gather(*(agent(http, url, i, requests, rounds, words, out)
                               for i in range(concurrency)))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20, help="requests per agent per rep")
    ap.add_argument("--rounds", type=int, default=8, help="rounds per session")
    ap.add_argument("--words", type=int, default=1500, help="system prompt words (tokens)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--proxy-core", type=int, default=0)
    ap.add_argument("--tokenizer", default="upstream", choices=("upstream", "word"),
                    help="the proxy's --tokenizer (upstream: one /tokenize call a request)")
    ap.add_argument("--cost-model", action="store_true",
                    help="the engine with its cost model (a GPU's step times) instead of "
                         "--zero-cost: the request rate a real engine allows at this "
                         "concurrency, so the proxy is not the bottleneck")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="run the proxy under cProfile, its stats written to FILE")
    args = ap.parse_args()
    multi = bool(os.cpu_count() and os.cpu_count() > 1)  # type: ignore[operator]
    py = [sys.executable, "-m", "workbench"]
    server, base = start(pinned(0 if multi else None,
                                [*py, "sim", "serve", "--port", "0",
                                 *([] if args.cost_model else ["--zero-cost"])]),
                         "embedded engine on")
    out_dir = tempfile.mkdtemp(prefix="bench-capture-")
    prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    proxy, proxy_url = start(pinned(args.proxy_core if multi else None,
                                    [sys.executable, *prof, "-m", "workbench", "capture",
                                     "--upstream", base, "-o", out_dir,
                                     "--tokenizer", args.tokenizer]),
                             "capture proxy on")
    if multi:
        os.sched_setaffinity(0, {1})
    ttft: dict[str, list[float]] = {"direct": [], "proxy": []}
    try:
        for url in (base, proxy_url):  # warm-up: connections, the engine's first steps
            asyncio.run(run_mode(url, 8, 2, args.rounds, args.words))
        proxy_cpu = 0.0
        for _ in range(args.reps):
            for mode, url in (("direct", base), ("proxy", proxy_url)):
                c0 = cpu_seconds(proxy.pid)
                ttft[mode] += asyncio.run(run_mode(url, args.concurrency, args.requests,
                                                   args.rounds, args.words))
                if mode == "proxy":
                    proxy_cpu += cpu_seconds(proxy.pid) - c0
    finally:
        proxy.terminate()
        proxy.wait(30)
        server.terminate()
        server.wait(30)
    n = len(ttft["proxy"])
    print(f"c={args.concurrency}, {n} requests per mode, tokenizer {args.tokenizer}, "
          f"engine {'cost model' if args.cost_model else 'zero-cost'}, "
          f"proxy on core {args.proxy_core}, load {os.getloadavg()[0]:.1f}")
    for q in (0.5, 0.9, 0.99):
        d, p = pct(ttft["direct"], q) * 1000, pct(ttft["proxy"], q) * 1000
        print(f"TTFT p{round(q * 100)}: direct {d:.2f} ms, proxy {p:.2f} ms, added {p - d:+.2f} ms")
    print(f"TTFT mean: direct {statistics.mean(ttft['direct']) * 1000:.2f} ms, "
          f"proxy {statistics.mean(ttft['proxy']) * 1000:.2f} ms")
    print(f"proxy CPU {proxy_cpu * 1000 / n:.3f} ms per request "
          f"({proxy_cpu:.1f} s for {n}); files in {out_dir}: "
          f"{len(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
