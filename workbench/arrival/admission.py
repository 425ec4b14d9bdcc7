"""The admission gate: ``max_concurrency`` slots handed out strictly in trace order.

A unit holds its slot for its whole life — every round and every tool wait — and
each slot has a stable ``routing_slot`` index that the next unit inherits (the
lowest free index), usable as a routing key for DP-rank balance. Because one
dispatcher asks for slots unit by unit in file order, unit k+1 can never be
admitted before unit k, so two runs of one trace admit the same units.
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
        if self.capacity is None:
            slot = self._next_unbounded
            self._next_unbounded += 1
        else:
            while not self._free:
                self._changed.clear()
                await self._changed.wait()
            slot = heapq.heappop(self._free)
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        return slot

    def release(self, slot: int) -> None:
        self.active -= 1
        if self.capacity is not None:
            heapq.heappush(self._free, slot)
        self._changed.set()

    async def wait_all_free(self) -> None:
        while self.active:
            self._changed.clear()
            await self._changed.wait()
