"""How long a captured prompt's token work holds an event loop up (bench/README.md,
"capture proxy"): ``prompt_blocks`` over a ~1.2 MB chat prompt (180,000 words, word
tokenizer) run in place, in a thread, and in a worker process (``worker_pool``, the
proxy's way), while a ticker on the loop asks for 1 ms sleeps; printed: the work's wall
time, the ticks seen and the ticker's lag (how late each tick woke). Then the proxy
process's own CPU a request (all its threads: ``time.process_time``) for 500 prompts of
1,500 words, in place and through the worker process (pickling and the executor's
threads included).

    .venv/bin/python bench/bench_capture_loop.py [--reps 2]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    job = _job()
    for _ in range(args.reps):
        for mode in ("inline", "thread", "process"):
            print(asyncio.run(_one(mode, job)), flush=True)
        asyncio.run(_small(_job(1500)))


if __name__ == "__main__":
    main()
