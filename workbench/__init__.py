"""workbench: replay agentic LLM workloads against serving engines; measure TTFT, TPOT, prefix hits.

Importing the package only defines names (each imported on first use): no socket, no
event-loop policy, no global RNG.
"""

from __future__ import annotations

from typing import Any

from workbench import compiled_set
from workbench.lazy import LazyNames

__version__ = "0.1.0"

# before any module of the mypyc-compiled set is imported: its sources or its build
compiled_set.install()

#: each public name and the module it is imported from on first use
_LAZY = LazyNames(__name__, globals(), (
    ("workbench.config", "RunConfig available"),
    ("workbench.traces.load", "load_trace detect_format"),
    ("workbench.workloads.trace_stats", "trace_stats"),
    ("workbench.workloads.materialize", "tracegen"),
    ("workbench.sim.server", "serve_sim"),
    ("workbench.sim.config", "EngineConfig"),
    ("workbench.executors.virtual", "simulate"),
    ("workbench.sweeps", "sweep sweep_async capacity_search capacity_search_async load_sweep SLO"),
    ("workbench.qualify", "parity"),
    ("workbench.report.sweep_plots", "sweep_plot"),
    ("workbench.ui.sweep_panel", "sweep_panel"),
    ("workbench.executors.dispatch", "run run_async"),
    ("workbench.metrics", "to_frame summarize"),
    ("workbench.report.plots", "plot"),
    ("workbench.metrics.files", "save"),
    ("workbench.storage.rundir", "load"),
    ("workbench.ui.widgets", "panel"),
    ("workbench.report.render", "render_report"),
    ("workbench.errors", "TraceFormatError ConfigError WorkbenchError"),
))

__all__ = [*sorted(_LAZY.modules), "__version__"]


def __getattr__(name: str) -> Any:
    return _LAZY.get(name)


def __dir__() -> list[str]:
    return _LAZY.dir()
