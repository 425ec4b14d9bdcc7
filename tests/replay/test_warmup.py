"""A warm-up that warms (docs/arrival.md): the first <= 3 rounds of the first N units,
with the tokens the measured run will send, under the run's fuse, out of the metrics."""

from __future__ import annotations

import asyncio

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))


def _cfg(target, **arrival):
    return RunConfig.from_dict({
        "trace": SESSIONS, "target": target,
        "backend": {"name": "vllm-tokens", "preflight": False},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, **arrival},
    })  # fmt: skip


async def _run(warmup, **arrival):
    async with serve_sim(zero_cost=True) as sim:  # a fresh engine: a cold cache
        async with asyncio.timeout(60):
            return await run_async(_cfg(sim.base_url, warmup=warmup, **arrival))


async def test_warmup_primes_the_cache_the_measured_first_rounds_hit():
    cold = await _run(0)
    warm = await _run(2)
    first = {r.unit_ordinal: r for r in cold.records if r.round_idx == 0}
    assert [first[k].cached_tokens for k in (0, 1)] == [0, 0]  # nothing before them
    measured = {(r.unit_ordinal, r.round_idx): r for r in warm.records if not r.warmup}
    warmed = {(r.unit_ordinal, r.round_idx): r for r in warm.records if r.warmup}
    for k in (0, 1):
        assert measured[(k, 0)].cached_tokens > 0, measured[(k, 0)]
    # the very tokens, round after round: every block hash of every warmed prompt is the
    # measured one's (later rounds carry the server's output, the same for the same request)
    assert warmed and all(
        warmed[key].extra["input_sequence_hashes"] == measured[key].extra["input_sequence_hashes"]
        and warmed[key].sent_prompt_tokens == measured[key].sent_prompt_tokens
        for key in warmed)
    # units past the first N were not warmed: their first rounds start cold
    assert all(r.cached_tokens == 0 for r in warm.records
               if not r.warmup and r.round_idx == 0 and r.unit_ordinal >= 2)
    n_units = len({r.unit_ordinal for r in cold.records})
    rounds = {k: sum(1 for r in cold.records if r.unit_ordinal == k) for k in range(n_units)}
    expect = sum(min(3, rounds[k]) for k in (0, 1))
    assert sorted(warmed) == sorted(
        (k, i) for k in (0, 1) for i in range(min(3, rounds[k])))
    # out of the metrics, and the summary says what it did
    s = summarize(warm)
    assert s["requests"] == len(cold.records) == len(measured)
    report = s["warmup"]
    assert report["units"] == 2 and report["rounds"] == expect
    assert report["requests"] == expect and report["ok"] == expect and report["failed"] == 0
    assert report["duration_s"] > 0 and report["stopped"] is None
    assert warm.manifest.warmup == report
    assert "warmup" not in summarize(cold)


async def test_the_fuse_bounds_the_warmup():
    async with serve_sim(zero_cost=True, stall_after_tokens=1, stall_s=30.0) as sim:
        cfg = _cfg(sim.base_url, warmup=1, fuse_s=0.5)
        async with asyncio.timeout(20):
            result = await run_async(cfg)
    assert result.cancelled and result.manifest.stop_reason == "fuse"
    assert all(r.warmup for r in result.records)  # no measured request was sent
    report = result.manifest.warmup
    assert report["stopped"] == "fuse" and report["failed"] == report["requests"] >= 1
