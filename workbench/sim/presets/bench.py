"""Published-benchmark set-ups, replayed on the embedded engine in virtual time.

``closed_loop`` is what NVIDIA's NIM tables (AIPerf, GenAI-Perf) and ``vllm bench
serve --max-concurrency`` measure: ``concurrency`` clients, each sending its next
request (``isl`` fresh prompt tokens, exactly ``osl`` output tokens) as soon as its
previous one ends. ``burst`` is one batch submitted at once, timed until its last token:
``vllm bench serve`` without a request rate, TensorRT-LLM's static-batch benchmark and
(``batch_latency``) vLLM's latency test. Both run the real engine (``sim.engine``) on a
virtual clock: no sockets, no sleeping. Every request pays the config's
``request_overhead_ms`` before the engine sees it, as the embedded server's front end
charges it.
"""

from __future__ import annotations

import asyncio
import functools
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from statistics import fmean

from workbench.clock import VirtualClock, run_virtual
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine
from workbench.sim.handles import EngineRequest

VIRTUAL_TIMEOUT_S = 7 * 24 * 3600  # virtual seconds: only a hang trips it


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """Means over the measured requests of one closed-loop run, AIPerf's definitions:
    TTFT from the request's send; ITL = (last token − first token) / (output tokens − 1);
    throughput = output tokens / (last end − first send), tokens per second. The first
    ``concurrency`` requests (all sent at once, before the load is steady) are the
    warm-up the benchmarks run first: sent, not measured."""

    concurrency: int
    requests: int
    ttft_ms: float
    itl_ms: float
    throughput: float


@functools.lru_cache(maxsize=8)
def _tail(isl: int) -> tuple[int, ...]:
    return tuple(range(isl - 1))


def _prompt(i: int, isl: int) -> list[int]:
    """A prompt no other request shares a block with (random text in the benchmarks):
    its own first token, then ``0 .. isl-2`` (copied from one tuple per length)."""
    out = [i + 1_000_000]
    out += _tail(isl)
    return out


async def _send(engine: Engine, overhead_s: float, rid: str, isl: int, osl: int,
                i: int) -> tuple[int, EngineRequest]:
    sent = engine.clock.now_ns()
    if overhead_s:
        await asyncio.sleep(overhead_s)
    req = engine.submit(rid, _prompt(i, isl), osl)
    await req.wait()
    return sent, req


