"""The one type-and-range checker of configuration values, and its range table: a field's
type is its annotation, its range ``RANGES[path]``; ``check_dataclass`` raises one
``ConfigError`` naming the first bad field (docs/config-bounds.md, "Type rules").
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workbench.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Range:
    """``lo <= x <= hi`` (``lo < x`` when ``open_lo``); ``None`` leaves a side open."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False

    def holds(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.open_lo else x < self.lo):
            return False
        return self.hi is None or x <= self.hi


# the bounds and why each is what it is: docs/config-bounds.md
MAX_COUNT = 1_000_000  # units, slots, sessions, requests
MAX_TOKENS = 2**24  # a context
MAX_SECONDS = 7 * 24 * 3600.0  # a timeout, duration or interval
MIN_RATE = 1e-6  # units/s
MAX_OUTPUT_TOKENS = 10_000_000  # ``output_len`` fixed:K and budget:T
MAX_DEPTH = 64  # nesting of a configuration value
MAX_NODES = 1_000_000  # values of a configuration document, YAML aliases expanded

RANGES: dict[str, Range] = {
    "trace.max_items": Range(1, 10**9),
    "trace.offset": Range(0, 10**9),
    "context.max_model_len": Range(1, MAX_TOKENS),
    "context.major_compaction_min_drop_tokens": Range(0, MAX_TOKENS),
    "context.major_compaction_min_drop_ratio": Range(0, 1),
    "arrival.rate": Range(MIN_RATE, 1e6),
    "arrival.burstiness": Range(0, 1e6, open_lo=True),
    "arrival.ramp_up_start_rps": Range(0, 1e6),
    "arrival.ramp_up_end_rps": Range(MIN_RATE, 1e6),
    "arrival.ramp_up_duration_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.max_concurrency": Range(1, MAX_COUNT),
    "arrival.max_streams": Range(1, MAX_COUNT),
    "arrival.session_budget_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.duration_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.fuse_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.warmup": Range(0, MAX_COUNT),
    "arrival.stop_after_refused": Range(1, MAX_COUNT),
    "arrival.tool_wait_scale": Range(0, 1e6),
    "arrival.request_timeout_s": Range(0, MAX_SECONDS, open_lo=True),
    "arrival.stream_idle_timeout_s": Range(0, MAX_SECONDS, open_lo=True),
    "backend.scrape_interval_s": Range(0, 3600.0),
    "backend.options.temperature": Range(0, 100.0),
    "backend.options.initial_overhead_tokens": Range(0, MAX_TOKENS),
    "backend.options.turn_overhead_tokens": Range(0, MAX_TOKENS),
    "backend.options.max_sessions": Range(1, 10**8),
    "executor.workers": Range(1, 1024),
    "executor.record_flush_ms": Range(0, 60_000.0),
    "executor.pace_ms": Range(0, 1000.0),
    "executor.connection_idle_s": Range(0, 3600.0, open_lo=True),
    "seed": Range(0, 2**32 - 1),
    "slo": Range(0, None, open_lo=True),  # every bound, in ms
    # the embedded engine (target.engine knobs: EngineConfig and Faults fields)
    "target.engine.block_size": Range(1, 4096),
    "target.engine.num_blocks": Range(1, 2**26),
    "target.engine.max_num_batched_tokens": Range(1, MAX_TOKENS),
    "target.engine.max_num_seqs": Range(1, MAX_COUNT),
    "target.engine.admission_reserve": Range(0, 1),  # SGLang's new_token_ratio (0: none)
    "target.engine.max_model_len": Range(1, MAX_TOKENS),
    "target.engine.speedup": Range(0, 1e9, open_lo=True),
    "target.engine.decode_floor_ms": Range(0, 1e6),
    "target.engine.request_overhead_ms": Range(0, 1e6),
    "target.engine.intake_ms": Range(0, 1e6),
    "target.engine.idle_wake_ms": Range(0, 1e6),
    "target.engine.decode_seq_ms": Range(0, 1e6),
    "target.engine.host_kv_gb": Range(0, 1e6),  # host KV tier per worker (docs/hardware.md)
    "target.engine.host_kv_gbps": Range(0, 1e5),
    "target.engine.seed": Range(0, 2**32 - 1),
    "target.engine.error_rate": Range(0, 1),
    "target.engine.disconnect_after_tokens": Range(0, MAX_TOKENS),
    "target.engine.stall_after_tokens": Range(0, MAX_TOKENS),
    "target.engine.stall_s": Range(0, MAX_SECONDS),
    "target.engine.sglang_prompt_echo": Range(0, MAX_TOKENS),
    "target.engine.overrun_tokens": Range(0, MAX_TOKENS),
    "target.engine.error_status": Range(200, 599),
}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def _describe(alt: Any, rng: Range | None) -> str:
    if alt is type(None):
        return "null"
    if alt is bool:
        return "true or false"
    if alt is str:
        return "a string"
    if alt in (int, float):
        noun = "integer" if alt is int else "finite number"
        if rng is None:
            return f"an {noun}" if alt is int else f"a {noun}"
        if rng.hi is None and rng.lo == 0:
            return f"a positive {noun}" if rng.open_lo else f"a non-negative {noun}"
        if rng.hi is None and rng.lo == 1 and alt is int:
            return "a positive integer"
        lo = "(" if rng.open_lo else "["
        article = "an" if alt is int else "a"
        return f"{article} {noun} in {lo}{_fmt(rng.lo or 0)}, {_fmt(rng.hi or math.inf)}]"
    origin = typing.get_origin(alt)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(alt))
    if origin is dict or alt is dict:
        args = typing.get_args(alt)
        if len(args) == 2 and args[1] is not Any:
            return f"a mapping of names to {_describe(args[1], rng).removeprefix('a ')}s"
        return "a mapping"
    if origin is tuple:
        args = typing.get_args(alt)
        return f"a list of {len(args)} {_describe(args[0], None).removeprefix('a ')}s"
    if origin is list:
        return f"a list of {_describe(typing.get_args(alt)[0], None).removeprefix('a ')}s"
    return getattr(alt, "__name__", str(alt))


