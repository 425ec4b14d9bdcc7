"""ipywidgets over stored sweeps: ``sweep_panel(sweeps)`` picks a figure and a percentile."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from workbench.report.sweep_plots import SWEEP_KINDS, as_sweeps, sweep_plot
from workbench.report.sweep_tables import points_table

STATS = ("SLO percentile", "p50", "p90", "p99", "mean")


class SweepPanel:
    def __init__(self, data: Any) -> None:
        self.sweeps = as_sweeps(data)
        self.kind = w.Dropdown(options=list(SWEEP_KINDS), value="latency", description="figure")
        self.stat = w.Dropdown(options=list(STATS), value="SLO percentile",
                               description="percentile")
        self.out = w.Output()
        self.table = w.Output()
        self.kind.observe(self._redraw, names="value")
        self.stat.observe(self._redraw, names="value")
        self.widget = w.VBox([w.HBox([self.kind, self.stat]), self.out, self.table])
        self._redraw()
        with self.table:
            from IPython.display import display

            display(points_table(self.sweeps))

    def figure(self) -> Any:
        stat = None if self.stat.value == STATS[0] else self.stat.value
        options = {"stat": stat} if self.kind.value == "latency" else {}
        return sweep_plot(self.sweeps, self.kind.value, **options)

    def _redraw(self, _change: Any = None) -> None:
        from IPython.display import display

        fig = self.figure()
        self.out.clear_output(wait=True)
        with self.out:
            display(fig)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def sweep_panel(data: Any) -> SweepPanel:
    """A panel over one or more sweeps (a Sweep, a directory, or a mapping/list of them)."""
    return SweepPanel(data)
