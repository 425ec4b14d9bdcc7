"""Implicit decode (issue 28): a scheduler that advances its steady decoders in aggregate
makes exactly the steps, allocations, commits, evictions and token times of one that
visits every running request each step (docs/virtual-time.md, "Implicit decode")."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.sim.test_sim_compiled_twin import CASES, drive, prompt
from workbench.sim.config import EngineConfig
from workbench.sim.decoders import NEVER
from workbench.sim.scheduler import Scheduler, Sequence


def assert_same_schedule(implicit: dict[str, Any], explicit: dict[str, Any]) -> None:
    """Two ``drive`` runs alike in every field but who each step scheduled explicitly and
    how many decoders it advanced implicitly (what implicit decode changes)."""
    assert [s[2:] for s in implicit["steps"]] == [s[2:] for s in explicit["steps"]]
    assert {k: v for k, v in implicit.items() if k != "steps"} == (
        {k: v for k, v in explicit.items() if k != "steps"})


@pytest.mark.parametrize("name", sorted(CASES))
def test_implicit_decode_makes_the_explicit_schedule(name: str) -> None:
    explicit = drive(CASES[name], 3, implicit=False)
    assert_same_schedule(drive(CASES[name], 3), explicit)
    num_out = [r[-1] for r in explicit["requests"]]
    assert explicit["counters"]["generation_tokens"] == sum(num_out)


def test_the_cases_reach_preemption_and_implicit_steps() -> None:
    """The tight case really preempts, and implicit steps really happen (else the
    comparisons above prove little)."""
    assert drive(CASES["preempting"], 3)["counters"]["preemptions"] > 0
    implicit = [s[1] for s in drive(CASES["roomy"], 3)["steps"]]  # implicit decoders a step
    assert sum(n > 0 for n in implicit) > len(implicit) // 2


def test_a_watched_or_aborted_request_mid_step_keeps_the_schedule() -> None:
    knobs = {"num_blocks": 1500}
    for kw in ({"watch_at": 150}, {"abort_at": 150}, {"watch_at": 90, "abort_at": 200}):
        got = drive(knobs, 5, **kw)
        assert len(got["events"]) == len(kw)  # each found a running request to act on
        assert_same_schedule(got, drive(knobs, 5, implicit=False, **kw))


async def _consume(req: Any, how: str, abort_s: float) -> list[int]:
    """A request's token times, its client streaming it (``s``: woken every step from its
    first token on), going away after ``abort_s`` (``a``) or waiting for the end."""
    import asyncio

    if how == "s":
        return [o.t_ns async for o in req.stream()]
    if how == "a":
        await asyncio.sleep(abort_s)
        req.abort()
    else:
        await req.wait()
    times: list[int] = req.token_ns
    return times


def _spans_run(spans: bool, coro: Any) -> Any:
    """``run_virtual(coro)`` with spans, or step by step (``SPAN_MAX`` 1)."""
    from workbench.clock import run_virtual
    from workbench.sim import engine as engine_mod

    old = engine_mod.SPAN_MAX
    engine_mod.SPAN_MAX = old if spans else 1
    try:
        return run_virtual(coro)
    finally:
        engine_mod.SPAN_MAX = old


def _engine_run(spans: bool, implicit: bool, cfg: EngineConfig, seed: int) -> dict[str, Any]:
    """Requests submitted over virtual time to one engine: most awaited to the end, some
    streamed, some aborted part way; the engine's stats read on a grid meanwhile."""
    import asyncio
    import contextlib

    from workbench.clock import VirtualClock
    from workbench.sim import engine as engine_mod

    rng = random.Random(seed)
    plan = [(rng.randrange(0, 3_000_000_000), i, rng.randrange(1, 120), rng.choice("wwwsa"))
            for i in range(40)]

    async def one(engine: Any, at: int, i: int, n: int, how: str, out: dict) -> None:
        await asyncio.sleep(at / 1e9)
        shared = rng.randrange(0, 12) * 16  # token ids (a stream draws output ids)
        prompt = [*range(shared), *range(10**6 * (i + 1), 10**6 * (i + 1) + rng.randrange(1, 300))]
        req = engine.submit(f"r{i}", prompt, n)
        times = await _consume(req, how, rng.randrange(1, 400) / 1e3)
        out[i] = (times, req.cached_tokens, req.finish_reason, req.completion_tokens)

    async def main() -> dict[str, Any]:
        engine = engine_mod.Engine(cfg, VirtualClock())
        engine._sched.implicit = implicit
        await engine.start()
        out: dict[int, Any] = {}
        samples = []

        async def sample() -> None:
            for _ in range(400):
                await asyncio.sleep(0.013)
                samples.append(engine.stats())

        s = asyncio.ensure_future(sample())
        await asyncio.gather(*(one(engine, *p, out) for p in plan))
        s.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await s
        await engine.stop()
        return {"requests": out, "samples": samples, "stats": engine.stats()}

    return _spans_run(spans, main())


