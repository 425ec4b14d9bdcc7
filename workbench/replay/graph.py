"""Session graphs at replay time (docs/session-graphs.md): a child's run when its
trigger fires (``child_run``, ``wait_sent``), its parent's joins (``join``,
``join_all``: an agent task holds its slot until its last unit ends), and
``StreamCap`` (``arrival.max_streams``, FIFO)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from workbench.clock import Clock
from workbench.replay.plan import ChildPlan
from workbench.replay.rounds import UnitRun

NS_PER_MS = 1_000_000


def child_run(parent: UnitRun, cp: ChildPlan, now_ns: int, tool_wait_scale: float) -> UnitRun:
    """The run of child ``cp`` of ``parent``, its trigger having fired at ``now_ns``."""
    due = now_ns + round(cp.spawn.delay_ms * tool_wait_scale * NS_PER_MS)
    return UnitRun(
        cp.plan, parent.loop_idx, parent.routing_slot, now_ns, now_ns,
        scheduled_ns=due, warmup=parent.warmup, ready_ns=due,
        parent_id=parent.plan.unit.unit_id, task_id=parent.task_id or parent.plan.unit.unit_id,
    )  # fmt: skip


class RoundSent:
    """When a round's request went out (``WireRequest.on_sent``, again on a retry), for its
    ``round_start`` children; a round never sent is ``settle``d when it ends."""

    __slots__ = ("event", "ns")

    def __init__(self) -> None:
        self.ns: int | None = None
        self.event = asyncio.Event()

    def __call__(self, t: int) -> None:
        self.ns = t
        self.event.set()

    def settle(self, t: int) -> None:
        if self.ns is None:
            self(t)


async def wait_sent(run: UnitRun, sent: RoundSent, delay_ns: int, clock: Clock) -> None:
    """Hold the child ``run`` until ``delay_ns`` after its parent's round request (last)
    went out; its release and schedule then say when the trigger fired and was due."""
    while True:
        if sent.ns is None:
            await sent.event.wait()
        assert sent.ns is not None
        fired = sent.ns
        due = fired + delay_ns
        if due > clock.now_ns():
            await clock.sleep_until(due)
        if sent.ns == fired:
            break
    run.released_ns, run.scheduled_ns = fired, due
    run.ready_ns = max(run.ready_ns, due)


async def join(run: UnitRun, k: int | None) -> bool:
    """Wait for the children round ``k`` of ``run`` joins; True when one had not ended."""
    pending = [t for t in run.offspring.pop(k, ()) if not t.done()]
    if pending:
        await asyncio.wait(pending)
    return bool(pending)


async def join_all(run: UnitRun) -> None:
    """Wait for every child ``run`` started (joined by a round or not)."""
    while run.offspring:
        await join(run, next(reversed(run.offspring)))


def record_fields(run: UnitRun, k: int | None = None) -> dict[str, Any]:
    """What a graph unit's request carries in ``extra``; a child's first request also its
    ``spawn`` (the Dynamo export's dependency edge)."""
    out: dict[str, Any] = {"task_id": run.task_id, "parent_unit_id": run.parent_id,
                           "depth": run.plan.depth}
    sp = run.plan.unit.spawn
    if k == 0 and sp is not None and run.parent_id is not None:
        out["spawn"] = {"parent_round": sp.round_idx, "trigger": sp.trigger,
                        "delay_ms": (run.scheduled_ns - run.released_ns) / NS_PER_MS,
                        "join_round": sp.join_round}
    return out


class StreamCap:
    """At most ``cap`` requests in flight (``None``: no cap), FIFO: ``release`` hands a freed
    stream straight to the longest waiter. ``peak``: the most in flight at once."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.active = 0
        self.peak = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> bool:
        """Take a stream; True when it had to wait for one."""
        if self.cap is None or (self.active < self.cap and not self._waiters):
            self._take()
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut  # the stream is handed over with the result (``release``)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted as it was cancelled: pass it on
            else:
                self._waiters.remove(fut)
            raise
        return True

    def _take(self) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the stream changes hands; ``active`` stays
                return
        self.active -= 1
