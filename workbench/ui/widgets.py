"""ipywidgets over ``RunConfig``: ``panel(cfg)`` edits the four axes + target and runs them.

Run replays the config in a process of its own (``workbench.executors.background``); the
kernel polls its snapshot for the status line and redraws the live figures beside that
poll. How, and why: docs/notebooks.md, "The panel"."""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import re
import time
from typing import Any

import ipywidgets as w

from workbench.config import RunConfig
from workbench.errors import WorkbenchError
from workbench.executors.background import BackgroundRun
from workbench.executors.virtual import simulate
from workbench.metrics import summarize
from workbench.records import RunResult
from workbench.redact import strip_url_credentials
from workbench.report import tables
from workbench.report.sections import RunReport
from workbench.ui import render
from workbench.ui.controls import (
    POLICY_DEFAULT,
    STYLE,
    Controls,
    engine_defaults,
    resolve_trace,
    wide,
)
from workbench.ui.live import (
    LIVE_DUTY,
    LIVE_MIN_S,
    LIVE_REST_S,
    LIVE_SECTIONS_S,
    LiveReport,
    LiveSection,
    LiveSource,
    renderer,
)
from workbench.ui.live import output_entry as _output_entry

__all__ = ["POLICY_DEFAULT", "Panel", "WhatIf", "panel", "resolve_trace", "what_if"]

log = logging.getLogger(__name__)

DEFAULT_TRACE = "tracelab/multi_session_example.csv"
POLL_S = 0.1  # the kernel reads the run's snapshot this often (a lock and a copy)
MAX_POLLS = 10_000_000  # bound of the watch loop (~11 days at POLL_S)
LIVE_FIGURES = ("cdf", "over_time", "sessions")
LIVE_MAX_RECORDS = 200_000  # live figures from at most this many (the first) records
NEW_RUN = "a new run is starting; this fills in from its first finished request"
PHASE_TEXT = {"starting": "starting engine…", "stopping": "stopping…",
              "finalizing": "finalizing…"}