@pytest.mark.parametrize("knobs", [{"num_blocks": 3000}, {"num_blocks": 90, "max_num_seqs": 8},
                                   {"num_blocks": 2000, "decode_seq_ms": 0.3}])
def test_spans_and_implicit_decode_keep_the_engine_run(knobs: dict[str, Any]) -> None:
    """One engine in virtual time with submits, streams, aborts and stats reads landing
    inside spans: every request's token times and outcome and every stats sample equal
    the step-by-step engine's (``SPAN_MAX`` 1, no implicit decode)."""
    cfg = EngineConfig(**knobs)
    base = _engine_run(False, False, cfg, 7)
    assert _engine_run(True, True, cfg, 7) == base
    assert _engine_run(False, True, cfg, 7) == base
    assert any(r[2] == "abort" for r in base["requests"].values())


def test_no_finished_request_is_held_by_stale_events() -> None:
    """Once no request is implicit, no filed event is left (each holds its request: a
    long replay's memory would grow with every request finished)."""
    cfg = EngineConfig(num_blocks=4000)
    rng = random.Random(3)
    sched = Scheduler(cfg)
    for i in range(30):
        sched.add(sched.new_sequence(f"r{i}", prompt(rng, i), rng.randrange(20, 60), 0))
    t = 0
    for _ in range(10_000):
        if not sched.has_work():
            break
        plan = sched.schedule()
        t += 1000
        sched.complete(plan, t)
        if not sched.implicit_count:
            assert sched._dec.next_grow() == sched._dec.next_fill() == NEVER
    assert not sched.has_work() and sched.counters.requests == 30


@pytest.mark.parametrize("knobs", [{}, {"decode_seq_ms": 0.05, "speedup": 3.0},
                                   {"preset": "llama-3.1-8b/h100/tp1"}])  # fmt: skip
def test_span_step_times_equal_step_ns_for_ranges_and_arrays(knobs: dict[str, Any]) -> None:
    """A span's step times (``cost.decode_steps_ns``: scalar inlined for short spans, numpy
    for long ones, a range or an array of KV tokens) are ``step_ns``'s, to the ns."""
    import numpy as np

    from workbench.sim import cost

    cfg = EngineConfig(**knobs)
    rng = random.Random(3)
    for _ in range(400):
        n, kv0, k = rng.randint(1, 400), rng.randint(0, 3_000_000), rng.randint(2, 80)
        kv = range(kv0 + n, kv0 + k * n, n)
        want = [cost.step_ns(cfg, 0, n, v) for v in kv]
        assert cost.decode_steps_ns(cfg, n, kv) == want
        assert cost.decode_steps_ns(cfg, n, np.arange(1, k, dtype=np.int64) * n + kv0) == want


@pytest.mark.parametrize("knobs", [{}, {"decode_seq_ms": 0.05, "speedup": 3.0},
                                   {"decode_coeffs": (3.25, -1.1, 0.7), "decode_floor_ms": 2.5,
                                    "num_blocks": 100},
                                   {"zero_cost": True},
                                   {"preset": "llama-3.1-8b/h100/tp1"}])  # fmt: skip
def test_bound_decode_step_and_span_ends_equal_the_unbound_ones(knobs: dict[str, Any]) -> None:
    """``cost.decode_step`` / ``cost.span_ends`` (the config's constants bound once, what
    an engine calls per step) give ``step_ns`` / ``decode_span_ends`` to the ns, with the
    KV tokens past the capacity too, and no decoder a zero-length step."""
    from workbench.sim import cost

    cfg = EngineConfig(**knobs)
    step, ends = cost.decode_step(cfg), cost.span_ends(cfg)
    rng = random.Random(5)
    for _ in range(400):
        n, kv = rng.randint(0, 400), rng.randint(0, 3 * cfg.capacity_tokens)
        assert step(n, kv) == cost.step_ns(cfg, 0, n, kv)
        k, end = rng.randint(1, 60), rng.randint(0, 10**12)
        assert ends(n, kv, k, end) == cost.decode_span_ends(cfg, n, kv, k, end)


