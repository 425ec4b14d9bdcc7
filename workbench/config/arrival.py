"""Axis 3 of a run config: when a unit may start, how many run at once, how long a run
lasts, and how long each answer is (docs/arrival.md)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.arrival import MODES, ArrivalMode
from workbench.arrival.modes import modes_with
from workbench.arrival.processes import ArrivalProcess
from workbench.errors import ConfigError
from workbench.ranges import MAX_OUTPUT_TOKENS


@dataclass(frozen=True)
class ArrivalSpec:
    """Axis 3: when a unit may start and how many run at once."""

    mode: str = "trace-timed"
    rate: float | None = None
    # arrival processes (modes poisson, gamma, constant; docs/arrival.md "Arrival processes"):
    # gamma's shape, and a ramp of the rate from start to end over the units (vLLM's
    # --burstiness, --ramp-up-strategy, --ramp-up-start-rps, --ramp-up-end-rps), or over
    # ramp_up_duration_s seconds of time
    burstiness: float = 1.0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    ramp_up_duration_s: float | None = None
    max_concurrency: int | None = None
    # requests in flight at once (streams), beside max_concurrency's agent tasks
    # (docs/session-graphs.md); None: no cap
    max_streams: int | None = None
    duration_s: float | None = None
    drain: str = "finish"  # closed-loop at the deadline: "finish" or "truncate" sessions
    fuse_s: float | None = None  # runaway fuse: hard cap on the run's wall time
    warmup: int = 0
    tool_wait_scale: float = 1.0
    output_len: str = "trace"  # trace | fixed:K | budget:T
    stop_session_on_error: bool = True
    # a unit's time budget from its admission: past it, no further round starts (the
    # unit is truncated, reason "budget", and left out of per-session statistics)
    session_budget_s: float | None = None
    # a request may take at most 10 min end to end and stay silent at most 60 s (null: no
    # bound); a hung server then ends as error records, never as a run that never ends
    request_timeout_s: float | None = 600.0
    stream_idle_timeout_s: float | None = 60.0

    @property
    def registered_mode(self) -> ArrivalMode:
        """The registered arrival mode (``workbench.arrival.MODES``) and its capabilities."""
        return MODES.get(self.mode)

    @property
    def loops_until_deadline(self) -> bool:
        """A closed-loop mode with ``duration_s``: the unit list starts over until the
        deadline, so the request count is not known up front."""
        return self.registered_mode.closed_loop and self.duration_s is not None

    def arrival_process(self) -> ArrivalProcess | None:
        """The arrival process of a process mode (``poisson``, ``gamma``, ``constant``), else
        None."""
        if not self.registered_mode.process:
            return None
        return ArrivalProcess(self.mode, self.rate, self.burstiness, self.ramp_up_strategy,
                              self.ramp_up_start_rps, self.ramp_up_end_rps,
                              self.ramp_up_duration_s)

    def check(self) -> None:
        """The rules of this axis alone, on values already of their type and range: the
        mode exists, and the fields given are ones it takes."""
        if self.mode not in MODES:
            raise ConfigError(
                f"arrival.mode {self.mode!r} is unknown; valid: {', '.join(MODES.names())}"
            )
        mode = self.registered_mode
        if self.rate is not None and not mode.takes_rate:
            raise ConfigError(
                f"arrival.rate rescales trace arrivals and cannot be used with mode "
                f"{self.mode!r}; drop rate or use mode {modes_with('takes_rate')}"
            )
        self._check_process()
        if mode.closed_loop and not self.max_concurrency:
            raise ConfigError(
                f"arrival.mode {self.mode!r} needs max_concurrency (sessions active)")
        if self.duration_s is not None and not mode.closed_loop:
            raise ConfigError(
                f"arrival.duration_s only applies to mode {modes_with('closed_loop')}"
            )
        if self.drain not in ("finish", "truncate"):
            raise ConfigError(
                f"arrival.drain must be 'finish' or 'truncate', got {self.drain!r}")
        parse_output_policy(self.output_len)

    def _check_process(self) -> None:
        process = self.arrival_process()
        if process is not None:
            process.check()
        elif (self.burstiness != 1.0 or self.ramp_up_strategy is not None
              or self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None
              or self.ramp_up_duration_s is not None):
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
        f"(K, T integers in [1, {MAX_OUTPUT_TOKENS:,}] tokens)"
    )