class Panel(LiveSource):
    """Controls + Run/Stop + status + live figures + results. ``config()``, ``result``, ``task``."""

    def __init__(self, cfg: RunConfig | None = None) -> None:
        if cfg is None:
            cfg = RunConfig.from_dict({"trace": {"path": resolve_trace(DEFAULT_TRACE)}})
        self.base = cfg
        self.controls = Controls(cfg)
        self.run_button = w.Button(description="Run", button_style="success", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop",
                                    disabled=True)
        self.progress = w.IntProgress(value=0, min=0, max=1, description="requests")
        self.status = w.HTML(value="<b>ready</b>")
        self.status.add_class("wb-status")  # found by the browser tests (tests/browser)
        self.check = w.HTML(value="")
        self.check.add_class("wb-check")
        self.figures = [LiveSection("plot", kind, {}) for kind in LIVE_FIGURES]
        for section in self.figures:
            section.say(f"{section.name} figure: appears here while a run goes")
        self.output = w.Output()
        self.result: RunResult | None = None
        self.latest: RunResult | None = None  # the finished result (None while a run goes)
        self.views: list[LiveReport] = []  # the live report views that follow runs
        self.error: BaseException | None = None
        self.task: asyncio.Task[RunResult | None] | None = None
        self.job: Any = None  # the BackgroundRun of the current or last run
        self._starting = "starting engine…"  # the status line while the run starts
        self._started = 0.0  # time.monotonic() at Run
        # the live redraws of the current or last run: (start s since Run, wall s, CPU s)
        self.redraws: list[tuple[float, float, float]] = []
        self.run_button.on_click(self._on_run)
        self.stop_button.on_click(self._on_stop)
        for field in self.controls.fields():
            field.observe(self._on_edit, names="value")
        self._on_edit()
        buttons = w.HBox([self.run_button, self.stop_button, self.progress])
        live = w.VBox([s.output for s in self.figures])
        live.add_class("wb-live")
        self.widget = w.VBox([*self.controls.sections(), self.check, buttons, self.status,
                              live, self.output])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        render.start()  # shown: the render process warms up before Run is pressed
        return self.widget._repr_mimebundle_(**kwargs)

    def config(self) -> RunConfig:
        """The RunConfig the controls describe (raises ``ConfigError`` if invalid)."""
        return self.controls.apply(self.base)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def say(self, text: str, colour: str = "") -> None:
        """The status line."""
        style = f' style="color:{colour}"' if colour else ""
        self.status.value = f"<b{style}>{html.escape(text)}</b>"

    @property
    def status_text(self) -> str:
        """The status line as plain text."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.status.value))

    # -- input ----------------------------------------------------------------------------
    def _on_edit(self, _change: Any = None) -> None:
        """Check the fields as they are typed; Run only when they make a config."""
        problem = self.controls.check(self.base)
        if problem is None:
            self.check.value = ""
        else:
            self.check.value = (f'<span style="color:#b00">config: {html.escape(problem)}'
                                "</span>")
        if not self.running:
            self.run_button.disabled = problem is not None

    # -- buttons --------------------------------------------------------------------------
    def _on_run(self, _button: Any = None) -> None:
        if self.running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.say("no running event loop: use the panel in Jupyter or await run()")
            return
        self._busy(True)  # at once: a second click before the task starts is a no-op
        self._clear(NEW_RUN)  # and the last run's results are gone at once
        self.task = loop.create_task(self.run())

    def _on_stop(self, _button: Any = None) -> None:
        if self.job is not None and self.running:
            self.stop_button.disabled = True
            self.say("stopping…")
            self.job.stop()

    # -- the run ----------------------------------------------------------------------------
    async def run(self) -> RunResult | None:
        """Start the run in its own process, follow it, show its result (or why not)."""
        try:
            cfg = self.config()
        except WorkbenchError as exc:
            self.say(f"config error: {exc}", "#b00")
            self._clear(f"not run (config error: {exc})")
            self.error = exc
            self._busy(False)
            return None
        self._busy(True)
        self.error, self.result, self.latest = None, None, None
        self._clear(NEW_RUN)
        url = strip_url_credentials(cfg.target.url)  # never a password on screen
        self._starting = "starting engine…" if cfg.target.is_sim else f"connecting to {url}…"
        self._started = time.monotonic()
        self.redraws = []
        self.say(self._starting)
        loop = asyncio.get_running_loop()
        render.start()  # the render process, warmed up while the engine starts
        try:
            self.job = BackgroundRun(cfg).start()
            await self._follow(self.job)
            result = await loop.run_in_executor(None, self.job.result)  # reads the files
            self.result = result
        except asyncio.CancelledError:  # the panel's task cancelled: the run stops too
            if self.job is not None:
                self.job.stop()
            raise
        except Exception as exc:  # shown in the panel; the kernel must stay usable
            log.debug("panel run failed", exc_info=True)
            self.error = exc
            self.say(f"failed: {exc}", "#b00")
            self._clear(f"the run failed ({exc}); nothing to show")
        else:
            await self._show(result)
        finally:
            self._busy(False)
        return self.result

    async def _follow(self, job: Any) -> None:
        """Poll ``job``'s snapshot every ``POLL_S`` while ``_live`` redraws beside it."""
        live = asyncio.get_running_loop().create_task(self._live(job))
        try:
            for _ in range(MAX_POLLS):
                snap = job.snapshot()
                self._show_progress(snap, time.monotonic() - self._started)
                if snap.finished:
                    return
                await asyncio.sleep(POLL_S)  # a poll of a status, not a wait for an event
        finally:
            live.cancel()  # a section still rendering finishes on its thread, unshown
            with contextlib.suppress(asyncio.CancelledError):
                await live

    def _show_progress(self, snap: Any, elapsed: float) -> None:
        """The status line (with the time since Run) and the progress bar from ``snap``."""
        if snap.total:
            self.progress.max = max(snap.total, 1)
            self.progress.value = min(snap.done, self.progress.max)
        clock = f" · {elapsed:.1f} s"
        if snap.phase == "running":  # "running…" until a request ends
            self.say((f"running {snap.done}/{snap.total}" if snap.total else "running…")
                     + clock)
        elif snap.phase == "starting":
            self.say(self._starting + clock)
        elif snap.phase in PHASE_TEXT:
            self.say(PHASE_TEXT[snap.phase])
        elif snap.phase in ("done", "cancelled"):  # the panel's own finalizing is to come
            self.say(PHASE_TEXT["finalizing"])

    async def _live(self, job: Any) -> None:
        """Redraw from the records written so far, paced by the render process's CPU time
        (docs/notebooks.md); ``redraws`` keeps each one's start (s since Run), wall and
        CPU time."""
        run_dir, run_id = str(job.run_dir), job.cfg.run_id or ""
        cursor = 0  # the next report section to redraw
        for _ in range(MAX_POLLS):
            try:
                new, count = await render.call("follow", run_dir, run_id, LIVE_MAX_RECORDS)
            except Exception:  # the render process failed: a new one at the next poll
                log.warning("live records not read", exc_info=True)
                new = 0
            if not new:
                await asyncio.sleep(POLL_S)
                continue
            start, cpu = time.monotonic(), 0.0
            try:
                cursor, cpu = await self._draw_live(run_dir, count, cursor)
            except Exception:  # a redraw that fails leaves the run and its status alone
                log.warning("live redraw failed", exc_info=True)
            took = time.monotonic() - start
            self.redraws.append((start - self._started, took, cpu))
            await asyncio.sleep(max(LIVE_MIN_S - took, cpu / LIVE_DUTY - took, LIVE_REST_S))

    async def _draw_live(self, run_dir: str, count: int, cursor: int) -> tuple[int, float]:
        """One redraw: the live figures, then sections from ``cursor`` for up to
        ``LIVE_SECTIONS_S``; returns the next cursor and the CPU time it took."""
        total = self.job.snapshot().total if self.job is not None else 0
        note = f"live: {count} of {total or '?'} requests finished (run going)"
        if count >= LIVE_MAX_RECORDS:
            note = (f"live: the first {count:,} records (run going; drawn again from "
                    "all of them when it ends)")
        cpu = 0.0
        for section in self.figures:
            cpu += await self._render_live(run_dir, section, "")
        sections = [s for view in self.views for s in view.sections]
        until = time.monotonic() + LIVE_SECTIONS_S
        for _ in sections:
            cursor %= len(sections)
            cpu += await self._render_live(run_dir, sections[cursor], note)
            cursor += 1
            if time.monotonic() >= until:
                break
        return cursor, cpu

    @staticmethod
    async def _render_live(run_dir: str, section: LiveSection, note: str) -> float:
        """``section`` rendered in the render process and shown; its CPU time there."""
        entries, cpu = await render.call("render", run_dir, section.what, section.name,
                                         section.options, note)
        if entries:
            section.output.outputs = entries
        return float(cpu)

    @staticmethod
    async def _render(section: LiveSection, report: Any) -> None:
        """``section`` of a finished run drawn on the kernel's render thread and shown."""
        loop = asyncio.get_running_loop()
        section.output.outputs = await loop.run_in_executor(renderer(), section.render,
                                                            report)

    def _clear(self, text: str) -> None:
        """Old results gone at once: output, live figures and the sections below."""
        self.output.outputs = ()
        self.progress.value = 0
        for section in self.figures:
            section.say(f"{section.name} figure: {text}")
        for view in self.views:
            view.clear(text)

    def _busy(self, busy: bool) -> None:
        self.run_button.disabled = busy
        self.stop_button.disabled = not busy
        for child in self.controls.fields():
            child.disabled = busy
        if not busy:
            self._on_edit()

    async def _show(self, result: RunResult) -> None:
        """The outcome at once, then every figure and section drawn on the render thread."""
        loop = asyncio.get_running_loop()
        self._show_outcome(*await loop.run_in_executor(renderer(), self._outcome, result))
        self.latest = result
        report = RunReport(result)
        for section in [*self.figures, *(s for view in self.views for s in view.sections)]:
            await self._render(section, report)

    def _outcome(self, result: RunResult) -> tuple[Any, ...]:
        """The output area's entries, status line and progress for ``result`` (no widget)."""
        summary = summarize(result)
        entries = [
            RunReport(result).headline(),  # the same line as the reports and the CLI
            tables.show(tables.summary_table(summary), caption=tables.latency_caption(summary)),
            tables.show(tables.prefix_table(summary), caption="Prefix-cache hit rates (0–1)"),
        ]
        state = "cancelled" if result.cancelled else "done"
        where = f" → {result.run_dir}" if result.run_dir else ""
        planned = result.manifest.plan.get("rounds")
        of = f" ({planned} planned)" if planned and planned != summary["requests"] else ""
        text = (f"{state}: {summary['ok']} ok, {summary['errors']} errors, "
                f"{summary['cancelled']} cancelled of {summary['requests']} requests{of}{where}")
        return (tuple(_output_entry(e) for e in entries), text,
                "#a60" if result.cancelled else "", int(summary["requests"]), int(summary["ok"]))

    def _show_outcome(self, entries: tuple[dict[str, Any], ...], text: str, colour: str,
                      requests: int, ok: int) -> None:
        self.output.outputs = entries
        self.progress.max = max(requests, 1)
        self.progress.value = min(ok, self.progress.max)
        self.say(text, colour)


