"""Engine core on the virtual clock: exact times, determinism, preemption, aborts."""

import asyncio
import itertools

import pytest

from workbench.clock import VirtualClock, run_virtual
from workbench.sim import cost
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine


def _run(config, body):
    async def main():
        engine = Engine(config, VirtualClock())
        await engine.start()
        try:
            async with asyncio.timeout(3600):  # virtual seconds: only a hang trips it
                return await body(engine)
        finally:
            await engine.stop()

    return run_virtual(main())


def test_lone_request_ttft_is_prefill_time_exactly():
    cfg = EngineConfig()

    async def body(engine):
        req = engine.submit("a", list(range(1000)), 4)
        outs = [o async for o in req.stream()]
        return req, outs

    req, outs = _run(cfg, body)
    assert req.arrival_ns == 0
    assert req.first_token_ns - req.arrival_ns == round(cost.prefill_ms(cfg, 1000) * 1e6)
    # each later token is one decode step with u = attended KV tokens / capacity
    gaps = [b.t_ns - a.t_ns for a, b in itertools.pairwise(outs)]
    assert gaps[0] == round(cost.decode_ms(cfg, 1001) * 1e6)
    assert [len(o.token_ids) for o in outs] == [1, 1, 1, 1]
    assert [o.finished for o in outs] == [False, False, False, True]
    assert outs[-1].finish_reason == "length" and req.finish_ns == outs[-1].t_ns


def test_chunked_prefill_splits_at_the_token_budget():
    cfg = EngineConfig()

    async def body(engine):
        req = engine.submit("long", list(range(20_000)), 1)
        return await req.wait()

    req = _run(cfg, body)
    expected = sum(round(cost.prefill_ms(cfg, t) * 1e6) for t in (8192, 8192, 3616))
    assert req.first_token_ns == expected and req.completion_tokens == 1


def test_cached_prefix_shortens_ttft_and_is_reported_in_blocks():
    cfg = EngineConfig(block_size=16)

    async def body(engine):
        first = await engine.submit("a", list(range(100)), 2).wait()
        second = engine.submit("b", [*range(64), *range(500, 540)], 2)
        await second.wait()
        return first, second, engine.stats()

    first, second, stats = _run(cfg, body)
    assert first.cached_tokens == 0 and second.cached_tokens == 64
    assert second.first_token_ns - second.arrival_ns == round(cost.prefill_ms(cfg, 40) * 1e6)
    assert stats["prefix_cache_hits_tokens"] == 64
    assert stats["prefix_cache_queries_tokens"] == stats["prompt_tokens"] == 204


def _workload(engine):
    async def one(i):
        await engine.clock.sleep_until(i * 3_000_000)
        req = engine.submit(f"r{i}", [*range(200), *range(1000 * i, 1000 * i + 50 + i)], 20 + i)
        return [(o.token_ids, o.t_ns) async for o in req.stream()], req.cached_tokens

    return asyncio.gather(*(one(i) for i in range(12)))


def test_same_inputs_give_identical_token_timestamps():
    cfg = EngineConfig(block_size=16, num_blocks=64, seed=3)
    a = _run(cfg, _workload)
    b = _run(cfg, _workload)
    assert a == b
    assert any(cached > 0 for _, cached in a)


def test_preemption_keeps_pinned_output_lengths():
    cfg = EngineConfig(block_size=16, num_blocks=24)

    async def body(engine):
        reqs = [engine.submit(f"p{i}", [i + 1] * 40, 60) for i in range(6)]
        await asyncio.gather(*(r.wait() for r in reqs))
        return reqs, engine.stats()

    reqs, stats = _run(cfg, body)
    assert stats["preemptions"] > 0
    assert [r.completion_tokens for r in reqs] == [60] * 6
    assert all(r.finish_reason == "length" for r in reqs)
    assert stats["generation_tokens"] == 360 and stats["kv_usage"] == 0.0
    # recomputation does not re-count: counters equal the per-request sums
    assert stats["prefix_cache_hits_tokens"] == sum(r.cached_tokens for r in reqs)
    assert stats["prompt_tokens"] == 240


def test_abort_frees_blocks_and_ends_the_stream():
    cfg = EngineConfig()

    async def body(engine):
        req = engine.submit("x", list(range(500)), 1000)
        seen = []
        async for out in req.stream():
            seen.append(out)
            if len(seen) == 3:
                req.abort()
        return seen, engine.stats(), req

    seen, stats, req = _run(cfg, body)
    assert [o.finished for o in seen] == [False, False, False, True]
    assert seen[-1].token_ids == [] and seen[-1].finish_reason == "abort"
    assert stats["requests_aborted"] == 1 and stats["kv_usage"] == 0.0
    assert stats["running"] == 0 and req.completion_tokens == 3


def test_stop_aborts_unfinished_requests():
    async def main():
        engine = Engine(EngineConfig(), VirtualClock())
        await engine.start()
        req = engine.submit("s", [1, 2, 3], 10_000)
        async with asyncio.timeout(60):
            await engine.clock.sleep_until(100_000_000)
            await engine.stop()
            return [o async for o in req.stream()][-1]

    last = run_virtual(main())
    assert last.finished and last.finish_reason == "abort"


def test_reset_prefix_cache_refused_while_busy():
    async def body(engine):
        req = engine.submit("a", list(range(64)), 50)
        async for _ in req.stream():
            break  # admitted and holding blocks now
        busy = engine.reset_prefix_cache()
        await req.wait()
        return busy, engine.reset_prefix_cache(), engine.stats()

    busy, idle, stats = _run(EngineConfig(), body)
    assert busy is False and idle is True and stats["kv_blocks_cached"] == 0


def test_submit_validation_and_clamping():
    async def body(engine):
        with pytest.raises(ValueError, match="maximum context length"):
            engine.submit("big", [1] * 100, 1)
        with pytest.raises(ValueError, match="max_tokens"):
            engine.submit("zero", [1], 0)
        with pytest.raises(ValueError, match="at least one token"):
            engine.submit("empty", [], 1)
        return await engine.submit("clamp", [1] * 90, 50).wait()

    req = _run(EngineConfig(max_model_len=100), body)
    assert req.completion_tokens == 10  # vLLM clamps silently: 90 + 10 = max_model_len


def test_zero_cost_steps_take_no_virtual_time():
    async def body(engine):
        req = await engine.submit("z", list(range(300)), 5).wait()
        return req.token_ns, engine.clock.now_ns()

    times, now = _run(EngineConfig(zero_cost=True), body)
    assert times == [0] * 5 and now == 0
