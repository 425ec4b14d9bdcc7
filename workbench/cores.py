"""How many CPU cores this process may run on.

Virtual-time sweeps and capacity plans run their points or searches in processes of
their own, as many at once as there are cores to run them on (docs/sweeps.md,
docs/plan.md). The count is this process's CPU affinity, so ``taskset -c 0 workbench
sweep ...`` runs one point at a time.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity; the machine's count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
