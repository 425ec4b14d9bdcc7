"""``Admission``: the fixed per-request overhead, waited before the engine sees a request.

A real server spends a fixed time on each request outside its engine's steps (the
API process parses it, hands it to the engine core, and delivers the first token),
while the engine steps other requests. ``EngineConfig.request_overhead_ms``
models it (docs/calibration.md); both senders of the embedded engine, the virtual
replay's (``executors.virtual``) and the HTTP server's (``sim.server``), wait it
here, so ``simulate`` and ``sim serve`` charge it alike. Requests leave in the
order they came (an event loop wakes equal deadlines in no set order), as a
server's front end hands them on.
"""

from __future__ import annotations

import asyncio

from workbench.clock import Clock
from workbench.sim.config import EngineConfig
from workbench.sim.cost import request_overhead_ns


class Admission:
    """FIFO delay of ``request_overhead_ns`` on ``clock``; no wait, no yield, at 0."""

    def __init__(self, config: EngineConfig, clock: Clock) -> None:
        self.wait_ns = request_overhead_ns(config)
        self.clock = clock
        self._last: asyncio.Future[None] | None = None  # the latest request still waiting

    async def wait(self) -> None:
        if self.wait_ns <= 0:
            return
        before, mine = self._last, asyncio.get_running_loop().create_future()
        self._last = mine
        try:
            await self.clock.sleep_until(self.clock.now_ns() + self.wait_ns)
            if before is not None:  # came earlier, so due no later: only the order is kept
                await asyncio.shield(before)
        finally:
            if not mine.done():
                mine.set_result(None)
            if self._last is mine:
                self._last = None
