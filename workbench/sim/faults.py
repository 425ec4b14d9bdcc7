"""Fault switches of the embedded engine's HTTP server: each one failure a real serving
stack shows, for testing the client's guards (docs/embedded-engine.md, "Fault switches")."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import ConfigError
from workbench.ranges import check_dataclass

#: ``never_stop``'s bound: far past any cut a client makes, still a finite loop
NEVER_STOP_MAX_TOKENS = 10_000_000
USAGE_FAULTS = (None, "string", "huge", "negative")
#: where the engine's knobs are in a run config, and their rows in ``workbench.ranges.RANGES``
KNOBS = "target.engine"


def broken_usage(kind: str | None, counts: dict) -> dict:
    """``counts`` (a usage block or SGLang ``meta_info``) with the ``usage_fault`` applied."""
    if kind == "string":
        return {**counts, "prompt_tokens": "many"}
    if kind == "huge":
        if isinstance(counts.get("prompt_tokens_details"), dict):
            return {**counts, "prompt_tokens_details": {"cached_tokens": 10**30}}
        return {**counts, "cached_tokens": 10**30}
    if kind == "negative":
        return {**counts, "prompt_tokens": -5}
    return counts


@dataclass(frozen=True, slots=True)
class Faults:
    """What the server does wrong, and when (each switch: docs/embedded-engine.md)."""

    error_rate: float = 0.0
    disconnect_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    stall_s: float = 0.0
    omit_usage: bool = False
    omit_cached_tokens: bool = False
    sglang_cumulative: bool = False
    sglang_prompt_echo: int = 0
    overrun_tokens: int | None = None
    never_stop: bool = False
    error_status: int = 500
    error_echo_auth: bool = False
    usage_fault: str | None = None
    text_cumulative: bool = False

    def __post_init__(self) -> None:
        check_dataclass(self, KNOBS)  # types and ranges (workbench.ranges)
        if self.usage_fault not in USAGE_FAULTS:
            raise ConfigError(f"{KNOBS}.usage_fault: expected one of {USAGE_FAULTS}, "
                              f"got {self.usage_fault!r}")

    @property
    def active(self) -> bool:
        return self != Faults()

    @property
    def extra_tokens(self) -> int:
        """Output tokens streamed past the engine's last one (0: none)."""
        if self.never_stop:
            return NEVER_STOP_MAX_TOKENS
        return self.overrun_tokens or 0