def _cluster_run(spans: bool, implicit: bool, knobs: dict[str, Any], seed: int
                 ) -> tuple[dict[str, Any], int, int]:  # fmt: skip
    """Requests over virtual time to a 3-worker prefix-aware cluster (shared prefixes, so
    the router's picks read the workers' hash indexes and loads mid-span); some streamed,
    some aborted. Returned: each request's worker, times, hit and outcome, the stats, and
    how many real steps ran (``Engine.steps_ended``) and how many span applications took
    or committed blocks (``Scheduler.span_block_moves``), the engines' own counters (no
    patch: the compiled engine calls its scheduler natively)."""
    import asyncio

    from workbench.clock import VirtualClock, run_virtual
    from workbench.sim import engine as engine_mod
    from workbench.sim.cluster import Cluster, ClusterConfig

    rng = random.Random(seed)
    plan = [(rng.randrange(0, 4_000_000_000), i, rng.randrange(20, 400), rng.choice("wwwwsa"))
            for i in range(60)]
    counts: list[int] = []

    async def one(c: Any, at: int, i: int, n: int, how: str, out: dict) -> None:
        await asyncio.sleep(at / 1e9)
        shared = rng.randrange(0, 6) * 64  # one of six prefixes, 0-320 tokens
        prompt = [*range(shared), *range(10**6 * (i + 1), 10**6 * (i + 1) + rng.randrange(1, 200))]
        placement, req = c.submit(f"r{i}", prompt, n)
        times = await _consume(req, how, rng.randrange(1, 600) / 1e3)
        out[i] = (placement.worker, times, req.cached_tokens, req.finish_reason)

    async def main() -> dict[str, Any]:
        c = Cluster(EngineConfig(**knobs), ClusterConfig(workers=3, router="prefix-aware"),
                    VirtualClock())  # fmt: skip
        for w in c.workers:
            w._sched.implicit = implicit
        await c.start()
        out: dict[int, Any] = {}
        await asyncio.gather(*(one(c, *p, out) for p in plan))
        stats = c.stats()
        await c.stop()
        counts.extend((sum(w.steps_ended for w in c.workers),
                       sum(w._sched.span_block_moves for w in c.workers)))  # fmt: skip
        return {"requests": out, "stats": stats}

    old = engine_mod.SPAN_MAX
    engine_mod.SPAN_MAX = old if spans else 1
    try:
        got = run_virtual(main())
    finally:
        engine_mod.SPAN_MAX = old
    return got, counts[0], counts[1]


@pytest.mark.parametrize("knobs", [{"num_blocks": 4000}, {"num_blocks": 160, "max_num_seqs": 6},
                                   {"num_blocks": 700, "block_size": 4}])  # fmt: skip
def test_spans_through_fills_and_grows_keep_a_prefix_aware_cluster_run(
        knobs: dict[str, Any]) -> None:  # fmt: skip
    """A span runs through its decoders' filled and needed blocks (applied in step order
    when it is caught up; a router's reads catch it up first) and stops only before a
    request finishes or where the blocks it may need could run short: the cluster's
    picks, token times, hits and stats equal the step-by-step cluster's, and spans did
    apply blocks filled or taken."""
    base, base_steps, _ = _cluster_run(False, False, knobs, 11)
    got, got_steps, carried = _cluster_run(True, True, knobs, 11)
    assert got == base
    assert _cluster_run(False, True, knobs, 11)[0] == base
    assert carried and got_steps < base_steps
    assert any(r[3] == "abort" for r in base["requests"].values())


