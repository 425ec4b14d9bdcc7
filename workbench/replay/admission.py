"""The admission gate: ``max_concurrency`` slots handed out strictly in release order.

A unit holds its slot (a stable ``routing_slot``, the lowest free index) for its whole
life, tool waits included (docs/arrival.md).
"""

from __future__ import annotations

import asyncio
import heapq


class AdmissionGate:
    """``None`` capacity means no cap (every unit admitted at once, slot = ordinal)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self._free: list[int] = list(range(capacity)) if capacity else []
        self._changed = asyncio.Event()
        self._next_unbounded = 0
        self.active = 0
        self.peak_active = 0

    async def acquire(self) -> int:
        """Wait for a slot and return its routing index (call from one dispatcher only)."""
        while (slot := self.try_acquire()) is None:
            await self.changed()
        return slot

    def try_acquire(self) -> int | None:
        """The lowest free slot now, or ``None`` when all are taken."""
        if self.capacity is None:
            slot = self._next_unbounded
            self._next_unbounded += 1
        elif self._free:
            slot = heapq.heappop(self._free)
        else:
            return None
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        return slot

    @property
    def full(self) -> bool:
        """No free slot: a slot being given up would be the lowest free one."""
        return self.capacity is not None and not self._free

    async def changed(self) -> None:
        """Wait for the next ``release``."""
        self._changed.clear()
        await self._changed.wait()

    def release(self, slot: int) -> None:
        self.active -= 1
        if self.capacity is not None:
            heapq.heappush(self._free, slot)
        self._changed.set()
