"""Axis 3 of a run config: when a unit may start, how many run at once, how long a run
lasts, and how long each answer is (docs/arrival.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from workbench.arrival import MODES, ArrivalMode
from workbench.arrival.modes import modes_with
from workbench.arrival.processes import SHAPE_FIELDS, ArrivalProcess, RampStrategy
from workbench.errors import ConfigError
from workbench.ranges import MAX_OUTPUT_TOKENS

#: ``arrival.stop_after_refused``'s default (docs/measurement-rules.md, "A server that dies")
STOP_AFTER_REFUSED = 20


@dataclass(frozen=True)
class ArrivalSpec:
    """Axis 3: when a unit may start and how many run at once (docs/arrival.md)."""

    mode: str = "trace-timed"
    rate: float | None = None
    # the arrival process's shape (modes poisson, gamma, constant): ``ArrivalProcess``
    burstiness: float = 1.0
    ramp_up_strategy: RampStrategy | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    ramp_up_duration_s: float | None = None
    max_concurrency: int | None = None
    max_streams: int | None = None
    duration_s: float | None = None
    drain: Literal["finish", "truncate"] = "finish"
    fuse_s: float | None = None
    warmup: int = 0
    tool_wait_scale: float = 1.0
    output_len: str = "trace"
    stop_session_on_error: bool = True
    # connections in a row that could not be made before the run stops (a dead server,
    # docs/measurement-rules.md "A server that dies"); null: never
    stop_after_refused: int | None = STOP_AFTER_REFUSED
    session_budget_s: float | None = None
    request_timeout_s: float | None = 600.0
    stream_idle_timeout_s: float | None = 60.0

    @property
    def registered_mode(self) -> ArrivalMode:
        """The registered arrival mode (``workbench.arrival.MODES``) and its capabilities."""
        return MODES.get(self.mode)

    @property
    def loops_until_deadline(self) -> bool:
        """A closed-loop mode with ``duration_s``: the request count is not known up front."""
        return self.registered_mode.closed_loop and self.duration_s is not None

    def virtual_bounds(self, stream: bool) -> tuple[float | None, float | None]:
        """``(request_timeout_s, stream_idle_timeout_s)`` as a run in virtual time applies them:
        each only where it differs from its default (the defaults guard against a hung
        server, which the simulated engine cannot be), the idle one only on a ``stream``;
        None: not applied (docs/arrival.md, "Timeouts in virtual time")."""
        default = {f.name: f.default for f in fields(ArrivalSpec)}
        req = self.request_timeout_s
        idle = self.stream_idle_timeout_s if stream else None
        return (None if req == default["request_timeout_s"] else req,
                None if idle == default["stream_idle_timeout_s"] else idle)

    def arrival_process(self) -> ArrivalProcess | None:
        """The arrival process of a process mode, else None."""
        if not self.registered_mode.process:
            return None
        return ArrivalProcess(self.mode, self.rate,
                              **{name: getattr(self, name) for name in SHAPE_FIELDS})

    def check(self) -> None:
        """The mode exists, and the fields given are ones it takes."""
        if self.mode not in MODES:
            raise ConfigError(
                f"arrival.mode {self.mode!r} is unknown; valid: {', '.join(MODES.names())}",
                field="arrival.mode")
        mode = self.registered_mode
        if self.rate is not None and not mode.takes_rate:
            raise ConfigError(
                f"arrival.rate rescales trace arrivals and cannot be used with mode "
                f"{self.mode!r}; drop rate or use mode {modes_with('takes_rate')}"
            )
        self._check_process()
        if mode.closed_loop and not self.max_concurrency:
            raise ConfigError(f"arrival.mode {self.mode!r} needs max_concurrency (sessions active)")
        if self.duration_s is not None and not mode.closed_loop:
            raise ConfigError(
                f"arrival.duration_s only applies to mode {modes_with('closed_loop')}"
            )
        parse_output_policy(self.output_len)

    def _check_process(self) -> None:
        process = self.arrival_process()
        if process is not None:
            process.check()
        elif any(getattr(self, n) != getattr(ArrivalProcess, n) for n in SHAPE_FIELDS):
            raise ConfigError(
                f"arrival.burstiness and arrival.ramp_up_* shape an arrival process: use mode "
                f"{modes_with('process')} (mode {self.mode!r} draws no arrivals)"
            )


def parse_output_policy(spec: str) -> tuple[str, int]:
    """``trace`` → ("trace", 0); ``fixed:K`` → ("fixed", K); ``budget:T`` → ("budget", T),
    with K and T integers in 1..``MAX_OUTPUT_TOKENS`` (docs/config-bounds.md)."""
    kind, _, num = spec.partition(":")
    if kind == "trace" and not num:
        return "trace", 0
    digits = num.isascii() and num.isdigit() and len(num) <= 12
    if kind in ("fixed", "budget") and digits and 0 < int(num) <= MAX_OUTPUT_TOKENS:
        return kind, int(num)
    raise ConfigError(
        f"arrival.output_len {spec!r} is invalid; use 'trace', 'fixed:K' or 'budget:T' "
        f"(K, T integers in [1, {MAX_OUTPUT_TOKENS:,}] tokens)", field="arrival.output_len")
