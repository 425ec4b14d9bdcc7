"""The client measuring itself while it runs (in flight, release lag, CPU; docs/metrics.md,
"Client"): a few integer operations per request, summarized by ``metrics.summary.client_stats``."""

from __future__ import annotations

import time
from array import array
from typing import Any


class SelfMeasure:
    """Requests in flight (integrated over time), release lag (on the wire − due) and CPU."""

    __slots__ = ("_area", "_cpu0", "_last", "_t0", "at_dispatch", "cap", "connect_ns",
                 "cpu_s", "full_ns", "held_ns", "inflight", "lags_ns", "not_connected", "peak",
                 "series", "stale_ns", "steady_lags_ns", "wall_s")  # fmt: skip

    def __init__(self) -> None:
        self.inflight = 0
        self.peak = 0
        self._area = 0
        self._last = 0
        self._t0: int | None = None
        self._cpu0 = 0.0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.lags_ns = array("q")
        self.at_dispatch = array("i")
        self.cap: int | None = None  # requested concurrency (None: uncapped)
        self.full_ns: int | None = None  # when in-flight first reached ``cap``
        self.steady_lags_ns = array("q")
        # waits for a connection the server held open after [DONE], one per request that
        # waited (docs/metrics.md, "Client"): the server's, taken out of the lags
        self.held_ns = array("q")
        # requests whose connection could not be made: never on the wire, so no release
        # lag (docs/metrics.md, "Client"); counted apart
        self.not_connected = 0
        # new connections' waits (every request that made one) and resent requests' first
        # attempts: the server's or the network's, taken out of the lags (backends/waits.py)
        self.connect_ns = array("q")
        self.stale_ns = array("q")
        # the per-request series (lags, in flight at dispatch); False keeps only the
        # counts: a virtual run has no wall clock to measure the client by
        # (executors.virtual), and they would grow with its requests
        self.series = True

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self.wall_s = time.perf_counter()

    def stop(self) -> None:
        self.cpu_s = time.process_time() - self._cpu0
        self.wall_s = time.perf_counter() - self.wall_s

    def _move(self, now: int, delta: int) -> None:
        if self._t0 is None:
            self._t0 = self._last = now
        self._area += self.inflight * (now - self._last)
        self._last = now
        self.inflight += delta
        if self.inflight > self.peak:
            self.peak = self.inflight
            if self.full_ns is None and self.cap is not None and self.inflight >= self.cap:
                self.full_ns = now

    def dispatched(self, now: int) -> None:
        if self.series:
            self.at_dispatch.append(self.inflight)
        self._move(now, 1)

    def lag(self, sent_ns: int, ready_ns: int,
            waits: tuple[int, int | None, int | None] = (0, None, None)) -> None:
        """One request's release lag: on the wire at ``sent_ns``, due at ``ready_ns``, less
        ``waits`` (``backends.waits.server_waits_ns``: a connection the server held open
        after [DONE], a new connection being made, a resent request's first attempt), each
        counted apart; also *steady* when due after the run first held its full
        concurrency (or uncapped)."""
        if not self.series:
            return
        held, connect, stale = waits
        if held > 0:
            self.held_ns.append(held)
        if connect is not None:
            self.connect_ns.append(connect)
        if stale is not None:
            self.stale_ns.append(stale)
        lag = max(0, sent_ns - held - (connect or 0) - (stale or 0) - ready_ns)
        self.lags_ns.append(lag)
        if self.cap is None or (self.full_ns is not None and ready_ns >= self.full_ns):
            self.steady_lags_ns.append(lag)

    def ended(self, now: int) -> None:
        self._move(now, -1)

    def raw(self) -> dict[str, Any]:
        """Plain data, mergeable across shards; the series stay ``array``s (docs/metrics.md)."""
        return {
            "requests": len(self.lags_ns),
            "not_connected": self.not_connected,
            "release_lag_ns": self.lags_ns,
            "steady_release_lag_ns": self.steady_lags_ns,
            "held_wait_ns": self.held_ns,
            "connect_wait_ns": self.connect_ns,
            "stale_attempt_ns": self.stale_ns,
            "in_flight_at_dispatch": self.at_dispatch,
            "in_flight_mean": (
                None if self._t0 is None or self._last <= self._t0
                else self._area / (self._last - self._t0)
            ),
            "in_flight_peak": self.peak,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
        }
