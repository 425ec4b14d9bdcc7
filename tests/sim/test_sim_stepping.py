"""Event-driven stepping of the engine in virtual time (``VirtualTimeLoop.call_step_at``):
no task, timer or future per step, and the same times the wall-clock task loop gives."""

import asyncio

import pytest

from workbench.clock import VirtualClock, run_virtual
from workbench.sim import cost
from workbench.sim.cluster import Cluster, ClusterConfig
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine

CFG = EngineConfig()


def ns(prefill: int, decodes: int = 0, kv: int = 0) -> int:
    return cost.step_ns(CFG, prefill, decodes, kv)


def _run(body, config=CFG, clock=None):
    async def main():
        engine = Engine(config, clock or VirtualClock())
        await engine.start()
        try:
            async with asyncio.timeout(3600):  # virtual seconds: only a hang trips it
                return await body(engine)
        finally:
            await engine.stop()

    return run_virtual(main())


def test_a_steps_tokens_are_stamped_at_its_end_and_seen_at_that_instant():
    async def body(engine):
        req = engine.submit("a", list(range(1000)), 3)
        return [(out.t_ns, engine.clock.now_ns()) async for out in req.stream()]

    seen = _run(body)
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

    a, b = _run(body)
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

    first, idle_at, (x, y) = _run(body)
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

    a, outs, b, stats = _run(body)
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

    stepped = _run(body, cfg)
    task_loop = _run(body, cfg, clock=_TaskClock())
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

    cancelled, finished, tokens, again = _run(body)
    assert cancelled and finished and tokens == 8 and again.finished
