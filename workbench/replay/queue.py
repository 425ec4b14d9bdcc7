"""Units waiting for admission in release order, (scheduled arrival, file order)
(docs/arrival.md): the one cursor the dispatcher and a finishing unit's hand-off read.
A unit's ``released_ns`` is ``max(scheduled, admission of the unit before it)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.replay.plan import PlanStream, UnitPlan

NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class Waiting:
    """The unit at the head of the queue. ``scheduled_ns`` is ``None`` in closed loop."""

    plan: UnitPlan
    loop_idx: int
    scheduled_ns: int | None


def release_order(units: Sequence[UnitPlan]) -> Sequence[UnitPlan]:
    """``units`` in (scheduled arrival, file order): a stable sort on the offset."""
    if isinstance(units, PlanStream) and units.in_release_order:
        return units
    return tuple(sorted(units, key=lambda up: up.offset_ms))


class AdmissionQueue:
    """Units in (arrival, file order); closed loop repeats the list (``loop_idx``) until
    told to stop."""

    __slots__ = ("_i", "_n", "closed_loop", "last_admit_ns", "loops", "t0_ns", "units")

    def __init__(
        self, units: Sequence[UnitPlan], t0_ns: int, *, closed_loop: bool, loops: bool
    ) -> None:
        # closed loop has no arrivals: file order
        self.units = units if closed_loop else release_order(units)
        self.t0_ns = t0_ns
        self.closed_loop = closed_loop
        self.loops = loops  # closed loop with a duration: the unit list starts over
        self._n = len(units)
        self._i = 0
        self.last_admit_ns = t0_ns

    def peek(self) -> Waiting | None:
        """The next unit to admit, or ``None`` when there is none left."""
        if not self._n or (self._i >= self._n and not (self.closed_loop and self.loops)):
            return None
        loop_idx, k = divmod(self._i, self._n)
        up = self.units[k]
        if self.closed_loop:
            return Waiting(up, loop_idx, None)
        return Waiting(up, 0, self.t0_ns + round(up.offset_ms * NS_PER_MS))

    def due(self, w: Waiting, now_ns: int) -> bool:
        return w.scheduled_ns is None or w.scheduled_ns <= now_ns

    def pop(self, now_ns: int) -> int:
        """Admit the head unit now; returns its ``released_ns``."""
        w = self.peek()
        assert w is not None, "pop() on an exhausted queue"
        released = now_ns if w.scheduled_ns is None else max(w.scheduled_ns, self.last_admit_ns)
        self._i += 1
        self.last_admit_ns = now_ns
        return min(released, now_ns)
