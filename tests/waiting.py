"""Waiting in tests: on an event (a line read, an ``asyncio.Event``, a process's end),
never on a sleep. What cannot signal — a file another process writes, ``/proc``, a
snapshot of a run in another process — is polled for the exact condition, a short pause
between polls, until a failure bound: generous (a loaded 2-core machine shared with other
work), never part of what is asserted. Nothing here measures how long anything took.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: the default failure bound: far beyond what any condition here takes on a loaded machine
BOUND_S = 120.0
#: the pause between two polls (what it costs: a condition seen up to this much late)
POLL_S = 0.02


def until(cond: Callable[[], T], what: str, *, proc: subprocess.Popen | None = None,
          bound_s: float = BOUND_S, poll_s: float = POLL_S) -> T:
    """``cond()``'s first true value, polled; an ``AssertionError`` naming ``what`` when
    ``proc`` (the process that should make it true) ends first, with its output, or when
    ``bound_s`` passes."""
    deadline = time.monotonic() + bound_s
    while True:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}: "
                                 f"{proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within the failure bound of {bound_s:g} s: {what}")
        time.sleep(poll_s)
