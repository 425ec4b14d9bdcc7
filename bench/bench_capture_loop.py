"""How long a captured prompt's token work holds an event loop up (bench/README.md,
"capture proxy"): ``prompt_blocks`` over a ~1.2 MB chat prompt (180,000 words, word
tokenizer) run in place, in a thread, and in a worker process (``worker_pool``, the
proxy's way), while a ticker on the loop asks for 1 ms sleeps; printed: the work's wall
time, the ticks seen and the ticker's lag (how late each tick woke). Then the proxy
process's own CPU a request (all its threads: ``time.process_time``) for 500 prompts of
1,500 words, in place and through the worker process (pickling and the executor's
threads included).

``--stream-events N``: instead, the proxy's own loop (``CaptureProxy``, word tokenizer) while
it relays and records one streamed chat answer of N events at a time from
``bench/fake_server.py`` (a process of its own; ``--itl-ms 0``: written at once, else one
event every ITL ms), the client on the same loop reading raw bytes; the ticker as above,
from the request's sending to its record's end: per stream the ticks' max and p99 lag, the
process's CPU (proxy, client, ticker: ``time.process_time``), and the ``out`` recorded (the
same in every tree); ``--uvloop``: on uvloop's loop, as ``workbench capture`` runs when it is
installed. Run two trees at once, one per core, for a
before/after ratio (bench/README.md, "capture proxy").

    .venv/bin/python bench/bench_capture_loop.py [--reps 2]
    taskset -c 1 .venv/bin/python bench/bench_capture_loop.py --stream-events 8000 --reps 20

``--starts``: per capture (``--reps`` of them), from entering ``CaptureProxy`` to its first
answer relayed, and to its end with that request recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import time

import orjson

from workbench.capture.prompt_blocks import PromptJob, prompt_blocks, worker_pool, worker_ready
from workbench.capture.protocols import request_facts

WORDS = 180_000


def _job(words: int = WORDS) -> PromptJob:
    text = " ".join(f"w{i % 5000}x" for i in range(words))
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    facts = request_facts("/v1/chat/completions", raw)
    assert facts is not None
    facts.messages, facts.tool_result = [], []  # as the proxy sends a chat prompt
    return PromptJob(b"k" * 32, facts, None, 0, 10_000_000)


async def _ticker(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t - 0.001)


async def _one(mode: str, job: PromptJob) -> str:
    loop = asyncio.get_running_loop()
    pool: concurrent.futures.Executor | None = None
    if mode == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(1)
    elif mode == "process":
        pool = worker_pool()
        await loop.run_in_executor(pool, worker_ready)
    stop, lags = asyncio.Event(), []
    ticker = asyncio.create_task(_ticker(stop, lags))
    await asyncio.sleep(0.05)
    lags.clear()
    t = time.perf_counter()
    if pool is None:
        prompt_blocks(job)
    else:
        await loop.run_in_executor(pool, prompt_blocks, job)
    took = time.perf_counter() - t
    stop.set()
    await ticker
    if pool is not None:
        pool.shutdown()
    lags.sort()
    return (f"{mode:8s} work {took * 1000:6.0f} ms  ticks {len(lags):4d}  lag max "
            f"{lags[-1] * 1000:6.1f} ms  p50 {lags[len(lags) // 2] * 1000:6.2f} ms")


async def _small(job: PromptJob, n: int = 500) -> None:
    loop = asyncio.get_running_loop()
    pool = worker_pool()
    await loop.run_in_executor(pool, worker_ready)
    for mode in ("inline", "process"):
        cpu = time.process_time()
        for _ in range(n):
            if mode == "inline":
                prompt_blocks(job)
            else:
                await loop.run_in_executor(pool, prompt_blocks, job)
        took = (time.process_time() - cpu) / n
        print(f"{mode:8s} 1,500 words: proxy process CPU {took * 1000:.3f} ms a request",
              flush=True)
    pool.shutdown()


async def _streams(events: int, reps: int, itl_ms: float) -> None:
    import contextlib
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import aiohttp

    from workbench.capture import CaptureProxy, read_capture

    server = Path(__file__).with_name("fake_server.py")
    mode = ["--mode", "instant"] if itl_ms <= 0 else ["--mode", "timed", "--ttft-ms", "1",
                                                      "--itl-ms", str(itl_ms)]
    proc = subprocess.Popen([sys.executable, str(server), *mode], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": ""})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        upstream = line.split()[1]
        with tempfile.TemporaryDirectory() as out:
            async with CaptureProxy(upstream, out, tokenizer="word") as proxy, \
                    aiohttp.ClientSession() as http:
                body = {"model": "m", "max_tokens": events, "stream": True,
                        "stream_options": {"include_usage": True},
                        "messages": [{"role": "user", "content": "hello " * 100}]}
                maxes: list[float] = []
                for rep in range(reps + 1):  # the first: a warm-up, not counted
                    stop, lags = asyncio.Event(), []
                    ticker = asyncio.create_task(_ticker(stop, lags))
                    await asyncio.sleep(0.02)
                    lags.clear()
                    got = proxy.captured
                    cpu = time.process_time()
                    async with http.post(proxy.url + "/v1/chat/completions",
                                         json=body) as resp:
                        async for _ in resp.content.iter_any():
                            pass
                    while proxy.captured == got:  # its record done (the bench's own wait)
                        await asyncio.sleep(0.001)
                    stop.set()
                    await ticker
                    cpu = time.process_time() - cpu
                    if rep:
                        lags.sort()
                        maxes.append(lags[-1])
                        print(f"stream of {events:,} events: ticks {len(lags):5d}  lag max "
                              f"{lags[-1] * 1000:6.2f} ms  p99 "
                              f"{lags[len(lags) * 99 // 100] * 1000:6.2f} ms  process CPU "
                              f"{cpu * 1000:6.1f} ms", flush=True)
            outs = sorted({r["out"] for d in read_capture(out) for r in d["requests"]})
            print(f"recorded out: {outs}", flush=True)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    maxes.sort()
    print(f"lag max over {reps} streams: median {maxes[len(maxes) // 2] * 1000:.2f} ms, "
          f"range {maxes[0] * 1000:.2f}-{maxes[-1] * 1000:.2f} ms", flush=True)


async def _starts(reps: int) -> None:
    """Per capture: from entering ``CaptureProxy`` (default worker process) to the first
    answer relayed, and to the capture's end with that request recorded."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import aiohttp

    from workbench.capture import CaptureProxy

    server = Path(__file__).with_name("fake_server.py")
    proc = subprocess.Popen([sys.executable, str(server)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        upstream = proc.stdout.readline().split()[1]
        body = {"model": "m", "max_tokens": 8, "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hello " * 100}]}
        firsts, ends = [], []
        async with aiohttp.ClientSession() as http:
            for _ in range(reps):
                with tempfile.TemporaryDirectory() as out:
                    t = time.perf_counter()
                    async with CaptureProxy(upstream, out, tokenizer="word") as proxy:
                        async with http.post(proxy.url + "/v1/chat/completions",
                                             json=body) as resp:
                            await resp.read()
                        firsts.append(time.perf_counter() - t)
                    ends.append(time.perf_counter() - t)
                    assert proxy.captured == 1
    finally:
        proc.terminate()
        proc.wait(10)
    for name, xs in (("first answer", firsts), ("recorded, stopped", ends)):
        xs.sort()
        print(f"{name:18s} median {xs[len(xs) // 2] * 1000:7.1f} ms  range "
              f"{xs[0] * 1000:.1f}-{xs[-1] * 1000:.1f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--stream-events", type=int, default=0, metavar="N")
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--uvloop", action="store_true",
                    help="--stream-events on uvloop's loop (workbench capture's, installed)")
    ap.add_argument("--starts", action="store_true",
                    help="time a capture's start instead (--reps captures)")
    args = ap.parse_args()
    if args.starts:
        asyncio.run(_starts(args.reps))
        return
    if args.stream_events:
        streams = _streams(args.stream_events, args.reps, args.itl_ms)
        if not args.uvloop:  # no other import: what it frees moves glibc's mmap threshold
            asyncio.run(streams)
            return
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(streams)
        return
    job = _job()
    for _ in range(args.reps):
        for mode in ("inline", "thread", "process"):
            print(asyncio.run(_one(mode, job)), flush=True)
        asyncio.run(_small(_job(1500)))


if __name__ == "__main__":
    main()
