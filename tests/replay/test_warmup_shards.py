"""QA: ``warmup N`` with ``executor.workers > 1`` warms the run's first N units, not N a shard.

Found by the independent check: every shard worker got the run's ``arrival.warmup``
and warmed the first N units of its own share, so ``workers: 2, warmup: 1`` warmed
two units and ``warmup: 2`` three (of three); the summary said so, the docs say N.
"""

from __future__ import annotations

import asyncio

import pytest

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.replay.shards import warmup_shares
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_large.csv"))  # 48 sessions, trace-timed


def test_warmup_shares_follow_the_round_robin_of_release_order():
    # shard k gets the units at release positions k, k + n, ...: of the first N, ceil((N-k)/n)
    assert warmup_shares(0, 2) == [0, 0]
    assert warmup_shares(1, 2) == [1, 0]
    assert warmup_shares(3, 2) == [2, 1]
    assert warmup_shares(5, 3) == [2, 2, 1]
    assert sum(warmup_shares(7, 4)) == 7


@pytest.mark.parametrize(("warmup", "cap"), [(1, None), (3, 4)])
async def test_sharded_warmup_warms_the_first_n_units_in_release_order(warmup, cap, tmp_path):
    async with serve_sim(zero_cost=True) as sim:
        cfg = RunConfig.from_dict({
            "trace": {"path": SESSIONS, "max_items": 6}, "target": sim.base_url,
            "backend": {"name": "openai", "preflight": False},
            "arrival": {"mode": "trace-timed", "rate": 50.0, "tool_wait_scale": 0.0,
                        "warmup": warmup, "max_concurrency": cap},
            "executor": {"workers": 2}, "out_dir": str(tmp_path),
        })  # fmt: skip
        async with asyncio.timeout(120):
            result = await run_async(cfg)
    warmed = {r.unit_ordinal for r in result.records if r.warmup}
    assert warmed == set(range(warmup))  # this trace lists its sessions in arrival order
    assert summarize(result)["warmup"]["units"] == warmup
    assert result.manifest.warmup["units"] == warmup
    assert result.manifest.status == "completed"
