"""The panel's input fields over a ``RunConfig`` (``Controls``), checked as they are typed.

``Controls.apply(base)`` gives the same ``RunConfig`` a notebook's parameters cell builds,
and every message shown is ``RunConfig``'s own. Which field shows when, 0 as "not set",
and the ``WholeNumber`` fields: docs/notebooks.md, "The panel"."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import ipywidgets as w
import traitlets

from workbench import data
from workbench.arrival import MODES
from workbench.arrival.processes import RAMP_STRATEGIES
from workbench.config import RunConfig, available
from workbench.context import POLICIES
from workbench.errors import ConfigError, WorkbenchError
from workbench.sim.config import EngineConfig
from workbench.workloads.standard import bundled_or_path

POLICY_DEFAULT = "(trace default)"
OWN_FILE = "a file of my own…"
ENGINE_KNOBS = ("speedup", "block_size", "num_blocks")
OUTPUT_LENS = ("trace", "fixed:256", "budget:1024")
NO_RAMP = "none"


def wide() -> w.Layout:
    """A wide field's own layout (a shared Layout would hide every field that shares it)."""
    return w.Layout(width="460px")


STYLE = {"description_width": "130px"}


def resolve_trace(value: str) -> str:
    """A path as typed, or the on-disk path of a bundled trace name."""
    return str(bundled_or_path(value))


def bundled_name(path: str) -> str | None:
    """The bundled trace a path (or name) is, if it is one."""
    if path in data.files():
        return path
    for name in data.files():
        if path and Path(path) == data.path(name):
            return name
    return None


def engine_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(EngineConfig) if f.name in ENGINE_KNOBS}


WHOLE = re.compile(r"[+-]?\d+")


class WholeNumber(w.Text):
    """A whole-number field kept as the text typed, read by ``number`` (why not ``IntText``:
    docs/notebooks.md, "The panel")."""

    value = traitlets.CUnicode(help="the field's text as typed").tag(sync=True)

    @property
    def number(self) -> int:
        """The whole number typed; ``ConfigError`` naming the field when it is not one."""
        text = self.value.strip()
        if WHOLE.fullmatch(text) is None:
            raise ConfigError(f"{self.description}: {text!r} is not a whole number"
                              if text else f"{self.description}: type a whole number")
        return int(text)


def _float(value: float, description: str) -> w.FloatText:
    return w.FloatText(value=value, description=description, style=STYLE)


def _whole(value: int, description: str) -> WholeNumber:
    return WholeNumber(value=value, description=description, style=STYLE)


def _number(widget: w.ValueWidget) -> Any:
    """A numeric field's value (a ``WholeNumber``'s, checked)."""
    return widget.number if isinstance(widget, WholeNumber) else widget.value


def _show(widget: w.Widget, visible: bool) -> None:
    widget.layout.display = None if visible else "none"


