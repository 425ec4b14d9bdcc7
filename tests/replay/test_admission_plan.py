"""Admission gate ordering/slot inheritance and the pure plan builder."""

import asyncio

from workbench.arrival.schedule import release_offsets_ms
from workbench.config import RunConfig
from workbench.records import Round, Unit, Workload
from workbench.replay.admission import AdmissionGate
from workbench.replay.plan import build_plan


async def test_gate_hands_lowest_free_slot_and_blocks_at_capacity():
    gate = AdmissionGate(2)
    assert [await gate.acquire(), await gate.acquire()] == [0, 1]
    waiter = asyncio.ensure_future(gate.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    gate.release(1)
    async with asyncio.timeout(1):
        assert await waiter == 1  # the next unit inherits the freed routing slot
    assert gate.peak_active == 2


async def test_unbounded_gate_numbers_units():
    gate = AdmissionGate(None)
    assert [await gate.acquire() for _ in range(3)] == [0, 1, 2]
    for s in range(3):
        gate.release(s)
    assert gate.active == 0


def _session(uid, arrival, rounds):
    return Unit(uid, "session", arrival, tuple(
        Round(f"{uid}-{k}", uid, k, arrival, p, i, o, tool_wait_after_ms=5)
        for k, (p, i, o) in enumerate(rounds)
    ))


WL = Workload(
    (
        _session("a", 100, [(12461, 5875, 124), (18333, 13570, 50)]),
        _session("b", 300, [(0, 512, 64), (576, 128, 64)]),
    ),
    fmt="session",
)


def test_offsets_rebased_and_rescaled():
    assert release_offsets_ms(WL.units, "trace-timed", None) == [0, 200]
    assert release_offsets_ms(WL.units, "trace-timed", 10.0) == [0, 100]
    assert release_offsets_ms(WL.units, "saturated", None) == [0, 0]


def test_plan_applies_trace_reported_by_default():
    plan = build_plan(RunConfig.from_dict({"trace": "x"}), WL)
    a, b = plan.units
    assert plan.policy == "trace-reported"
    assert (a.rounds[0].prefix_len, a.rounds[0].input_len, a.rounds[0].folded_prefix_tokens) == (
        0, 18336, 12461)
    # C after round 0 = 18336 + 124 = 18460 ≥ 18333: the reported prefix exists
    assert (a.rounds[1].prefix_len, a.rounds[1].input_len) == (18333, 13570)
    assert (b.rounds[1].prefix_len, b.rounds[1].input_len) == (576, 128)
    totals = plan.totals()
    assert totals["total_prefix_tokens"] == 18333 + 576


def test_output_policies_change_context_growth():
    cfg = RunConfig.from_dict({"trace": "x", "arrival": {"output_len": "fixed:10"}})
    plan = build_plan(cfg, WL)
    a = plan.units[0]
    assert [r.output_len for r in a.rounds] == [10, 10]
    # C = 18336 + 10 < 18333? no: 18346 ≥ 18333, prefix still exists
    assert a.rounds[1].prefix_len == 18333
    budget = build_plan(RunConfig.from_dict({"trace": "x", "arrival": {"output_len": "budget:9"}}),
                        WL)
    assert [r.output_len for r in budget.units[1].rounds] == [4, 4]