def closed_loop(config: EngineConfig, concurrency: int, isl: int, osl: int,
                requests: int | None = None, test_run: bool = False) -> LoadPoint:
    """``requests`` measured requests (default ``max(3 × concurrency, 16)``) through
    ``concurrency`` closed-loop clients.

    Client k first sends a warm-up request of ``osl × (k+1) / concurrency`` output
    tokens, so the clients' requests end spread out as in a benchmark's steady state
    (a deterministic engine would otherwise keep the first burst in lockstep for the
    whole run), and the clients keep sending past the measured requests, so the
    throughput window [first measured send, last measured end] is under full load
    (GenAI-Perf's tables measure their start too: ``perf_analyzer_windows``).
    ``test_run``: before any client starts, the first measured request's prompt is sent
    once, alone, and waited for (``vllm bench serve``'s "initial single prompt test
    run", docs/hardware.md "What the benchmark client sent"), so that request finds its
    whole prompt in the prefix cache.
    """
    measured = requests or max(3 * concurrency, 16)
    overhead_s = config.request_overhead_ms / 1e3 / config.speedup

    async def main() -> tuple[list[tuple[int, EngineRequest]], list[EngineRequest]]:
        engine = Engine(config, VirtualClock())
        await engine.start()
        done: list[tuple[int, EngineRequest]] = []
        every: list[EngineRequest] = []
        counter = iter(range(measured))
        if test_run:
            await _send(engine, overhead_s, "test", isl, osl, 0)

        async def client(k: int) -> None:
            warm = max(1, osl * (k + 1) // concurrency)
            every.append((await _send(engine, overhead_s, f"w{k}", isl, warm, -1 - k))[1])
            for i in counter:  # shared: each request index is taken once
                sent, req = await _send(engine, overhead_s, f"r{i}", isl, osl, i)
                done.append((sent, req))
                every.append(req)
            # the tail: keep the load on until every measured request has ended
            sent, req = await _send(engine, overhead_s, f"t{k}", isl, osl, measured + k)
            every.append(req)

        try:
            async with asyncio.timeout(VIRTUAL_TIMEOUT_S):
                await asyncio.gather(*(client(k) for k in range(concurrency)))
        finally:
            await engine.stop()
        return done, every

    done, every = run_virtual(main())
    ttft = [(r.first_token_ns or 0) - sent for sent, r in done]
    itl = [((r.finish_ns or 0) - (r.first_token_ns or 0)) / max(1, osl - 1) for _, r in done]
    t0 = min(sent for sent, _ in done)
    t1 = max(r.finish_ns or 0 for _, r in done)
    tokens = 0  # tokens in [t0, t1]: each request's times are in order
    for r in every:
        times = r.token_ns
        tokens += bisect_right(times, t1) - bisect_left(times, t0)
    return LoadPoint(concurrency, len(done), fmean(ttft) / 1e6, fmean(itl) / 1e6,
                     tokens / ((t1 - t0) / 1e9))


#: perf_analyzer's time windows as GenAI-Perf ran it (docs/hardware.md, "What the
#: benchmark client sent"): ``--measurement-interval`` 10,000 ms slept 1.2 times a
#: window, a result once ``stability_window`` 3 consecutive windows each saw a request
#: end, at most ``max_trials`` 10 windows
PA_WINDOW_S = 10.0 * 1.2
PA_STABLE_WINDOWS = 3
PA_MAX_TRIALS = 10


def stable_windows(ends_ns: list[int], window_ns: int) -> tuple[int, int]:
    """The [start, end) of the first ``PA_STABLE_WINDOWS`` consecutive windows from time
    0 in each of which some request ended (the last ones within ``PA_MAX_TRIALS`` when
    none are); (0, 0) while the runs so far cannot tell."""
    counts = [0] * PA_MAX_TRIALS
    for end in ends_ns:
        if end // window_ns < PA_MAX_TRIALS:
            counts[end // window_ns] += 1
    for k in range(PA_MAX_TRIALS - PA_STABLE_WINDOWS + 1):
        if all(counts[k:k + PA_STABLE_WINDOWS]):
            return k * window_ns, (k + PA_STABLE_WINDOWS) * window_ns
    return 0, 0


def perf_analyzer_windows(config: EngineConfig, concurrency: int, isl: int,
                          osl: int) -> LoadPoint:
    """GenAI-Perf's closed loop as perf_analyzer measured it: ``concurrency`` clients
    sending at once from time 0 (no warm-up), each its next request as the last ends;
    measured are the requests that **ended** within the first ``PA_STABLE_WINDOWS``
    consecutive ``PA_WINDOW_S`` windows from the start that each saw one end (the
    start-up round included); TTFT and ITL are their means, throughput their output
    tokens over [first send, last end] (GenAI-Perf's output token throughput)."""
    overhead_s = config.request_overhead_ms / 1e3 / config.speedup
    window_ns = int(PA_WINDOW_S * 1e9)

    async def main() -> list[tuple[int, EngineRequest]]:
        engine = Engine(config, VirtualClock())
        await engine.start()
        every: list[tuple[int, EngineRequest]] = []
        ends: list[int] = []
        horizon = [PA_MAX_TRIALS * window_ns]  # no client sends past it
        counter = iter(range(1 << 62))

        async def client() -> None:
            for i in counter:
                if engine.clock.now_ns() >= horizon[0]:
                    return
                sent, req = await _send(engine, overhead_s, f"r{i}", isl, osl, i)
                every.append((sent, req))
                ends.append(req.finish_ns or 0)
                _, stop = stable_windows(ends, window_ns)
                if stop:
                    horizon[0] = min(horizon[0], stop)

        try:
            async with asyncio.timeout(VIRTUAL_TIMEOUT_S):
                await asyncio.gather(*(client() for _ in range(concurrency)))
        finally:
            await engine.stop()
        return every

    every = run_virtual(main())
    start, stop = stable_windows([r.finish_ns or 0 for _, r in every], window_ns)
    if not stop:  # never three in a row: perf_analyzer's last windows
        start, stop = (PA_MAX_TRIALS - PA_STABLE_WINDOWS) * window_ns, PA_MAX_TRIALS * window_ns
    done = [(sent, r) for sent, r in every if start <= (r.finish_ns or 0) < stop]
    if not done:  # none ended in them (a load the engine barely moves): every request
        done = every
    ttft = [(r.first_token_ns or 0) - sent for sent, r in done]
    itl = [((r.finish_ns or 0) - (r.first_token_ns or 0)) / max(1, osl - 1) for _, r in done]
    t0 = min(sent for sent, _ in done)
    t1 = max(r.finish_ns or 0 for _, r in done)
    return LoadPoint(concurrency, len(done), fmean(ttft) / 1e6, fmean(itl) / 1e6,
                     len(done) * osl / ((t1 - t0) / 1e9))


@dataclass(frozen=True, slots=True)
class BurstPoint:
    """``batch`` requests sent at once (time 0), ``vllm bench serve`` without a request
    rate and TensorRT-LLM's static-batch benchmark alike: mean TTFT, mean TPOT
    ((end − first token) / (output tokens − 1) per request), the last token's time and
    the total (prompt + output) token throughput over it."""

    batch: int
    ttft_ms: float
    tpot_ms: float
    latency_ms: float
    total_tok_s: float


def burst(config: EngineConfig, batch: int, isl: int, osl: int,
          test_run: bool = False) -> BurstPoint:
    """``batch`` requests of ``isl`` fresh prompt tokens and ``osl`` output tokens,
    submitted at once to an idle engine, timed to the last token. ``test_run``: the
    first request's prompt is sent once, alone, before the batch (``vllm bench
    serve``'s initial test run: ``closed_loop``); the batch is timed from its own start."""
    overhead_s = config.request_overhead_ms / 1e3 / config.speedup

    async def main() -> tuple[int, list[tuple[int, EngineRequest]]]:
        engine = Engine(config, VirtualClock())
        await engine.start()
        try:
            async with asyncio.timeout(VIRTUAL_TIMEOUT_S):
                if test_run:
                    await _send(engine, overhead_s, "test", isl, osl, 0)
                start = engine.clock.now_ns()
                return start, await asyncio.gather(*(
                    _send(engine, overhead_s, f"b{i}", isl, osl, i) for i in range(batch)))
        finally:
            await engine.stop()

    start, done = run_virtual(main())
    ttft = [((r.first_token_ns or 0) - sent) / 1e6 for sent, r in done]
    tpot = [((r.finish_ns or 0) - (r.first_token_ns or 0)) / 1e6 / max(1, osl - 1)
            for _, r in done]
    end_ms = (max(r.finish_ns or 0 for _, r in done) - start) / 1e6
    return BurstPoint(batch, fmean(ttft), fmean(tpot), end_ms,
                      batch * (isl + osl) / (end_ms / 1e3))


def batch_latency(config: EngineConfig, batch: int, isl: int, osl: int) -> float:
    """Milliseconds from submitting ``batch`` requests at once to the last one's end
    (vLLM's latency test)."""
    return burst(config, batch, isl, osl).latency_ms
