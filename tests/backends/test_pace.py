"""The pacer: end-of-stream work past the loop iteration's budget waits, FIFO, in batches,
one batch per iteration. Time is a counter the test moves; iterations are counted
by a callback that re-arms itself each loop iteration."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from workbench.backends.pace import Pacer


class Ticks:
    """Counts loop iterations (one self-rescheduling callback) and holds fake time."""

    def __init__(self) -> None:
        self.n = 0
        self.t = 0
        self._on = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if self._on:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._on = False


async def test_budget_zero_never_defers():
    pacer = Pacer(0.0)
    assert all(pacer.turn() is None for _ in range(100))


async def test_turns_inside_the_budget_go_on_at_once():
    ticks = Ticks()
    pacer = Pacer(1.0, now=lambda: ticks.t)
    for i in range(5):
        ticks.t = i * 100_000  # 0.1 ms apart: all inside 1 ms
        assert pacer.turn() is None
    ticks.stop()


async def test_turns_past_the_budget_wait_in_order_and_go_in_batches_per_iteration():
    """Each turn's work takes 0.4 ms of (fake) time, the budget is 1 ms: at most three
    go on per iteration, the rest wait, in call order, one batch per later iteration."""
    ticks = Ticks()
    pacer = Pacer(1.0, now=lambda: ticks.t)
    for _ in range(3):
        assert pacer.turn() is None
        ticks.t += 400_000
    waits = [pacer.turn() for _ in range(10)]  # 1.2 ms in: past the budget
    assert all(w is not None for w in waits)
    assert pacer.waiting == 10 and pacer.deferred == 10

    done: list[tuple[int, int]] = []  # (which, iteration it went on in)

    async def wait(i: int, fut: asyncio.Future[None]) -> None:
        await pacer.wait(fut)
        done.append((i, ticks.n))
        ticks.t += 400_000  # this turn's work

    start = ticks.n
    await asyncio.gather(*(wait(i, w) for i, w in enumerate(waits) if w is not None))
    ticks.stop()
    assert [i for i, _ in done] == list(range(10))  # FIFO
    per_iteration: dict[int, int] = {}
    for _, it in done:
        per_iteration[it] = per_iteration.get(it, 0) + 1
    assert max(per_iteration.values()) <= 3  # never more than fits in the budget
    assert len(per_iteration) >= 4 and min(per_iteration) > start
    assert pacer.waiting == 0


def test_the_batch_grows_while_whole_batches_fit():
    """With no work per turn, every released batch fits: the batch size doubles."""

    async def main() -> list[int]:
        ticks = Ticks()
        pacer = Pacer(1.0, now=lambda: ticks.t)
        assert pacer.turn() is None
        ticks.t = 2_000_000
        waits = [pacer.turn() for _ in range(28)]
        ticks.t = 0  # time stands still from here: everything released fits
        seen: list[int] = []

        async def wait(fut: asyncio.Future[None] | None) -> None:
            assert fut is not None
            await pacer.wait(fut)
            seen.append(ticks.n)

        await asyncio.gather(*(wait(w) for w in waits))
        ticks.stop()
        return [seen.count(n) for n in sorted(set(seen))]

    assert asyncio.run(main()) == [4, 8, 16]


async def test_a_new_turn_queues_behind_waiters_even_inside_a_fresh_budget():
    ticks = Ticks()
    pacer = Pacer(1.0, now=lambda: ticks.t)
    assert pacer.turn() is None
    ticks.t = 2_000_000
    first = pacer.turn()
    assert first is not None
    ticks.t = 2_000_001  # same instant, but someone is waiting: FIFO wins
    second = pacer.turn()
    assert second is not None
    order: list[str] = []

    async def wait(name: str, fut: asyncio.Future[None]) -> None:
        await fut
        order.append(name)

    await asyncio.gather(wait("first", first), wait("second", second))
    ticks.stop()
    assert order == ["first", "second"]


async def test_a_cancelled_waiter_gives_its_turn_to_the_next():
    ticks = Ticks()
    pacer = Pacer(1.0, now=lambda: ticks.t)
    assert pacer.turn() is None
    ticks.t = 5_000_000
    a, b = pacer.turn(), pacer.turn()
    assert a is not None and b is not None
    a.cancel()
    await asyncio.wait_for(b, 5.0)  # released although a (ahead of it) was cancelled
    ticks.stop()
    assert pacer.waiting == 0


# ----------------------------------------------------------------- over loopback
async def test_a_paced_transport_defers_a_burst_and_loses_nothing():
    """64 streams at once with a budget far below one stream's work: most turns wait,
    every request still completes with all its tokens, none stamped before it was sent."""
    from workbench.backends import BACKENDS
    from workbench.backends.base import WireRequest
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.records import RequestRecord
    from workbench.sim.server import serve_sim

    async with (
        asyncio.timeout(60),
        serve_sim(speedup=100.0) as sim,
        Transport(TransportOptions(sim.base_url, pace_ms=0.001)) as t,
    ):
        await t.warm(64)

        async def one(i: int) -> RequestRecord:
            rec = RequestRecord("x", f"p-{i}", i, "s", 0, "openai", None, 0, 32, 8)
            await t.send(BACKENDS.get("openai"), WireRequest(f"p-{i}", list(range(32)), 8), rec)
            return rec

        recs = await asyncio.gather(*(one(i) for i in range(64)))
        assert t._pacer is not None and t._pacer.deferred > 0 and t._pacer.waiting == 0
    assert all(r.status == "ok" for r in recs), [r.error for r in recs if r.status != "ok"]
    assert all(r.completion_tokens == 8 and sum(r.token_counts) == 8 for r in recs)
    assert all(r.dispatch_ns < r.token_times_ns[0] <= r.end_ns for r in recs)


async def test_pace_ms_from_the_config_reaches_the_transport_and_the_run_is_whole(tmp_path):
    from workbench.backends.transport import TransportOptions
    from workbench.config import RunConfig
    from workbench.data import path as data_path
    from workbench.executors.dispatch import run_async
    from workbench.sim.server import serve_sim

    trace = str(data_path("tracelab/multi_session_example.csv"))

    def cfg(pace: float, url: str) -> RunConfig:
        return RunConfig.from_dict({
            "trace": trace, "target": {"url": url}, "out_dir": str(tmp_path / str(pace)),
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.01, "max_concurrency": 8},
            "executor": {"pace_ms": pace},
        })  # fmt: skip

    assert TransportOptions.of_run(cfg(0.5, "http://x"), "http://x").pace_ms == 0.5
    async with serve_sim(speedup=200.0) as sim:
        plain = await run_async(cfg(0.0, sim.base_url))
        paced = await run_async(cfg(0.001, sim.base_url))
    assert [r.status for r in plain.records] == ["ok"] * len(plain.records)
    assert [r.status for r in paced.records] == ["ok"] * len(plain.records)

    def client(result) -> dict:
        return orjson.loads((Path(result.run_dir) / "summary.json").read_bytes())["client"]

    assert client(plain)["paced_turns"] == 0  # pace_ms 0: no pacer at all
    assert client(paced)["paced_turns"] > 0  # the run says how often sends waited
    assert sorted(r.request_id for r in paced.records) == sorted(
        r.request_id for r in plain.records
    )


def test_pace_ms_is_auto_or_a_non_negative_number():
    import pytest

    from workbench.config import RunConfig
    from workbench.errors import ConfigError

    assert RunConfig.from_dict({"trace": "x.csv"}).executor.pace_ms == "auto"
    for good in (0, 0.5, 2, "auto"):
        assert (
            RunConfig.from_dict({"trace": "x", "executor": {"pace_ms": good}}).executor.pace_ms
            == good
        )
    for bad in (-1, "1", True, "on"):
        msg = r"executor\.pace_ms: expected a finite number in \[0, 1000\] or 'auto'"
        with pytest.raises(ConfigError, match=msg):
            RunConfig.from_dict({"trace": "x.csv", "executor": {"pace_ms": bad}})


async def test_auto_stands_aside_while_responses_arrive_whole_and_lets_waiters_go():
    ticks = Ticks()
    pacer = Pacer(1.0, now=lambda: ticks.t, auto=True)
    assert pacer.active  # LLM servers stream: on until shown otherwise
    assert pacer.turn() is None
    ticks.t = 5_000_000
    waiting = pacer.turn()
    assert waiting is not None
    for _ in range(64):  # responses of one read each (an instant server)
        pacer.observe(1)
    assert not pacer.active
    await asyncio.wait_for(pacer.wait(waiting), 5.0)  # released at once, no budget check
    assert all(pacer.turn() is None for _ in range(100))  # nothing deferred any more
    for _ in range(64):  # streamed responses again
        pacer.observe(65)
    assert pacer.active
    ticks.t = 50_000_000
    assert pacer.turn() is None  # a fresh iteration's budget
    ticks.t = 52_000_000
    assert pacer.turn() is not None
    ticks.stop()


def test_a_fixed_budget_ignores_what_responses_look_like():
    pacer = Pacer(1.0)
    for _ in range(100):
        pacer.observe(1)
    assert pacer.active
    assert not Pacer(0.0).active


async def test_a_request_cancelled_while_waiting_its_end_turn_stays_ok():
    """The end-of-request turn comes after the record is whole: cancelling the run
    while a finished request waits there must not relabel it as cancelled."""
    from test_transport import GOOD, LIMIT, REQ, Script, record, serve

    from workbench.backends import BACKENDS
    from workbench.backends.transport import Transport, TransportOptions

    class HoldTheEndTurn:
        """A pacer that lets the send go and holds the end-of-request turn forever."""

        def __init__(self) -> None:
            self.turns = 0
            self.held = asyncio.Event()

        def observe(self, reads: int) -> None:
            pass

        def turn(self):
            self.turns += 1
            return None if self.turns == 1 else asyncio.get_running_loop().create_future()

        async def wait(self, fut):
            self.held.set()
            await fut

    async with (
        asyncio.timeout(LIMIT),
        serve(Script(GOOD), "/v1/completions") as url,
        Transport(TransportOptions(base_url=url)) as transport,
    ):
        pacer = transport._pacer = HoldTheEndTurn()
        rec = record()
        task = asyncio.ensure_future(transport.send(BACKENDS.get("openai"), REQ, rec))
        await pacer.held.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.status == "ok" and rec.error is None
    assert rec.completion_tokens == 4 and sum(rec.token_counts) == 4
