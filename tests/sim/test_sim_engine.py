"""Engine core on the virtual clock: exact times, determinism, preemption, aborts, and
the event-driven steps of virtual time."""

import asyncio
import itertools

import pytest

from workbench.clock import VirtualClock, run_virtual
from workbench.errors import ConfigError
from workbench.sim import cost
from workbench.sim.cluster import Cluster, ClusterConfig
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine


def _run(config, body, clock=None):
    async def main():
        engine = Engine(config, clock or VirtualClock())
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


def test_a_prompt_given_as_parts_streams_the_same_tokens_as_its_ids():
    """A virtual-time prompt (``Segments``) draws no output list up front; a stream of it
    still yields the request's output ids (it raised IndexError), at the same times."""
    from workbench.segments import UNIT, Segments

    async def body(engine, prompt):
        req = engine.submit("a", prompt, 5)
        return [(o.token_ids, o.t_ns, o.finished) async for o in req.stream()]

    parts = Segments([(UNIT, 7, 0, 300)])
    as_parts = _run(EngineConfig(), lambda e: body(e, parts))
    as_ids = _run(EngineConfig(), lambda e: body(e, list(range(300))))
    assert as_parts == as_ids and len(as_parts) == 5


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


# -- event-driven steps in virtual time (VirtualTimeLoop.call_step_at, docs/virtual-time.md):
# no task, timer or future per step, and the same times as the wall-clock task loop --------

CFG = EngineConfig()


def ns(prefill: int, decodes: int = 0, kv: int = 0) -> int:
    return cost.step_ns(CFG, prefill, decodes, kv)


def test_a_steps_tokens_are_stamped_at_its_end_and_seen_at_that_instant():
    async def body(engine):
        req = engine.submit("a", list(range(1000)), 3)
        return [(out.t_ns, engine.clock.now_ns()) async for out in req.stream()]

    seen = _run(CFG, body)
    t0 = ns(1000)
    t1 = t0 + ns(0, 1, 1001)
    t2 = t1 + ns(0, 1, 1002)
    assert seen == [(t0, t0), (t1, t1), (t2, t2)]


