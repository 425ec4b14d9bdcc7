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
import time
from collections.abc import Coroutine
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


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when every task is waiting on a timer.

    Relies on ``BaseEventLoop._ready``/``_scheduled`` (stable CPython internals
    since 3.4): before each iteration, if nothing is ready, time jumps to the
    earliest timer, so ``select`` never sleeps for real.
    """

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        ready = self._ready  # type: ignore[attr-defined]
        scheduled = self._scheduled  # type: ignore[attr-defined]
        if not ready:
            while scheduled and scheduled[0]._cancelled:  # drop dead heads, as the base does
                self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
                heapq.heappop(scheduled)._scheduled = False
            if scheduled:
                self._virtual_now = max(self._virtual_now, scheduled[0]._when)
            elif not self._stopping:  # type: ignore[attr-defined]
                raise RuntimeError(
                    "virtual-time deadlock: no task is ready and no timer is pending"
                )
        super()._run_once()  # type: ignore[misc]


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh ``VirtualTimeLoop`` (starts at t=0)."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
