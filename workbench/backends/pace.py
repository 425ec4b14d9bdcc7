"""Keep the event loop polling while a wave of streams ends together (``executor.pace_ms``;
docs/design-notes.md, "Pacing").
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

__all__ = ["DEFAULT_BUDGET_MS", "Pacer"]

#: loop time per iteration that paced work may use, when pacing is on
DEFAULT_BUDGET_MS = 1.0
#: ``auto``: responses of at least this many reads on average count as streamed
STREAMING_READS = 4.0
_EWMA = 1 / 16


class Pacer:
    """FIFO turns for per-request work, at most ~one budget of it per loop iteration: ``turn()``
    is ``None`` (go on) or a future for ``wait``; the batch released per iteration adapts."""

    __slots__ = (
        "_armed", "_auto", "_budget_ns", "_fit", "_front", "_now", "_opened",
        "_over", "_ran", "_reads", "_waiting", "active", "deferred",
    )  # fmt: skip

    def __init__(
        self,
        budget_ms: float = DEFAULT_BUDGET_MS,
        now: Callable[[], int] = time.perf_counter_ns,
        *,
        auto: bool = False,
    ) -> None:
        self._budget_ns = int(budget_ms * 1e6)
        self._now = now
        self._auto = auto
        self.active = self._budget_ns > 0  # auto: until responses turn out not to stream
        self._reads = float(STREAMING_READS * 2)  # auto: mean reads per response (EWMA)
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._front: list[asyncio.Future[None]] = []  # released too late: first in line
        self._opened: int | None = None  # when this iteration's budget opened
        self._fit = 4  # waiters released per iteration
        self._ran = self._over = 0  # released waiters that went on / went back, this iteration
        self._armed = False
        self.deferred = 0  # turns that had to wait

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._front)

    def observe(self, reads: int) -> None:
        """A response ended after ``reads`` reads; ``auto`` paces while the mean is streamed."""
        if not self._auto:
            return
        self._reads += (reads - self._reads) * _EWMA
        active = self._reads >= STREAMING_READS
        if active != self.active:
            self.active = active
            if not active:
                self._arm()  # let everyone waiting go, next iteration

    def turn(self) -> asyncio.Future[None] | None:
        """``None``: go on now. Else a future to pass to ``wait``."""
        if not self.active or (not self._waiting and not self._front and self._inside()):
            return None
        self.deferred += 1
        return self._enqueue(self._waiting)

    async def wait(self, fut: asyncio.Future[None]) -> None:
        """Wait for the turn ``turn`` handed out (FIFO, one batch per iteration)."""
        await fut
        while self.active and not self._inside():
            self._over += 1
            await self._enqueue(self._front)
        self._ran += 1

    def _inside(self) -> bool:
        """Open this iteration's budget if nobody has; True while it lasts."""
        now = self._now()
        if self._opened is None:
            self._opened = now
            self._arm()
            return True
        return now - self._opened < self._budget_ns

    def _enqueue(
        self, line: deque[asyncio.Future[None]] | list[asyncio.Future[None]]
    ) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        line.append(fut)
        self._arm()
        return fut

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_iteration)

    def _next_iteration(self) -> None:
        """Runs one iteration after it was armed (the loop has polled since)."""
        self._armed = False
        self._opened = None
        if self._over:
            self._fit = max(1, self._ran)
        elif self._ran >= self._fit:
            self._fit = min(2 * self._fit, 4096)
        self._ran = self._over = 0
        if self._front:
            self._waiting.extendleft(reversed(self._front))
            self._front.clear()
        waiting, released = self._waiting, 0
        fit = self._fit if self.active else len(waiting)
        while waiting and released < fit:
            fut = waiting.popleft()
            if not fut.done():  # a cancelled waiter gives its turn away
                fut.set_result(None)
                released += 1
        if waiting or released:
            self._arm()
