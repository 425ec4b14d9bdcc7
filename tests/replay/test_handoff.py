"""Admission queue and slot hand-off: a finishing unit starts the next due unit itself."""

import asyncio
import itertools

import pytest
from transport_wrap import Wrapped

from workbench.backends import BACKENDS
from workbench.backends.transport import Transport, TransportOptions
from workbench.clock import WallClock
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool
from workbench.records import Unit
from workbench.replay.admission import AdmissionGate
from workbench.replay.plan import UnitPlan, build_plan
from workbench.replay.prepare import load_workload
from workbench.replay.queue import AdmissionQueue
from workbench.replay.runner import Runner
from workbench.sim.server import serve_sim

MS = 1_000_000


def _units(offsets_ms):
    return tuple(
        UnitPlan(i, Unit(str(i), "independent", off, ()), off, ())
        for i, off in enumerate(offsets_ms)
    )


def test_queue_released_is_scheduled_or_the_previous_admission():
    q = AdmissionQueue(_units([0, 10, 10, 50]), t0_ns=1000, closed_loop=False, loops=False)
    w = q.peek()
    assert w.scheduled_ns == 1000 and q.due(w, 1000) and not q.due(q.peek(), 999)
    assert q.pop(now_ns=1000) == 1000
    w = q.peek()
    assert w.plan.ordinal == 1 and w.scheduled_ns == 1000 + 10 * MS
    # admitted late (waited for a slot): released when it was due
    assert q.pop(now_ns=1000 + 30 * MS) == 1000 + 10 * MS
    # due at 10 ms too, but reached the head only when unit 1 was admitted (30 ms)
    assert q.pop(now_ns=1000 + 40 * MS) == 1000 + 30 * MS
    assert q.pop(now_ns=1000 + 60 * MS) == 1000 + 50 * MS
    assert q.peek() is None


def test_closed_loop_queue_repeats_the_units_only_when_looping():
    once = AdmissionQueue(_units([5, 7]), t0_ns=0, closed_loop=True, loops=False)
    assert [(once.peek().plan.ordinal, once.pop(3)) for _ in range(2)] == [(0, 3), (1, 3)]
    assert once.peek() is None
    looped = AdmissionQueue(_units([5, 7]), t0_ns=0, closed_loop=True, loops=True)
    seen = []
    for t in range(5):
        w = looped.peek()
        assert w.scheduled_ns is None and looped.due(w, 0)
        seen.append((w.plan.ordinal, w.loop_idx))
        looped.pop(t)
    assert seen == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]


async def test_gate_try_acquire_and_full():
    gate = AdmissionGate(2)
    assert not gate.full
    assert [gate.try_acquire(), gate.try_acquire(), gate.try_acquire()] == [0, 1, None]
    assert gate.full
    gate.release(1)
    assert not gate.full and gate.try_acquire() == 1
    assert not AdmissionGate(None).full


class TaskSpy(Wrapped):
    """The real transport, noting which asyncio task sent each request."""

    def __init__(self, inner):
        super().__init__(inner)
        self.task_of = {}

    async def send(self, codec, req, rec):
        self.task_of[req.request_id] = asyncio.current_task()
        return await self.inner.send(codec, req, rec)


async def _run(tmp_path, n, concurrency):
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n"
                     + "".join(f"r{i},0,64,4\n" for i in range(n)))  # fmt: skip
    async with serve_sim(speedup=50.0) as sim:
        cfg = RunConfig.from_dict({
            "trace": {"path": str(trace), "format": "independent"},
            "arrival": {"mode": "saturated", "max_concurrency": concurrency},
            "backend": "openai", "target": sim.base_url,
        })  # fmt: skip
        plan = build_plan(cfg, load_workload(cfg))
        records, life = [], []
        async with Transport(TransportOptions(sim.base_url)) as transport:
            spy = TaskSpy(transport)
            runner = Runner(cfg, plan, run_id="h", codec=BACKENDS.get("openai"), sender=spy,
                            clock=WallClock(), pool=TokenPool(), sink=records.append,
                            lifecycle_sink=life.append)  # fmt: skip
            async with asyncio.timeout(60):
                await runner.execute()
    return records, life, spy, runner


async def test_a_freed_slot_goes_to_the_next_unit_in_the_same_task(tmp_path):
    records, life, spy, runner = await _run(tmp_path, n=12, concurrency=2)
    assert len(records) == 12 and all(r.status == "ok" for r in records)
    # two slots, two tasks: every later unit was started by the unit whose slot it took
    assert len(set(spy.task_of.values())) == 2
    # still file order, lowest-free slots, a slot never held by two units at once
    by_admit = sorted(life, key=lambda d: d["admitted_ns"])
    assert [d["unit_ordinal"] for d in by_admit] == list(range(12))
    by_slot = {}
    for d in life:
        by_slot.setdefault(d["routing_slot"], []).append((d["admitted_ns"], d["end_ns"]))
    assert set(by_slot) == {0, 1}
    for spans in by_slot.values():
        for (_, end), (start, _) in itertools.pairwise(sorted(spans)):
            assert start >= end
    assert runner.gate.peak_active == 2 and runner.gate.active == 0
    assert runner.pool._cursors == {}  # every ended unit's token cursor was dropped
    assert len(runner.measure.lags_ns) == 12


@pytest.mark.parametrize("concurrency", [None, 20])
async def test_no_hand_off_while_slots_are_free(tmp_path, concurrency):
    records, life, spy, _ = await _run(tmp_path, n=6, concurrency=concurrency)
    assert len(records) == 6
    assert len(set(spy.task_of.values())) == 6  # each unit admitted by the dispatcher
    assert sorted(d["routing_slot"] for d in life) == list(range(6))


def test_a_fast_server_sees_no_more_connections_than_the_concurrency(tmp_path):
    """Against a zero-cost engine in its own process (answers come back while the client
    is still busy), a slot's next request reuses the slot's connection: the server
    sees ``max_concurrency`` client connections (plus the warm-up ones, which the
    run reuses), not one more per wave."""
    import json
    import subprocess
    import sys
    import urllib.request

    from workbench.executors.dispatch import run

    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n"
                     + "".join(f"r{i},0,256,8\n" for i in range(256)))  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sim", "serve", "--zero-cost"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = proc.stdout.readline().split()[-1]
        result = run({
            "trace": {"path": str(trace), "format": "independent"},
            "arrival": {"mode": "saturated", "max_concurrency": 32},
            "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
            "target": url,
        })  # fmt: skip
        with urllib.request.urlopen(url + "/debug/requests", timeout=10) as resp:
            rows = json.loads(resp.read())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert sum(r.status == "ok" for r in result.records) == 256
    peers = {r["peer"] for r in rows}
    assert len(rows) == 256 and len(peers) <= 32
