"""Sweeps: one run per point of a grid (``grid``), SLO capacity search (``capacity``) and the
sweep directory (``store``); ``SLO`` is ``workbench.metrics.slo``'s, re-exported.
"""

from workbench.metrics.slo import SLO, Bound
from workbench.sweeps.capacity import capacity_search, capacity_search_async
from workbench.sweeps.grid import sweep, sweep_async
from workbench.sweeps.store import Sweep, SweepManifest, is_sweep_dir, load_sweep

__all__ = ["SLO", "Bound", "Sweep", "SweepManifest", "capacity_search", "capacity_search_async",
           "is_sweep_dir", "load_sweep", "sweep", "sweep_async"]