def panel(cfg: RunConfig | dict[str, Any] | None = None) -> Panel:
    """Widgets over ``cfg`` (a RunConfig or its dict; default: the bundled demo trace)."""
    if isinstance(cfg, dict):
        cfg = RunConfig.from_dict(cfg)
    return Panel(cfg)


BLOCK_SIZES = (16, 32, 64, 128, 256, 512)
NUM_BLOCKS = tuple(2**k for k in range(6, 21))


def _closest(options: tuple[int, ...], value: int) -> int:
    return min(options, key=lambda o: abs(o - value))


class WhatIf:
    """Cache-size what-if in virtual time: KV blocks and block size → ``simulate`` → hit rates
    (``simulate`` on a worker thread: its loop cannot nest in the kernel's)."""

    def __init__(self, cfg: RunConfig) -> None:
        knobs = {**engine_defaults(), **cfg.target.engine}
        self.base = cfg
        self.num_blocks = w.SelectionSlider(
            options=list(NUM_BLOCKS), value=_closest(NUM_BLOCKS, int(knobs["num_blocks"])),
            description="KV blocks", style=STYLE, layout=wide())
        self.block_size = w.Dropdown(
            options=list(BLOCK_SIZES), value=_closest(BLOCK_SIZES, int(knobs["block_size"])),
            description="block size", style=STYLE)
        self.button = w.Button(description="Simulate", button_style="success", icon="play")
        self.status = w.Label(value="ready")
        self.output = w.Output()
        self.result: RunResult | None = None
        self.task: asyncio.Task[RunResult] | None = None
        self.button.on_click(self._on_click)
        self.widget = w.VBox([w.HBox([self.num_blocks, self.block_size]),
                              w.HBox([self.button, self.status]), self.output])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def config(self) -> RunConfig:
        engine = {**self.base.target.engine, "num_blocks": self.num_blocks.value,
                  "block_size": self.block_size.value}
        return self.base.replace(target={"url": "sim", "engine": engine})

    def _on_click(self, _button: Any = None) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> RunResult:
        cfg = self.config()
        capacity = self.num_blocks.value * self.block_size.value
        self.status.value = f"simulating with {capacity:,} tokens of KV cache…"
        self.button.disabled = True
        try:
            self.result = await asyncio.to_thread(simulate, cfg)
        finally:
            self.button.disabled = False
        summary = summarize(self.result)
        nb, bs = self.num_blocks.value, self.block_size.value
        caption = f"KV cache {capacity:,} tokens ({nb} blocks × {bs} tokens)"
        entries = [tables.show(tables.prefix_table(summary), caption=caption),
                   tables.show(tables.summary_table(summary),
                               caption=tables.latency_caption(summary, "Latency (virtual ms)"))]
        self.output.outputs = tuple(_output_entry(e) for e in entries)
        self.status.value = f"done: {summary['requests']} requests in virtual time"
        return self.result


def what_if(cfg: RunConfig | dict[str, Any]) -> WhatIf:
    """Sliders for the embedded engine's cache over ``cfg`` (see ``WhatIf``)."""
    return WhatIf(cfg if isinstance(cfg, RunConfig) else RunConfig.from_dict(cfg))
