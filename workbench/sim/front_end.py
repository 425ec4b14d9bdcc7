"""``Admission``: what a request spends in the server's front end before the engine sees it.

``intake_ms`` (serial, one request after another) then ``request_overhead_ms`` (fixed,
waited by all at once), in arrival order, by the virtual replay and the HTTP server alike
(docs/calibration.md).
"""

from __future__ import annotations

import asyncio

from workbench.clock import Clock
from workbench.sim.config import EngineConfig
from workbench.sim.cost import intake_ns, request_overhead_ns


class Admission:
    """FIFO front end on ``clock``: serial intake, then a fixed delay; no wait, no
    yield, when both are 0."""

    def __init__(self, config: EngineConfig, clock: Clock) -> None:
        self.wait_ns = request_overhead_ns(config)
        self.intake_ns = intake_ns(config)
        self.clock = clock
        self._free_ns = 0  # when the front end has taken in every request so far
        self._last: asyncio.Future[None] | None = None  # the latest request still waiting

    async def wait(self) -> None:
        if self.wait_ns <= 0 and self.intake_ns <= 0:
            return
        now = self.clock.now_ns()
        if self.intake_ns > 0:
            self._free_ns = max(now, self._free_ns) + self.intake_ns
            due = self._free_ns + self.wait_ns
        else:
            due = now + self.wait_ns
        before, mine = self._last, asyncio.get_running_loop().create_future()
        self._last = mine
        try:
            await self.clock.sleep_until(due)
            if before is not None:  # came earlier, so due no later: only the order is kept
                await asyncio.shield(before)
        finally:
            if not mine.done():
                mine.set_result(None)
            if self._last is mine:
                self._last = None
