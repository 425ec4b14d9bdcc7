"""Sweeps: one run per point of a grid, SLO capacity search, the sweep directory.

``sweep`` (``grid``), ``capacity_search`` (``capacity``), ``SLO`` (``slo``),
``load_sweep`` / ``Sweep`` (``store``), and ``flush_between_points`` (``flush``).
"""

from workbench.sweeps.capacity import capacity_search, capacity_search_async
from workbench.sweeps.flush import flush_between_points
from workbench.sweeps.grid import sweep, sweep_async
from workbench.sweeps.slo import SLO, Bound
from workbench.sweeps.store import Sweep, is_sweep_dir, load_sweep

__all__ = ["SLO", "Bound", "Sweep", "capacity_search", "capacity_search_async",
           "flush_between_points", "is_sweep_dir", "load_sweep", "sweep", "sweep_async"]
