"""ipywidgets over ``RunConfig``: ``panel(cfg)`` edits the four axes + target and runs them.

The panel is a view, not a second code path: ``panel.config()`` builds the same
``RunConfig`` a notebook's parameters cell builds, and Run awaits the same
``run_async`` in a background task on the kernel's event loop, so the kernel
stays responsive (Stop is a button click handled while the run goes on). Stop
sets the ``asyncio.Event`` given to ``run_async(stop=...)``: in-flight requests
are recorded as cancelled and every finished record is kept.

Choices come from ``workbench.config.available()``; numeric controls use 0 for
"not set" (no rate rescaling, no concurrency cap, every unit).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import ipywidgets as w

from workbench.config import RunConfig, available
from workbench.errors import WorkbenchError
from workbench.records import RunResult
from workbench.ui.live import LIVE_DUTY, LIVE_MIN_S, LiveReport, LiveSource
from workbench.ui.live import output_entry as _output_entry

log = logging.getLogger(__name__)

DEFAULT_TRACE = "tracelab/multi_session_example.csv"
POLICY_DEFAULT = "(trace default)"
ENGINE_KNOBS = ("speedup", "block_size", "num_blocks")
WIDE = w.Layout(width="420px")
STYLE = {"description_width": "120px"}




def resolve_trace(value: str) -> str:
    """A path as typed, or the on-disk path of a bundled trace name."""
    from workbench import data

    if not value or Path(value).exists() or value not in data.files():
        return value
    return str(data.path(value))


def _engine_defaults() -> dict[str, Any]:
    from workbench.sim.config import EngineConfig

    return {f.name: f.default for f in dataclasses.fields(EngineConfig) if f.name in ENGINE_KNOBS}


class Controls:
    """The editable fields, initialised from a RunConfig."""

    def __init__(self, cfg: RunConfig) -> None:
        names = available()
        from workbench import data

        t, a = cfg.trace, cfg.arrival
        self.trace = w.Combobox(value=t.path, options=data.files(), description="trace",
                                ensure_option=False, layout=WIDE, style=STYLE)
        self.format = w.Dropdown(options=names["trace_formats"], value=t.format,
                                 description="format", style=STYLE)
        self.max_items = w.IntText(value=t.max_items or 0, description="max items (0=all)",
                                   style=STYLE)
        self.policy = w.Dropdown(options=[POLICY_DEFAULT, *names["context_policies"]],
                                 value=cfg.context.policy or POLICY_DEFAULT,
                                 description="context policy", style=STYLE)
        self.arrival = w.Dropdown(options=names["arrival_modes"], value=a.mode,
                                  description="arrival", style=STYLE)
        self.rate = w.FloatText(value=a.rate or 0.0, description="rate /s (0=trace)", style=STYLE)
        self.max_concurrency = w.IntText(value=a.max_concurrency or 0,
                                         description="max conc. (0=∞)", style=STYLE)
        self.backend = w.Dropdown(options=names["backends"], value=cfg.backend.name,
                                  description="backend", style=STYLE)
        self._engine(cfg)

    def _engine(self, cfg: RunConfig) -> None:
        knobs = {**_engine_defaults(), **cfg.target.engine}
        self.target = w.ToggleButtons(options=["sim", "url"],
                                      value="sim" if cfg.target.is_sim else "url",
                                      description="target", style=STYLE)
        self.url = w.Text(value="" if cfg.target.is_sim else cfg.target.url,
                          placeholder="http://127.0.0.1:8000", description="server URL",
                          layout=WIDE, style=STYLE)
        self.speedup = w.FloatText(value=knobs["speedup"], description="sim speedup",
                                   style=STYLE)
        self.block_size = w.IntText(value=knobs["block_size"], description="sim block size",
                                    style=STYLE)
        self.num_blocks = w.IntText(value=knobs["num_blocks"], description="sim KV blocks",
                                    style=STYLE)

    def sections(self) -> list[w.Widget]:
        row = w.HBox
        return [
            w.HTML("<b>1 trace</b>"), row([self.trace, self.format]), self.max_items,
            w.HTML("<b>2 context</b>"), self.policy,
            w.HTML("<b>3 arrival &amp; admission</b>"),
            row([self.arrival, self.rate, self.max_concurrency]),
            w.HTML("<b>4 backend</b>"), self.backend,
            w.HTML("<b>target</b>"), row([self.target, self.url]),
            row([self.speedup, self.block_size, self.num_blocks]),
        ]

    def apply(self, base: RunConfig) -> RunConfig:
        """``base`` with every controlled field replaced (others, e.g. seed, kept)."""
        d = base.to_dict()
        d["trace"].update(path=resolve_trace(self.trace.value), format=self.format.value,
                          max_items=self.max_items.value or None)
        d["context"]["policy"] = None if self.policy.value == POLICY_DEFAULT else self.policy.value
        d["arrival"].update(mode=self.arrival.value, rate=self.rate.value or None,
                            max_concurrency=self.max_concurrency.value or None)
        d["backend"]["name"] = self.backend.value
        d["target"] = self._target(base)
        return RunConfig.from_dict(d)

    def _target(self, base: RunConfig) -> dict[str, Any]:
        engine = dict(base.target.engine)
        defaults = _engine_defaults()
        for knob in ENGINE_KNOBS:
            value = getattr(self, knob).value
            if knob in engine or value != defaults[knob]:
                engine[knob] = value
        if self.target.value == "sim":
            return {"url": "sim", "engine": engine, "in_process": base.target.in_process}
        if not self.url.value.strip():
            raise WorkbenchError("target 'url' needs a server URL (e.g. http://127.0.0.1:8000)")
        return {"url": self.url.value.strip(), "engine": engine}


class Panel(LiveSource):
    """Controls + Run/Stop + progress + results. ``config()``, ``result``, ``task``."""

    def __init__(self, cfg: RunConfig | None = None) -> None:
        if cfg is None:
            cfg = RunConfig.from_dict({"trace": {"path": resolve_trace(DEFAULT_TRACE)}})
        self.base = cfg
        self.controls = Controls(cfg)
        self.run_button = w.Button(description="Run", button_style="success", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop",
                                    disabled=True)
        self.progress = w.IntProgress(value=0, min=0, max=1, description="requests")
        self.status = w.Label(value="ready")
        self.output = w.Output()
        self.result: RunResult | None = None
        self.latest: RunResult | None = None  # the finished result, or the running one so far
        self.views: list[LiveReport] = []  # the live report views that follow runs
        self.error: BaseException | None = None
        self.task: asyncio.Task[RunResult | None] | None = None
        self._stop: asyncio.Event | None = None
        self.run_button.on_click(self._on_run)
        self.stop_button.on_click(self._on_stop)
        buttons = w.HBox([self.run_button, self.stop_button, self.progress, self.status])
        self.widget = w.VBox([*self.controls.sections(), buttons, self.output])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def config(self) -> RunConfig:
        """The RunConfig the controls describe (raises ``ConfigError`` if invalid)."""
        return self.controls.apply(self.base)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    # -- buttons --------------------------------------------------------------------------
    def _on_run(self, _button: Any = None) -> None:
        if self.running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.status.value = "no running event loop: use the panel in Jupyter or await run()"
            return
        self._busy(True)  # at once: a second click before the task starts is a no-op
        self.task = loop.create_task(self.run())

    def _on_stop(self, _button: Any = None) -> None:
        if self._stop is not None and not self._stop.is_set():
            self._stop.set()
            self.status.value = "stopping: cancelling in-flight requests…"

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = min(done, self.progress.max)
        self.status.value = f"running: {done}/{total} requests done"

    # -- the run ----------------------------------------------------------------------------
    async def run(self) -> RunResult | None:
        """Build the config, await ``run_async`` with progress and stop, show the result."""
        from workbench.executors.dispatch import run_async

        try:
            cfg = self.config()
        except WorkbenchError as exc:
            self.status.value = f"config error: {exc}"
            self.error = exc
            self._busy(False)
            return None
        if cfg.out_dir and not cfg.run_id:  # known up front: the live view reads its records
            from workbench.replay.prepare import new_run_id

            cfg = cfg.replace(run_id=new_run_id(cfg))
        self._stop = asyncio.Event()
        self._busy(True)
        self.error = None
        replay = asyncio.ensure_future(
            run_async(cfg, progress=self._on_progress, stop=self._stop))
        live = asyncio.ensure_future(self._follow(cfg, replay))
        try:
            self.result = await replay
        except Exception as exc:  # shown in the panel; the kernel must stay usable
            log.exception("panel run failed")
            self.error = exc
            self.status.value = f"failed: {type(exc).__name__}: {exc}"
        else:
            self.show(self.result)
        finally:
            live.cancel()
            self._busy(False)
        return self.result

    async def _follow(self, cfg: RunConfig, replay: asyncio.Future[Any]) -> None:
        """While ``replay`` runs, redraw the views from the records on disk so far."""
        import time

        from workbench.storage.rundir import load

        if not (cfg.out_dir and cfg.run_id and self.views):
            return
        run_dir = Path(cfg.out_dir) / cfg.run_id
        wait, seen = LIVE_MIN_S, -1
        for _ in range(100_000):  # bounded; ends with the run in practice
            await asyncio.wait([replay], timeout=wait)
            if replay.done():
                return
            if not (run_dir / "records.jsonl").exists():
                continue
            t = time.perf_counter()
            partial = load(run_dir)
            if len(partial.records) != seen:
                seen = len(partial.records)
                self._publish(partial, f"live: {seen} requests finished so far (run going)")
            wait = max(LIVE_MIN_S, (time.perf_counter() - t) / LIVE_DUTY)

    def _publish(self, result: RunResult, note: str = "") -> None:
        from workbench.report.sections import RunReport

        self.latest = result
        report = RunReport(result)
        for view in self.views:
            view.refresh(report, note)

    def _busy(self, busy: bool) -> None:
        self.run_button.disabled = busy
        self.stop_button.disabled = not busy
        for child in self.controls.__dict__.values():
            if isinstance(child, w.ValueWidget):
                child.disabled = busy

    def show(self, result: RunResult) -> None:
        """Summary table and latency CDFs of ``result`` in the output area.

        A run that kept its records on disk only is summarized (scanned) and
        plotted from there by ``summarize`` and ``plot`` themselves.
        """
        from workbench.metrics import summarize
        from workbench.report import tables
        from workbench.report.plots import plot
        from workbench.report.sections import RunReport

        summary = summarize(result)
        entries = [
            RunReport(result).headline(),  # the same line as the reports and the CLI
            tables.show(tables.summary_table(summary), caption="Latency of ok requests (ms)"),
            tables.show(tables.prefix_table(summary), caption="Prefix-cache hit rates (0–1)"),
            plot(result, "cdf"),
        ]
        self.output.outputs = tuple(_output_entry(e) for e in entries)
        self._publish(result)
        state = "stopped" if result.cancelled else "done"
        where = f" → {result.run_dir}" if result.run_dir else ""
        self.status.value = (
            f"{state}: {summary['ok']} ok, {summary['errors']} errors, "
            f"{summary['cancelled']} cancelled of {summary['requests']} requests{where}"
        )


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
    """Cache-size what-if in virtual time: KV blocks and block size → ``simulate`` → hit rates.

    ``simulate`` runs its own virtual-time loop, which cannot nest inside the
    kernel's running loop, so ``run`` hands it to a worker thread and awaits it:
    the kernel stays responsive and the notebook needs only a top-level await.
    """

    def __init__(self, cfg: RunConfig) -> None:
        knobs = {**_engine_defaults(), **cfg.target.engine}
        self.base = cfg
        self.num_blocks = w.SelectionSlider(
            options=list(NUM_BLOCKS), value=_closest(NUM_BLOCKS, int(knobs["num_blocks"])),
            description="KV blocks", style=STYLE, layout=WIDE)
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
        from workbench.executors.virtual import simulate
        from workbench.metrics import summarize
        from workbench.report import tables

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
                   tables.show(tables.summary_table(summary), caption="Latency (virtual ms)")]
        self.output.outputs = tuple(_output_entry(e) for e in entries)
        self.status.value = f"done: {summary['requests']} requests in virtual time"
        return self.result


def what_if(cfg: RunConfig | dict[str, Any]) -> WhatIf:
    """Sliders for the embedded engine's cache over ``cfg`` (see ``WhatIf``)."""
    return WhatIf(cfg if isinstance(cfg, RunConfig) else RunConfig.from_dict(cfg))
