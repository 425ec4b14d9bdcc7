"""A real transport wrapped by a test to watch what it sends (tests/replay/): every
attribute the runner reads passes through; a subclass overrides ``send`` and calls
``self.inner.send``."""

from __future__ import annotations

from typing import Any


class Wrapped:
    """The runner's view of ``inner``, unchanged: no segments, no pacing."""

    takes_segments = False
    paced_turns = 0
    resent_stale = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def after_done(self) -> Any:
        return self.inner.after_done

    async def send(self, codec: Any, req: Any, rec: Any) -> Any:
        return await self.inner.send(codec, req, rec)