class Controls:
    """The editable fields, initialised from a RunConfig (see the module docstring)."""

    def __init__(self, cfg: RunConfig) -> None:
        names = available()
        t, a, b = cfg.trace, cfg.arrival, cfg.backend
        bundled = bundled_name(t.path)
        self.trace_choice = w.Dropdown(options=[*data.files(), OWN_FILE],
                                       value=bundled or OWN_FILE, description="trace",
                                       layout=wide(), style=STYLE)
        self.trace_path = w.Text(value="" if bundled else t.path, description="trace file",
                                 placeholder="path/to/trace.jsonl (any supported format)",
                                 layout=wide(), style=STYLE)
        self.format = w.Dropdown(options=names["trace_formats"], value=t.format,
                                 description="format", style=STYLE)
        self.max_items = _whole(t.max_items or 0, "units (0 = all)")
        policy = POLICIES.canonical(cfg.context.policy) if cfg.context.policy else None
        self.policy = w.Dropdown(options=[POLICY_DEFAULT, *POLICIES.names()],
                                 value=policy or POLICY_DEFAULT, description="context policy",
                                 style=STYLE)
        self.arrival = w.Dropdown(options=names["arrival_modes"], value=a.mode,
                                  description="arrival", style=STYLE)
        self.rate = _float(a.rate or 0.0, "rate /s (0 = trace)")
        self._process_fields(cfg)
        self.max_concurrency = _whole(a.max_concurrency or 0, "sessions at once (0 = ∞)")
        self.duration = _float(a.duration_s or 0.0, "duration s (0 = all)")
        self.warmup = _whole(a.warmup, "warm-up sessions")
        self.tool_wait_scale = _float(a.tool_wait_scale, "tool-wait scale")
        self.output_len = w.Combobox(value=a.output_len, options=list(OUTPUT_LENS),
                                     description="output length", ensure_option=False,
                                     placeholder="trace | fixed:K | budget:T", style=STYLE)
        self.backend = w.Dropdown(options=names["backends"], value=b.name,
                                  description="backend", style=STYLE)
        self.stream = w.Checkbox(value=b.stream, description="stream (off: TTFT = E2E)",
                                 indent=False)
        self._target(cfg)
        for child in self.fields():
            child.observe(self._layout, names="value")
        self._layout()

    def _process_fields(self, cfg: RunConfig) -> None:
        """An arrival process's burstiness and rate ramp (docs/arrival.md)."""
        a = cfg.arrival
        self.burstiness = _float(a.burstiness, "burstiness (gamma)")
        self.ramp = w.Dropdown(options=[NO_RAMP, *RAMP_STRATEGIES],
                               value=a.ramp_up_strategy or NO_RAMP, description="rate ramp",
                               style=STYLE)
        self.ramp_start = _float(a.ramp_up_start_rps or 0.0, "ramp from /s")
        self.ramp_end = _float(a.ramp_up_end_rps or 0.0, "ramp to /s")
        self.ramp_duration = _float(a.ramp_up_duration_s or 0.0, "ramp over s (0 = units)")

    def _target(self, cfg: RunConfig) -> None:
        knobs = {**engine_defaults(), **cfg.target.engine}
        b = cfg.backend
        self.target = w.ToggleButtons(options=["sim", "url"],
                                      value="sim" if cfg.target.is_sim else "url",
                                      description="target", style=STYLE,
                                      tooltips=["the embedded engine, in a process of its own",
                                                "a running server (vLLM, SGLang, …)"])
        self.url = w.Text(value="" if cfg.target.is_sim else cfg.target.url,
                          placeholder="http://127.0.0.1:8000", description="server URL",
                          layout=wide(), style=STYLE)
        self.model = w.Text(value=str(b.options.get("model") or ""), description="model",
                            placeholder="(the server's only model)", style=STYLE)
        self.api_key_env = w.Text(value=b.api_key_env or "", description="API key variable",
                                  placeholder="(none)", style=STYLE)
        self.speedup = _float(knobs["speedup"], "sim speed-up ×")
        self.block_size = _whole(knobs["block_size"], "sim block size")
        self.num_blocks = _whole(knobs["num_blocks"], "sim KV blocks")

    def fields(self) -> list[w.ValueWidget]:
        """Every input field (the panel watches and disables them)."""
        return [v for v in vars(self).values() if isinstance(v, w.ValueWidget)]

    def _layout(self, _change: Any = None) -> None:
        """Show the fields that apply to what is chosen now."""
        _show(self.trace_path, self.trace_choice.value == OWN_FILE)
        mode = MODES.get(self.arrival.value)  # what the mode declares, not its name
        _show(self.rate, mode.takes_rate and not self._ramped())  # a ramp sets the rate
        _show(self.duration, mode.closed_loop)
        _show(self.burstiness, "burstiness" in mode.params)
        _show(self.ramp, mode.process)
        for field in (self.ramp_start, self.ramp_end, self.ramp_duration):
            _show(field, self._ramped())
        sim = self.target.value == "sim"
        for knob in (self.speedup, self.block_size, self.num_blocks):
            _show(knob, sim)
        for field in (self.url, self.model, self.api_key_env):
            _show(field, not sim)

    def sections(self) -> list[w.Widget]:
        row = w.HBox
        return [
            w.HTML("<b>1 trace</b>"), row([self.trace_choice, self.format]), self.trace_path,
            self.max_items,
            w.HTML("<b>2 context</b>"), self.policy,
            w.HTML("<b>3 arrival &amp; admission</b>"),
            row([self.arrival, self.rate, self.duration, self.burstiness]),
            row([self.ramp, self.ramp_start, self.ramp_end, self.ramp_duration]),
            row([self.max_concurrency, self.warmup]),
            row([self.tool_wait_scale, self.output_len]),
            w.HTML("<b>4 backend</b>"), row([self.backend, self.stream]),
            w.HTML("<b>target</b>"), row([self.target, self.url]),
            row([self.model, self.api_key_env]),
            row([self.speedup, self.block_size, self.num_blocks]),
        ]

    def trace(self) -> str:
        """The trace file the fields name (a bundled one's path on disk)."""
        if self.trace_choice.value == OWN_FILE:
            return self.trace_path.value.strip()
        return resolve_trace(self.trace_choice.value)

    def apply(self, base: RunConfig) -> RunConfig:
        """``base`` with every controlled field replaced; ``ConfigError`` when invalid."""
        d = base.to_dict()
        d["trace"].update(path=self.trace(), format=self.format.value,
                          max_items=self.max_items.number or None)
        d["context"]["policy"] = None if self.policy.value == POLICY_DEFAULT else self.policy.value
        arrival = self.arrival.value
        mode = MODES.get(arrival)
        d["arrival"].update(
            mode=arrival, max_concurrency=self.max_concurrency.number or None,
            rate=(self.rate.value or None) if mode.takes_rate and not self._ramped() else None,
            duration_s=(self.duration.value or None) if mode.closed_loop else None,
            warmup=self.warmup.number, tool_wait_scale=self.tool_wait_scale.value,
            output_len=self.output_len.value.strip(), **self._process(mode.process))
        d["backend"]["name"] = self.backend.value
        d["backend"]["stream"] = self.stream.value
        d["target"] = self._target_dict(base)
        if self.target.value == "url":
            options = dict(d["backend"]["options"])
            options.pop("model", None)
            if self.model.value.strip():
                options["model"] = self.model.value.strip()
            d["backend"].update(options=options, api_key_env=self.api_key_env.value.strip() or None)
        return RunConfig.from_dict(d)

    def _ramped(self) -> bool:
        """Whether the fields ask for a ramp of an arrival process's rate."""
        return MODES.get(self.arrival.value).process and self.ramp.value != NO_RAMP

    def _process(self, process: bool) -> dict[str, Any]:
        """The arrival process's fields for ``apply`` (defaults where no process is drawn)."""
        ramp = self._ramped()  # (a ramp is only ever of a process)
        return {
            "burstiness": self.burstiness.value if process else 1.0,
            "ramp_up_strategy": self.ramp.value if ramp else None,
            "ramp_up_start_rps": self.ramp_start.value if ramp else None,
            "ramp_up_end_rps": self.ramp_end.value if ramp else None,
            "ramp_up_duration_s": (self.ramp_duration.value or None) if ramp else None,
        }

    def _target_dict(self, base: RunConfig) -> dict[str, Any]:
        engine = dict(base.target.engine)
        defaults = engine_defaults()
        for knob in ENGINE_KNOBS:
            value = _number(getattr(self, knob))
            if knob in engine or value != defaults[knob]:
                engine[knob] = value
        if self.target.value == "sim":
            return {"url": "sim", "engine": engine, "in_process": base.target.in_process}
        if not self.url.value.strip():
            raise WorkbenchError("target 'url' needs a server URL (e.g. http://127.0.0.1:8000)")
        return {"url": self.url.value.strip(), "engine": engine}

    def check(self, base: RunConfig) -> str | None:
        """Why the fields do not make a runnable config (``None``: they do)."""
        try:
            self.apply(base)
        except WorkbenchError as exc:
            return str(exc)
        path = self.trace()
        if not path:
            return "trace: pick a bundled trace or type the path of a trace file"
        if path.startswith("synthetic:"):  # a standard workload: drawn, checked on load
            return None
        if not Path(path).is_file():
            return f"trace.path {path!r}: no such file"
        return None
