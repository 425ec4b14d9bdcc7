"""How many CPU cores this process may run on (its affinity: ``taskset -c 0`` runs one
sweep point or plan search at a time; docs/sweeps.md, docs/plan.md)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity; the machine's count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
