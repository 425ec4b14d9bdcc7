"""``report_view(source)``: the replay report's sections over a run, or live over a panel.

Given a run (a ``RunResult`` or what ``scan.report_source`` returns) it is a
``RunReport``: ``view.table("latency")`` and ``view.plot("cdf")`` return the
table or figure itself, so a headless (papermill) report holds PNGs and
tables as before. Given a ``Panel`` (``wb.panel(cfg)``) it is a
``LiveReport``: each call returns an ``ipywidgets.Output`` that says "press
Run" until the panel has a result, fills in while the run goes (the panel
re-reads the run directory's ``records.jsonl`` every few seconds) and shows
the final result when it ends. So *Run All* on the notebook never raises, and
the cells below the panel always show its latest run.

Redrawing runs on the kernel's event loop, which is also the replay client's
loop: the panel redraws at most every ``LIVE_MIN_S`` seconds and never more
often than ``LIVE_DUTY`` of the time (a redraw of 200 ms waits at least
``0.2 / LIVE_DUTY`` s for the next one), and the client's self-measurement
(release lag) would show any delay it still caused.
"""

from __future__ import annotations

import logging
from typing import Any

import ipywidgets as w

from workbench.report.sections import RunReport

log = logging.getLogger(__name__)

LIVE_MIN_S = 2.0
LIVE_DUTY = 0.2
PRESS_RUN = "Press Run in the panel above: this {what} fills in while the run goes."


def output_entry(obj: Any) -> dict[str, Any]:
    """A display_data output for ``obj`` (no IPython shell needed)."""
    bundle = obj._repr_mimebundle_()
    data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
    return {"output_type": "display_data", "data": data, "metadata": meta}


def _text_entry(text: str) -> dict[str, Any]:
    return {"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}}


class LiveSection:
    """One registered section: what to draw and the Output it draws into."""

    def __init__(self, what: str, name: str, options: dict[str, Any]) -> None:
        self.what, self.name, self.options = what, name, options
        self.output = w.Output(layout=w.Layout(min_height="2em"))
        label = "table" if what == "table" else "figure"
        self.output.outputs = (_text_entry(PRESS_RUN.format(what=f"{name} {label}")),)

    def draw(self, report: RunReport, note: str = "") -> None:
        try:
            obj = (report.table(self.name) if self.what == "table"
                   else report.plot(self.name, **self.options))
            entries = [output_entry(obj)]
        except Exception as exc:  # a section that cannot draw a partial run says so
            log.debug("live section %s failed", self.name, exc_info=True)
            entries = [_text_entry(f"{self.name}: not drawable yet ({type(exc).__name__}: "
                                   f"{exc})")]
        if note:
            entries.insert(0, _text_entry(note))
        self.output.outputs = tuple(entries)


class LiveSource:
    """What a ``LiveReport`` follows: the run so far (``latest``) and the views to refresh.

    ``workbench.ui.widgets.Panel`` is one; it sets ``latest`` as its run goes and calls
    ``refresh`` on every view in ``views``.
    """

    latest: Any = None
    views: list[LiveReport]


class LiveReport:
    """Sections that follow a panel's runs (see the module docstring)."""

    def __init__(self, panel: LiveSource) -> None:
        self.panel = panel
        self.sections: list[LiveSection] = []
        panel.views.append(self)

    def _add(self, what: str, name: str, options: dict[str, Any]) -> w.Output:
        section = LiveSection(what, name, options)
        self.sections.append(section)
        latest = getattr(self.panel, "latest", None)
        if latest is not None:
            section.draw(RunReport(latest))
        return section.output

    def table(self, name: str) -> w.Output:
        return self._add("table", name, {})

    def plot(self, kind: str, **options: Any) -> w.Output:
        return self._add("plot", kind, options)

    def refresh(self, report: RunReport, note: str = "") -> None:
        for section in self.sections:
            section.draw(report, note)


def report_view(source: Any) -> RunReport | LiveReport:
    """Report sections over ``source``: a run (static) or a ``Panel`` (live)."""
    if isinstance(source, LiveSource):
        return LiveReport(source)
    return RunReport(source)