def _alternatives(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _matches(value: Any, alt: Any, rng: Range | None) -> bool:
    """``value`` is of type ``alt`` and, for numbers, inside ``rng``."""
    if alt is Any:
        return True
    if alt is type(None):
        return value is None
    if alt is bool:
        return type(value) is bool
    if alt is str:
        return isinstance(value, str)
    if alt is int:
        return (
            isinstance(value, int) and not isinstance(value, bool)
            and (rng is None or rng.holds(value))
        )  # fmt: skip
    if alt is float:
        return (
            isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and (rng is None or rng.holds(value))
        )  # fmt: skip
    origin = typing.get_origin(alt)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in typing.get_args(alt))
    if origin is dict or alt is dict:
        if not isinstance(value, Mapping):
            return False
        args = typing.get_args(alt) or (Any, Any)
        return all(
            _matches(k, args[0], None) and _matches(v, args[1], rng) for k, v in value.items()
        )
    if origin is tuple:
        args = typing.get_args(alt)
        return (
            isinstance(value, list | tuple) and len(value) == len(args)
            and all(_matches(v, a, rng) for v, a in zip(value, args, strict=True))
        )  # fmt: skip
    if origin is list:
        return isinstance(value, list | tuple) and all(
            _matches(v, typing.get_args(alt)[0], rng) for v in value
        )
    if isinstance(alt, type):
        try:
            return isinstance(value, alt)
        except TypeError:  # a Protocol that is not runtime-checkable: the consumer checks it
            return True
    return True  # a type this checker does not know (a Protocol): the consumer checks it


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_value(path: str, value: Any, tp: Any, rng: Range | None = None) -> None:
    """Raise ``ConfigError`` unless ``value`` fits the annotation ``tp`` (and ``rng``)."""
    rng = rng if rng is not None else RANGES.get(path)
    alts = _alternatives(tp)
    if any(_matches(value, alt, rng) for alt in alts):
        return
    expected = " or ".join(_describe(alt, rng) for alt in alts)
    raise ConfigError(f"{path}: expected {expected}, got {show(value)} ({type(value).__name__})",
                      field=path)


_HINTS: dict[type, dict[str, Any]] = {}


def hints_of(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass (or its ``__init__``), cached: read only."""
    hints = _HINTS.get(cls)
    if hints is None:
        target = cls if dataclasses.is_dataclass(cls) else cls.__init__  # type: ignore[misc]
        hints = _HINTS[cls] = typing.get_type_hints(target)
    return hints


def check_dataclass(obj: Any, path: str = "") -> None:
    """Type- and range-check every field of the dataclass instance ``obj``."""
    hints = hints_of(type(obj))
    for f in dataclasses.fields(obj):
        check_value(f"{path}.{f.name}" if path else f.name, getattr(obj, f.name), hints[f.name])


def check_mapping(path: str, values: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
    """Check the known names of ``values`` against ``hints`` (unknown names: the caller's)."""
    for name, value in values.items():
        if name in hints:
            check_value(f"{path}.{name}", value, hints[name])