def _repeats_run(spans: bool, implicit: bool, num_blocks: int, seed: int) -> Any:
    """Requests of three ids (an id's output tokens, so its blocks' hashes, repeat) on a
    small cache: a request's filled blocks may duplicate a cached block an allocation
    inside the same span evicts."""
    import asyncio

    from workbench.clock import VirtualClock
    from workbench.sim import engine as engine_mod

    rng = random.Random(seed)

    async def main() -> Any:
        e = engine_mod.Engine(EngineConfig(num_blocks=num_blocks, block_size=4), VirtualClock())
        e._sched.implicit = implicit
        await e.start()
        out = {}

        async def one(k: int, n: int, at: float) -> None:
            await asyncio.sleep(at)
            r = e.submit(f"s{k}", list(range(k * 1000, k * 1000 + 10)), n)
            await r.wait()
            out[(k, at)] = (r.token_ns, r.cached_tokens)

        await asyncio.gather(*(one(rng.randrange(3), rng.randrange(10, 60), rng.random() * 2)
                               for _ in range(12)))  # fmt: skip
        stats = e.stats()
        await e.stop()
        return out, stats

    return _spans_run(spans, main())


def test_a_span_commits_its_filled_blocks_before_an_allocation_that_evicts() -> None:
    """``Scheduler.advance`` commits a span's filled blocks in one call, but before an
    allocation that evicts (it may evict a block holding a hash committed after it):
    with repeated ids on a small cache the run equals the step-by-step engine's."""
    for num_blocks in (40, 64):
        for seed in range(12):
            want = _repeats_run(False, False, num_blocks, seed)
            assert _repeats_run(True, True, num_blocks, seed) == want, (num_blocks, seed)


def test_decoders_run_equals_fill_grow_and_assign_step_by_step() -> None:
    """``Decoders.run`` (compiled, and ``PyDecoders``'s) applies a span's fills and grows
    as ``fill`` then ``grow_due`` + ``assign`` step by step with blocks from the free
    stack's top; it stops, the grows taken, where they need more than is free."""
    from array import array

    import numpy as np

    from workbench.sim.decoders import PyDecoders, new_decoders

    def build(dec: Any, rng: random.Random) -> list[Sequence]:
        seqs = []
        for r in range(12):
            co = rng.randrange(0, 200)
            cap = (co // 16 + 1 + rng.randrange(0, 2)) * 16
            nblocks = cap // 16
            seq = Sequence(f"r{r}", [], 0, 0, 0, 0)
            seq.blocks = array("q", range(10_000 * r, 10_000 * r + nblocks))
            seq.hashes = array("q", range(7_000_000 + 10_000 * r, 7_000_000 + 10_000 * r + 400))
            committed = co // 16
            dec.add(seq, seq.blocks, seq.hashes, r, co, 1000 + r, (committed + 1) * 16,
                    committed, cap)  # fmt: skip
            seqs.append(seq)
        return seqs

    def stepwise(nfree: int, stop: int) -> Any:
        rng = random.Random(4)
        dec = PyDecoders(16)
        seqs = build(dec, rng)
        free, ref = list(range(500, 500 + nfree)), {}
        fb, fh = bytearray(), bytearray()
        for e in range(stop):
            assert not dec.fill(e, fb, fh)
            k = dec.grow_due(e + 1)
            if k > len(free):
                return "short", e, k
            got = free[len(free) - k :]
            del free[len(free) - k :]
            for b in got:
                ref[b] = 1
            dec.assign(got, 0, k)
        return fb.hex(), fh.hex(), [s.blocks.tolist() for s in seqs], len(free), ref

    def ran(make: Any, nfree: int, stop: int) -> Any:
        rng = random.Random(4)
        dec = make(16)
        seqs = build(dec, rng)
        n = 500 + nfree
        free = np.zeros(n, dtype=np.int64)
        free[:nfree] = np.arange(500, n)
        ref, own, pos = (np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                         np.full(n, -1, dtype=np.int64))  # fmt: skip
        log = np.zeros(3 * n, dtype=np.int64)
        fb, fh = bytearray(), bytearray()
        at, left, head, evicted, k = dec.run(stop, fb, fh, ref.data, own.data, free.data,
                                             log.data, pos.data, nfree, 0, 0, -1, False)
        assert head == evicted == 0
        if at < stop:
            return "short", at, k
        taken = {int(b): 1 for b in np.flatnonzero(ref)}
        return fb.hex(), fh.hex(), [s.blocks.tolist() for s in seqs], left, taken

    for nfree, stop in ((800, 900), (20, 900), (0, 300), (60, 120)):
        want = stepwise(nfree, stop)
        assert ran(new_decoders, nfree, stop) == want, (nfree, stop)
        assert ran(PyDecoders, nfree, stop) == want, (nfree, stop)
    assert stepwise(20, 900)[0] == "short" and stepwise(800, 900)[0] != "short"
