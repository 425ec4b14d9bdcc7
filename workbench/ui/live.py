"""``report_view(source)``: the replay report's sections over a run, or live over a panel.

Over a run it is a ``RunReport`` (tables and figures themselves); over a ``Panel`` a
``LiveReport``, whose calls return ``ipywidgets.Output``s that say "press Run", fill in
while the run goes (rendered in ``workbench.ui.render``) and show its final result. A
section waits, in a sentence, until it has data (``waiting_for``). docs/notebooks.md."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ipywidgets as w

from workbench.report.sections import RunReport

log = logging.getLogger(__name__)

LIVE_MIN_S = 2.0  # a live redraw starts at most this often while a run goes
LIVE_DUTY = 0.5  # and the render process draws at most this share of the time (CPU)
LIVE_SECTIONS_S = 1.0  # per redraw, the report sections below the panel get this long
LIVE_REST_S = 0.5  # and the render process rests at least this long between two redraws
RENDER_LOCK = threading.RLock()  # matplotlib is not thread-safe: one render at a time
_renderer: ThreadPoolExecutor | None = None
PRESS_RUN = "Press Run in the panel above: this {what} fills in while the run goes."
ROUNDS = ("sessions", "by_round", "hit_by_round", "ttft_by_round")
NEED_OK = ("latency", "cdf", "over_time", "ttft_vs_uncached", "prefix", "prefix_hits",
           "by_band", *ROUNDS)
NEED_TWO = ("cdf",)  # one point draws no visible step


def waiting_for(name: str, records: Any) -> str | None:
    """What section ``name`` still waits for in a run's finished ``records`` (None: ready)."""
    measured = [r for r in records if not r.warmup]
    ok = sum(r.status == "ok" for r in measured)
    if not measured:
        return "fills in from the first finished request"
    if name in NEED_OK and not ok:
        return f"fills in from the first ok request ({len(measured)} finished, none ok yet)"
    if name in NEED_TWO and ok < 2:
        return "fills in from the second ok request"
    if name in ROUNDS and max(r.round_idx for r in measured) < 1:
        return "fills in when a session's second round ends"
    return None


def renderer() -> ThreadPoolExecutor:
    """The kernel's one render thread, for the drawing after a run (made on first use)."""
    global _renderer
    if _renderer is None:
        _renderer = ThreadPoolExecutor(1, thread_name_prefix="workbench-render")
    return _renderer


def render_section(what: str, name: str, options: dict[str, Any], report: RunReport,
                   note: str = "", records: Any = None) -> tuple[dict[str, Any], ...]:
    """The outputs of section ``name`` (a ``what``: table or plot) of ``report``, made
    without touching a widget; mid-run (``records`` given) a sentence until it has data."""
    label = "table" if what == "table" else "figure"
    if records is not None and (missing := waiting_for(name, records)):
        return (_text_entry(f"{name} {label}: {missing}"),)
    with RENDER_LOCK:
        try:
            obj = report.table(name) if what == "table" else report.plot(name, **options)
            entries = [output_entry(obj)]
        except Exception as exc:  # a section that cannot draw a partial run says so
            log.debug("live section %s failed", name, exc_info=True)
            entries = [_text_entry(f"{name}: not drawable yet ({type(exc).__name__}: "
                                   f"{exc})")]
    if note:
        entries.insert(0, _text_entry(note))
    return tuple(entries)


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
        self.say(PRESS_RUN.format(what=f"{name} {self.label}"))

    @property
    def label(self) -> str:
        return "table" if self.what == "table" else "figure"

    def say(self, text: str) -> None:
        """A sentence in place of the section (no axes, no table)."""
        self.output.outputs = (_text_entry(text),)

    def draw(self, report: RunReport) -> None:
        self.output.outputs = self.render(report)

    def render(self, report: RunReport) -> tuple[dict[str, Any], ...]:
        """The outputs ``draw`` shows (``render_section``): touches no widget."""
        return render_section(self.what, self.name, self.options, report)


class LiveSource:
    """What a ``LiveReport`` follows (a ``Panel``): its finished run and views to refresh."""

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

    def clear(self, text: str) -> None:
        """Every section replaced by ``text`` (a new run started, or the last one failed)."""
        for section in self.sections:
            section.say(f"{section.name} {section.label}: {text}")


def report_view(source: Any) -> RunReport | LiveReport:
    """Report sections over ``source``: a run (static) or a ``Panel`` (live)."""
    if isinstance(source, LiveSource):
        return LiveReport(source)
    return RunReport(source)
