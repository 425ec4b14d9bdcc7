"""Sweeps: one run per point of a grid, SLO capacity search, the sweep directory.

``sweep`` (``grid``), ``capacity_search`` (``capacity``), ``SLO`` (``workbench.metrics.slo``,
re-exported) and ``load_sweep`` / ``Sweep`` (``store``). Each live point flushes the server's prefix
cache through its run's own ``backend.flush_cache`` (``workbench.backends.flush``).
"""

from workbench.metrics.slo import SLO, Bound
from workbench.sweeps.capacity import capacity_search, capacity_search_async
from workbench.sweeps.grid import sweep, sweep_async
from workbench.sweeps.store import Sweep, SweepManifest, is_sweep_dir, load_sweep

__all__ = ["SLO", "Bound", "Sweep", "SweepManifest", "capacity_search", "capacity_search_async",
           "is_sweep_dir", "load_sweep", "sweep", "sweep_async"]
