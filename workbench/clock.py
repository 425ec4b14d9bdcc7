"""Clocks: the wall clock of a live replay and the virtual clock of ``simulate``.

Everything that waits or timestamps goes through a ``Clock`` so the same runner
and the same engine core run on either. The virtual clock is an asyncio event
loop whose ``time()`` jumps straight to the next timer whenever nothing is ready
to run: a discrete-event simulation that still runs ordinary coroutines, with
no sockets and no real sleeping. It is deterministic: same input, same order of
callbacks, same virtual timestamps.
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
import time
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    """What the runner and the engine need from time."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


class WallClock:
    """``time.perf_counter_ns`` with asyncio sleeps (live replays, the HTTP engine)."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep_until(self, t_ns: int) -> None:
        delay = (t_ns - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)


class VirtualClock:
    """Reads the running loop's virtual time; use inside ``run_virtual``."""

    def now_ns(self) -> int:
        return round(asyncio.get_running_loop().time() * 1e9)

    async def sleep_until(self, t_ns: int) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        loop.call_at(t_ns / 1e9, _set_done, fut)
        await fut


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never sleeps: a wait for a timer moves the loop's clock instead.

    asyncio asks its selector to wait exactly until the earliest timer when nothing
    is ready (``timeout`` > 0), forever when there is no timer at all (``None``),
    and not at all otherwise (0). Here the first case sets virtual time to that
    timer's deadline (``VirtualTimeLoop`` keeps its own heap of timers, through
    the public ``call_at``), the second is a deadlock, and the real selector
    underneath is only ever polled (the loop's own wake-up pipe still works).
    """

    def __init__(self, loop_clock: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop_clock

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("virtual-time deadlock: no task is ready and no timer is pending")
        if timeout > 0:
            self._loop._advance()
        return self._real.select(0)

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when every task is waiting on a timer.

    Public API only: the loop is given a selector that never sleeps
    (``_VirtualSelector``); whenever the loop would wait for its earliest timer,
    time jumps to that timer's deadline instead, so nothing really sleeps. The
    deadlines come from a heap of the timers this loop handed out (``call_at``,
    which ``call_later`` goes through), read with ``TimerHandle.when()`` and
    ``cancelled()``.
    """

    def __init__(self) -> None:
        self._virtual_now = 0.0
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_seq = 0
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def call_at(  # type: ignore[override]  # same signature, without the TypeVarTuple
        self, when: float, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        handle = super().call_at(when, callback, *args, context=context)
        self._timer_seq += 1
        heapq.heappush(self._timers, (handle.when(), self._timer_seq, handle))
        return handle

    def _advance(self) -> None:
        """Nothing is ready and a timer is due later: move time to the earliest live one."""
        timers, now = self._timers, self._virtual_now
        while timers and (timers[0][0] <= now or timers[0][2].cancelled()):
            heapq.heappop(timers)  # ran already, or cancelled
        if not timers:
            raise RuntimeError("virtual-time loop: asked to wait for a timer it never handed out")
        self._virtual_now = timers[0][0]


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh ``VirtualTimeLoop`` (starts at t=0)."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
