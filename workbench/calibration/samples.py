"""What calibration reads of a measured request: ``Sample`` and ``read_samples(records)``.

Times stay in nanoseconds on the run's clock; ``first_delivered_late`` marks a
stream whose tokens all came in one burst, whose first-token time is the
response's end rather than when the engine made the token (docs/calibration.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.records import RequestRecord

NS_PER_MS = 1e6
LATE_SHARE = 0.01  # a stream whose tokens all came within 1 % of its TTFT came in one burst


@dataclass
class Sample:
    """What calibration reads of one ok request (times in ns on its run's clock)."""

    dispatch: int
    first: int
    end: int
    times: np.ndarray  # token event times
    counts: np.ndarray  # tokens per event
    prompt: int
    cached: int
    request_id: str = ""

    @property
    def first_delivered_late(self) -> bool:
        """The first token arrived with all the others (a stream of several tokens read
        in one burst): its time is the response's end, not when the engine made it."""
        span = int(self.times[-1] - self.first)
        return self.times.size > 1 and span < LATE_SHARE * (self.first - self.dispatch)

    @property
    def ttft_ms(self) -> float:
        return (self.first - self.dispatch) / NS_PER_MS


def read_samples(records: Sequence[RequestRecord]) -> list[Sample]:
    """One ``Sample`` per ok request with a dispatch time, token times and a prompt size."""
    out = []
    for r in records:
        if r.status != "ok" or r.dispatch_ns is None or not r.token_times_ns:
            continue
        if r.prompt_tokens is None:
            continue
        out.append(Sample(
            r.dispatch_ns, r.token_times_ns[0], r.end_ns or r.token_times_ns[-1],
            np.asarray(r.token_times_ns, dtype=np.int64),
            np.asarray(r.token_counts or [1] * len(r.token_times_ns), dtype=np.int64),
            int(r.prompt_tokens), int(r.cached_tokens or 0), r.request_id,
        ))  # fmt: skip
    return out


def overlapped(ss: Sequence[Sample]) -> list[bool]:
    """For each request: was another in flight between its dispatch and its first token?"""
    return [
        any(j != i and y.dispatch < x.first and y.end > x.dispatch for j, y in enumerate(ss))
        for i, x in enumerate(ss)
    ]


def joined(ss: Sequence[Sample]) -> list[bool]:
    """For each request: did it join a running batch, i.e. was another request of its run
    decoding (between its first and last token) when it was dispatched? The others came
    while nothing decoded: alone, or queued with the first wave (docs/calibration.md)."""
    return [any(j != i and y.first <= x.dispatch < y.times[-1] for j, y in enumerate(ss))
            for i, x in enumerate(ss)]  # fmt: skip


def overlapped_ttft_ms(ss: Sequence[Sample]) -> dict[str, float]:
    """TTFT (ms) of each request that ``overlapped`` another (not ``first_delivered_late``)."""
    return {x.request_id: x.ttft_ms for x, busy in zip(ss, overlapped(ss), strict=True)
            if busy and not x.first_delivered_late}  # fmt: skip
