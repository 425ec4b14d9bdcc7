"""Clocks: the wall clock of a live replay and the virtual clock of ``simulate``, an
asyncio event loop whose time jumps to the next timer when nothing is ready (with the
engine's steps as ``call_step_at``; docs/virtual-time.md).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import selectors
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from mypy_extensions import mypyc_attr

T = TypeVar("T")


class Clock(Protocol):
    """What the runner and the engine need from time."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # subclassed (tests, users)
class WallClock:
    """``time.perf_counter_ns`` with asyncio sleeps (live replays, the HTTP engine)."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep_until(self, t_ns: int) -> None:
        await asyncio.sleep((t_ns - time.perf_counter_ns()) / 1e9)  # <= 0: yields once


class VirtualClock:
    """Reads the running loop's virtual time, bound to the ``VirtualTimeLoop`` it is made in
    (docs/virtual-time.md, "What a virtual replay costs")."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: VirtualTimeLoop | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if isinstance(loop, VirtualTimeLoop):
            self._loop = loop

    def bind(self, loop: VirtualTimeLoop) -> None:
        """Read ``loop``'s time from now on (``Engine.start``: a clock made before its loop
        ran would otherwise look the running loop up at every read)."""
        self._loop = loop

    def _running(self) -> asyncio.AbstractEventLoop:
        return self._loop or asyncio.get_running_loop()

    def now_ns(self) -> int:
        return round(self._running().time() * 1e9)

    async def sleep_until(self, t_ns: int) -> None:
        loop = self._running()
        fut: asyncio.Future[None] = loop.create_future()
        loop.call_at(t_ns / 1e9, _set_done, fut)
        await fut


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


#: loop iterations between two polls of the real selector while the loop's wake-up pipe
#: is all it watches (docs/virtual-time.md, "What a virtual replay costs": the wake-up pipe)
WAKEUP_POLL_EVERY = 64


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never sleeps: where asyncio would wait (``timeout`` > 0 or None),
    ``VirtualTimeLoop._advance`` runs the steps due and moves the clock instead; the real
    selector underneath is only polled (the loop's wake-up pipe still works). While that
    pipe is the only file registered (the first one, the loop's own), it is polled every
    ``WAKEUP_POLL_EVERY`` iterations, not at each (a system call an iteration was ~4 %
    of a 64-worker run): what it carries is a signal for a handler added with
    ``add_signal_handler``, run that many iterations later at most (a thread's
    ``call_soon_threadsafe`` is queued without it). With any other file registered
    (a socket, a pipe), every iteration polls, as before."""

    def __init__(self, loop_clock: VirtualTimeLoop) -> None:
        self._selector = selectors.DefaultSelector()
        self._loop = loop_clock
        self._files = 0  # registered now
        self._skip = 0  # iterations left before the next poll

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self._selector.register(fileobj, events, data)
        self._files += 1
        self._skip = 0
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = self._selector.unregister(fileobj)
        self._files -= 1
        return key

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            self._loop._advance(timer_pending=timeout is not None)
        if self._files <= 1:  # the wake-up pipe alone
            if self._skip > 0:
                self._skip -= 1
                return []
            self._skip = WAKEUP_POLL_EVERY - 1
        return self._selector.select(0)

    def close(self) -> None:
        self._selector.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._selector.get_map()


class StepHandle:
    """A step registered with ``VirtualTimeLoop.call_step_at``; ``cancel()`` drops it."""

    __slots__ = ("_callback", "_cancelled", "when_ns")

    def __init__(self, when_ns: int, callback: Callable[[], bool]) -> None:
        self.when_ns = when_ns
        self._callback = callback
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True


@mypyc_attr(allow_interpreted_subclasses=True)  # subclassed (tests, users)
class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when every task is waiting on a timer (public
    API only: a heap of the timers it handed out, ``call_at``; steps in a second heap)."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_seq = 0
        self._steps: list[tuple[int, int, StepHandle]] = []
        self._step_seq = 0
        #: the instant (ns) whose due steps ran last (``Engine._catch_up``)
        self.stepped_at_ns = -1
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

    def call_step_at(self, when_ns: int, callback: Callable[[], bool]) -> StepHandle:
        """Run ``callback()`` at virtual time ``when_ns`` (integer ns) when the loop would
        otherwise wait; it returns True when it woke a waiter (docs/virtual-time.md)."""
        if when_ns < self._virtual_now * 1e9 - 0.5:  # before now (ns, as ``now_ns`` rounds)
            raise ValueError(f"step deadline {when_ns} ns is in the virtual past")
        handle = StepHandle(when_ns, callback)
        self._step_seq += 1
        heapq.heappush(self._steps, (when_ns, self._step_seq, handle))
        return handle

    def _advance(self, timer_pending: bool = True) -> None:
        """Nothing is ready: run the steps due before the earliest timer (up to an instant
        whose steps woke a waiter), else move time to that timer."""
        timers, now = self._timers, self._virtual_now
        while timers and (timers[0][0] <= now or timers[0][2].cancelled()):
            heapq.heappop(timers)  # ran already, or cancelled
        if timer_pending and not timers:
            raise RuntimeError("virtual-time loop: asked to wait for a timer it never handed out")
        next_timer = timers[0][0] if timers else math.inf
        steps, pop = self._steps, heapq.heappop
        while steps:
            when_ns, _, handle = steps[0]
            if handle._cancelled:
                pop(steps)
                continue
            t = when_ns / 1e9
            if t >= next_timer:
                break
            self._virtual_now = t
            self.stepped_at_ns = when_ns
            pop(steps)
            if not steps or steps[0][0] != when_ns:  # the common case: one step now
                if handle._callback():
                    return
                continue
            due = [handle]
            while steps and steps[0][0] == when_ns:
                due.append(pop(steps)[2])
            woke = False
            for handle in due:
                if not handle._cancelled and handle._callback():
                    woke = True
            if woke:
                return
        if not timers:
            raise RuntimeError("virtual-time deadlock: no task is ready and no timer is pending")
        self._virtual_now = next_timer


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh ``VirtualTimeLoop`` (starts at t=0)."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
