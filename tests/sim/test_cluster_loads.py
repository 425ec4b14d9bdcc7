"""A cluster's load board (``workbench.sim.engine.LoadBoard``): the load every worker keeps
there equals the one recomputed from its scheduler, and its span-event slot its engine's,
between any two callbacks of the loop, on every kind of event (a plan, a step end, a span
caught up by a router's read or cut by a submit or an abort, a finish, a preemption, a stop),
in the compiled engine and in its Python twin (``WORKBENCH_COMPILED=0``, a child process as
``test_sim_compiled_twin`` runs it); and what the router read there is what every worker's
``load()`` gives (docs/virtual-time.md, "Spans")."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.twin import in_child
from workbench.clock import VirtualClock, VirtualTimeLoop
from workbench.sim import decoders, kvindex
from workbench.sim.cluster import Cluster, ClusterConfig, DisaggConfig
from workbench.sim.config import EngineConfig
from workbench.sim.dp import DPWorker
from workbench.sim.engine import Engine

CASES: dict[str, dict[str, Any]] = {  # cluster knobs; every engine is tight (preempting)
    "prefix-aware": {"workers": 3, "router": "prefix-aware"},
    "least-loaded": {"workers": 3, "router": "least-loaded"},
    "session-affinity": {"workers": 2, "router": "session-affinity"},
    "disagg": {"router": "prefix-aware", "disagg": DisaggConfig(prefill=2, decode=2)},
    "dp": {"workers": 2, "router": "prefix-aware", "dp": 2},
    "host-tier": {"workers": 2, "router": "prefix-aware"},
}
HOST_TIER = {"host_kv_gb": 0.05, "host_kv_gbps": 20.0}  # the "host-tier" case's engines


class CheckedLoop(VirtualTimeLoop):
    """A virtual-time loop that runs ``check`` after every callback it runs (task steps,
    futures' callbacks, timers, engine steps): every moment another callback can see."""

    def __init__(self, check: Callable[[], None]) -> None:
        super().__init__()
        self.check = check

    def _checked(self, callback: Callable[..., Any], *args: Any) -> Any:
        out = callback(*args)
        self.check()
        return out

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:  # type: ignore[override]
        return super().call_soon(self._checked, callback, *args, context=context)

    def call_at(self, when: float, callback: Any, *args: Any,  # type: ignore[override]
                context: Any = None) -> asyncio.TimerHandle:  # fmt: skip
        return super().call_at(when, self._checked, callback, *args, context=context)

    def call_step_at(self, when_ns: int, callback: Callable[[], bool]) -> Any:
        return super().call_step_at(when_ns, lambda: self._checked(callback))


def _recomputed(w: Engine | DPWorker) -> tuple[int, int, float]:
    """The worker's load from its scheduler(s) as they are (no span caught up)."""
    if isinstance(w, DPWorker):
        return w.load()
    s = w._sched
    return len(s.running), len(s.waiting), s.kv.usage


def drive(name: str, seed: int) -> dict[str, Any]:
    """Requests of a few sessions (shared prefixes) arriving over time on a tight cluster;
    some are streamed (watched), some aborted midway. Returned: every placement and
    outcome, the engines' counters, and what the checks saw."""
    rng = random.Random(seed)
    cfg = EngineConfig(block_size=16, num_blocks=72, max_num_seqs=12, max_num_batched_tokens=256,
                       **(HOST_TIER if name == "host-tier" else {}))  # fmt: skip
    seen = {"checks": 0, "bad": [], "span_events": 0, "reads": 0}
    cluster: Cluster | None = None

    def check() -> None:
        if cluster is None:
            return
        seen["checks"] += 1
        board = cluster._board
        for i, w in enumerate(cluster.workers):
            want = _recomputed(w)
            event = w._event_s if isinstance(w, Engine) else float("inf")
            if board.loads[i] != want or board.events[i] != event:
                seen["bad"].append([seen["checks"], i, list(board.loads[i]), list(want),
                                    board.events[i], event])  # fmt: skip
            seen["span_events"] += event != float("inf")

    out: list[Any] = []

    async def one(c: Cluster, k: int) -> None:
        await asyncio.sleep(rng.randrange(0, 4000) / 1000)
        session = k % 7
        prompt = [session * 1000 + j for j in range(rng.randrange(20, 140))]
        prompt += [50_000 + k * 300 + j for j in range(rng.randrange(1, 120))]
        before = [w.load() for w in c.workers]  # what a router may read: the board
        seen["reads"] += 1
        if c.loads() != before:
            seen["bad"].append(["read", k])
        where, req = c.submit(f"r{k}", prompt, rng.randrange(1, 160), f"s{session}")
        mode = rng.random()
        if mode < 0.15:
            await asyncio.sleep(rng.randrange(1, 400) / 1000)
            req.abort()
        elif mode < 0.35:
            async for _ in req.batches():  # a stream: the engine wakes it every step
                pass
        else:
            await req.wait()
        out.append([k, where.worker, where.decode_worker, where.waiting, where.rank,
                    req.finish_reason, req.cached_tokens, req.token_ns])  # fmt: skip

    async def main() -> dict[str, Any]:
        nonlocal cluster
        c = Cluster(cfg, ClusterConfig(**CASES[name]), VirtualClock())
        cluster = c
        await c.start()
        try:
            await asyncio.gather(*(one(c, k) for k in range(60)))
            stats = c.stats()
        finally:
            await c.stop()
        check()  # after the stop
        return stats

    loop = CheckedLoop(check)
    try:
        stats = loop.run_until_complete(main())
    finally:
        loop.close()
    return {"requests": sorted(out), "stats": stats, "seen": seen}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_board_holds_every_load_as_recomputed(name: str) -> None:
    got = drive(name, 3)
    seen, stats = got["seen"], got["stats"]
    assert seen["bad"] == []
    assert seen["checks"] > 1000 and seen["reads"] == 60
    assert stats["preemptions"] > 0 and stats["requests_aborted"] > 0  # every kind of event
    if name != "dp":  # (attention-DP ranks step explicitly: no spans)
        assert seen["span_events"] > 0  # spans with an event ahead, caught up by reads
    if name == "host-tier":
        assert stats["host_cache_hits_tokens"] > 0  # admissions brought blocks back


@pytest.mark.parametrize("name", ["prefix-aware", "disagg", "host-tier"])
def test_the_board_holds_in_the_python_twin_and_decides_alike(name: str) -> None:
    assert kvindex.COMPILED and decoders.COMPILED  # else both sides run the twins
    here = json.loads(json.dumps(drive(name, 4)))
    there = in_child(__file__, f"drive({name!r}, 4)", compiled=False)
    assert there["seen"]["bad"] == [] and here["seen"]["bad"] == []
    assert here["requests"] == there["requests"] and here["stats"] == there["stats"]
