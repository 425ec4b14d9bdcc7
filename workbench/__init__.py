"""workbench: replay agentic LLM workloads against serving engines; measure TTFT, TPOT, prefix hits.

Importing the package does nothing but define names: each public function is
imported from its module on first use, so ``import workbench`` opens no socket,
sets no event-loop policy and seeds no global RNG.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "RunConfig": "workbench.config",
    "available": "workbench.config",
    "load_trace": "workbench.traces.load",
    "detect_format": "workbench.traces.load",
    "trace_stats": "workbench.workloads.trace_stats",
    "tracegen": "workbench.workloads.materialize",
    "serve_sim": "workbench.sim.server",
    "EngineConfig": "workbench.sim.config",
    "simulate": "workbench.executors.virtual",
    "sweep": "workbench.sweeps",
    "parity": "workbench.qualify",
    "sweep_async": "workbench.sweeps",
    "capacity_search": "workbench.sweeps",
    "capacity_search_async": "workbench.sweeps",
    "load_sweep": "workbench.sweeps",
    "SLO": "workbench.sweeps",
    "sweep_plot": "workbench.report.sweep_plots",
    "sweep_panel": "workbench.ui.sweep_panel",
    "run": "workbench.executors.dispatch",
    "run_async": "workbench.executors.dispatch",
    "to_frame": "workbench.metrics",
    "summarize": "workbench.metrics",
    "plot": "workbench.report.plots",
    "save": "workbench.metrics.files",
    "load": "workbench.storage.rundir",
    "panel": "workbench.ui.widgets",
    "render_report": "workbench.report.render",
    "TraceFormatError": "workbench.errors",
    "ConfigError": "workbench.errors",
    "WorkbenchError": "workbench.errors",
}

__all__ = [*sorted(_PUBLIC), "__version__"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