def test_a_submit_during_an_in_flight_step_joins_the_next_one():
    end = ns(1000)

    async def body(engine):
        a = engine.submit("a", list(range(1000)), 3)
        await engine.clock.sleep_until(end // 2)
        b = engine.submit("b", list(range(5000, 5200)), 2)
        await asyncio.gather(a.wait(), b.wait())
        return a, b

    a, b = _run(CFG, body)
    assert a.first_token_ns == end and b.arrival_ns == end // 2
    second = end + ns(200, 1, 1001 + 200)  # a's decode + b's whole prefill, one step
    assert b.first_token_ns == second and a.token_ns[1] == second


def test_an_idle_engine_wakes_on_submit_and_same_instant_submits_share_a_step():
    async def body(engine):
        first = await engine.submit("lone", list(range(100)), 1).wait()
        idle_at = engine.clock.now_ns()

        async def at(t, rid, prompt):
            await engine.clock.sleep_until(t)
            return await engine.submit(rid, prompt, 1).wait()

        t = idle_at + 7_000_000
        pair = await asyncio.gather(
            at(t, "x", list(range(1000, 1300))), at(t, "y", list(range(2000, 2400)))
        )
        return first, idle_at, pair

    first, idle_at, (x, y) = _run(CFG, body)
    assert first.first_token_ns == idle_at == ns(100)
    t = idle_at + 7_000_000
    assert x.arrival_ns == y.arrival_ns == t
    assert x.first_token_ns == y.first_token_ns == t + ns(300 + 400)


def test_an_abort_mid_step_ends_the_stream_then_and_the_step_completes_for_the_rest():
    end = ns(1500)

    async def body(engine):
        a = engine.submit("a", list(range(1000)), 5)
        b = engine.submit("b", list(range(9000, 9500)), 3)
        await engine.clock.sleep_until(end // 2)
        a.abort()
        outs = [out async for out in a.stream()]
        await b.wait()
        return a, outs, b, engine.stats()

    a, outs, b, stats = _run(CFG, body)
    assert [(o.token_ids, o.t_ns, o.finish_reason) for o in outs] == [([], end // 2, "abort")]
    assert a.finish_ns == end // 2 and a.completion_tokens == 0
    assert b.token_ns == [end, end + ns(0, 1, 501), end + ns(0, 1, 501) + ns(0, 1, 502)]
    assert stats["requests_aborted"] == 1 and stats["kv_usage"] == 0.0 and stats["running"] == 0


def test_a_cluster_of_two_workers_steps_at_interleaved_deadlines():
    async def main():
        cluster = Cluster(CFG, ClusterConfig(workers=2, router="round-robin"), VirtualClock())
        await cluster.start()
        log = []

        async def consume(req, name):
            async for out in req.stream():
                log.append((cluster.clock.now_ns(), name, out.t_ns))

        try:
            (w0, big), (w1, small) = (
                cluster.submit("big", list(range(2000)), 4),
                cluster.submit("small", list(range(7000, 7300)), 6),
            )
            await asyncio.gather(consume(big, "big"), consume(small, "small"))
            return (w0.worker, w1.worker), big.token_ns, small.token_ns, log
        finally:
            await cluster.stop()

    workers, big, small, log = run_virtual(main())

    def alone(prompt, n):
        times = [ns(prompt)]
        for k in range(1, n):
            times.append(times[-1] + ns(0, 1, prompt + k))
        return times

    assert workers == (0, 1)
    assert big == alone(2000, 4) and small == alone(300, 6)
    assert small[0] < big[0] < small[-1]  # the two workers' steps do interleave
    # every consumer ran at its token's instant, in time order across the workers
    assert [t for t, _, _ in log] == [t_ns for _, _, t_ns in log] == sorted(big + small)


class _TaskClock:
    """A virtual clock the engine does not recognise: it steps with its wall-clock task
    loop (one timer per step) on the same virtual loop, the path before call_step_at."""

    def __init__(self) -> None:
        self._clock = VirtualClock()

    def now_ns(self) -> int:
        return self._clock.now_ns()

    async def sleep_until(self, t_ns: int) -> None:
        await self._clock.sleep_until(t_ns)


@pytest.mark.parametrize("num_blocks", [64, 24])
def test_event_driven_steps_give_the_task_loops_times_exactly(num_blocks):
    cfg = EngineConfig(block_size=16, num_blocks=num_blocks, seed=3)

    async def body(engine):
        async def one(i):
            await engine.clock.sleep_until(i * 3_000_000)
            req = engine.submit(f"r{i}", [*range(200), *range(1000 * i, 1000 * i + 50 + i)], 20 + i)
            if i % 3 == 0:
                return req.token_ns if await req.wait() else None, req.cached_tokens
            return [(o.token_ids, o.t_ns) async for o in req.stream()], req.cached_tokens

        return await asyncio.gather(*(one(i) for i in range(12))), engine.stats()

    stepped = _run(cfg, body)
    task_loop = _run(cfg, body, clock=_TaskClock())
    assert stepped == task_loop
    if num_blocks == 24:
        assert stepped[1]["preemptions"] > 0


def test_deadlock_is_still_reported_after_the_engine_runs_dry():
    finished = []

    async def main():
        engine = Engine(CFG, VirtualClock())
        await engine.start()
        req = engine.submit("a", list(range(100)), 50)
        req_wait = asyncio.ensure_future(req.wait())
        req_wait.add_done_callback(lambda _: finished.append(req.finish_ns))
        await asyncio.get_running_loop().create_future()  # nothing will resolve it

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(main())
    assert len(finished) == 1 and finished[0] > 0


def test_cancelling_one_wait_leaves_the_other_waits_and_the_request():
    async def body(engine):
        req = engine.submit("w", list(range(400)), 8)
        first, second = asyncio.ensure_future(req.wait()), asyncio.ensure_future(req.wait())
        await asyncio.sleep(0)
        first.cancel()
        done = await second
        return first.cancelled(), done.finished, done.completion_tokens, await req.wait()

    cancelled, finished, tokens, again = _run(CFG, body)
    assert cancelled and finished and tokens == 8 and again.finished


@pytest.mark.parametrize(
    ("knobs", "message"),
    [({"num_blocks": "abc"}, r"target\.engine\.num_blocks: expected an integer in \[1, 67108864\], "
                             r"got 'abc' \(str\)"),
     ({"block_size": True}, r"target\.engine\.block_size: expected an integer .*, got True"),
     ({"speedup": float("nan")}, r"target\.engine\.speedup: expected a finite number .*got nan"),
     ({"decode_floor_ms": float("inf")}, r"decode_floor_ms: expected a finite number .*got inf"),
     ({"idle_wake_ms": "5"}, r"idle_wake_ms: expected a finite number .*got '5'"),
     ({"zero_cost": 1}, r"target\.engine\.zero_cost: expected true or false, got 1"),
     ({"prefill_coeffs": [1.0, 2.0]}, r"prefill_coeffs: expected a list of 3 finite numbers"),
     ({"decode_coeffs": [0, "x", 1]}, r"decode_coeffs: expected a list of 3 finite numbers"),
     ({"decode_coeffs": [0, float("nan"), 1]}, r"decode_coeffs: expected a list of 3 finite"),
     ({"block_size": 0}, r"target\.engine\.block_size: expected an integer in \[1, 4096\]"),
     ({"error_rate": 1.5}, r"target\.engine\.error_rate: expected a finite number in \[0, 1\]"),
     ({"usage_fault": "odd"}, r"target\.engine\.usage_fault: expected one of")],
)  # fmt: skip
def test_a_knob_of_the_wrong_type_is_refused_by_name(knobs, message):
    """An engine config file or ``serve_sim(**knobs)`` skips the RunConfig checks: the
    engine checks its own knobs against the run config's range table (workbench.ranges),
    so the message names the knob as a run config does (it used to fail mid-run)."""
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_knobs(**knobs)


def test_integral_floats_and_int_coefficients_are_taken():
    cfg = EngineConfig(num_blocks=16384.0, prefill_coeffs=[0, 1, 2], speedup=2)
    assert cfg.num_blocks == 16384 and isinstance(cfg.num_blocks, int)
    assert cfg.prefill_coeffs == (0.0, 1.0, 2.0) and cfg.speedup == 2.0


def test_an_engine_binds_a_clock_made_before_its_loop(monkeypatch):
    """A replay's clock is made before ``run_virtual`` starts its loop: the engine's start
    binds it, so the steps' and the runner's reads never ask asyncio for the running loop
    (a system call a read on 3.11; docs/virtual-time.md, "What a virtual replay costs")."""
    clock = VirtualClock()

    async def body(engine):
        req = engine.submit("s", list(range(64)), 4)
        await req.wait()
        with monkeypatch.context() as m:
            def no(*a):
                raise AssertionError("asked asyncio for the loop")

            m.setattr(asyncio, "get_running_loop", no)
            return clock.now_ns(), engine.clock.now_ns()

    now, same = _run(EngineConfig(), body, clock)
    assert now == same > 0
