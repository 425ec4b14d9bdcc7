"""Fault switches of the embedded engine's HTTP server.

Each switch reproduces one failure a real serving stack shows, so the client's
guards (error records, stream timeouts, missing-usage flags, SGLang integrity
checks) can be tested against something that misbehaves on purpose. All are
off by default; the engine core never sees them (they live at the wire).
"""

from __future__ import annotations

import random
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
    """What the server does wrong, and when.

    ``error_rate``: fraction of generation requests answered with HTTP 500 and a
    JSON error body before reaching the engine (drawn from a ``random.Random``
    seeded with the engine seed, one draw per request in arrival order).
    ``disconnect_after_tokens``: close the connection abruptly once this many
    output tokens were sent (the engine request is aborted).
    ``stall_after_tokens`` / ``stall_s``: after that many tokens, send nothing
    for ``stall_s`` seconds, then carry on.
    ``omit_usage``: no ``usage`` block (OpenAI/vLLM shapes) and no
    ``cached_tokens`` in SGLang ``meta_info``.
    ``omit_cached_tokens``: usage without a cached-token count (no
    ``prompt_tokens_details``; SGLang ``meta_info`` without ``cached_tokens``), as
    vLLM sends it without ``--enable-prompt-tokens-details``.
    ``sglang_cumulative``: SGLang ``output_ids`` repeat everything so far (a
    server started without ``--stream-output``).
    ``sglang_prompt_echo``: this many prompt-tail ids prepended to the first
    SGLang ``output_ids`` (sgl-project/sglang#10896).
    ``overrun_tokens``: a server that ignores ``max_tokens``: after the engine's
    last token, stream this many more output tokens (the finish reason moves to
    the last of them, usage counts them) before ending the stream.
    ``never_stop``: a server that never ends the stream: after the engine's last
    token, keep streaming output tokens until the client goes away (bounded at
    ``NEVER_STOP_MAX_TOKENS`` so a server nobody reads from still ends).
    ``error_status``: the HTTP status of an ``error_rate`` fault (200: a gateway that
    answers a failed stream with 200 and a JSON error body).
    ``error_echo_auth``: the ``error_rate`` fault's message repeats the request's
    ``Authorization`` header (servers and proxies that echo headers in errors).
    ``usage_fault``: the usage counts are broken: ``"string"`` (``prompt_tokens:
    "many"``), ``"huge"`` (``cached_tokens: 10**30``), ``"negative"``
    (``prompt_tokens: -5``); in every protocol's usage (and SGLang's ``meta_info``).
    ``text_cumulative``: chat ``delta.content`` and completions ``text`` repeat all
    the text so far (a server or proxy that does not stream deltas).
    """

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


class FaultDice:
    """The seeded draw behind ``error_rate``: deterministic per server start."""

    def __init__(self, faults: Faults, seed: int) -> None:
        self._rate = faults.error_rate
        self._rng = random.Random(seed)

    def should_fail(self) -> bool:
        if self._rate <= 0.0:
            return False
        return self._rng.random() < self._rate
