"""The typed model everything else speaks.

``Round``/``Unit``/``Workload`` are what a trace becomes (axis 1). They are
immutable and keep file order: units are released in (arrival, file order), so
file order is the tie-break under equal arrivals (and what ``max_items`` counts);
nothing ever re-sorts units by id.

``RequestRecord`` is what one replayed request becomes: raw integer-ns
timestamps and server usage, never derived metrics (``metrics.py`` derives those
later). ``RunResult`` bundles the records of one run with its manifest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

UnitKind = Literal["session", "independent"]
SpawnTrigger = Literal["round_start", "round_end"]


@dataclass(frozen=True, slots=True)
class Round:
    """One LLM request of a unit, as the trace describes it.

    ``prefix_len`` is the tokens reused from the conversation so far (raw traces
    may claim a prefix that will not exist; a context policy fixes that),
    ``input_len`` the fresh tokens appended, ``output_len`` the tokens to
    generate. ``arrival_ms`` is the unit's start offset (only round 0 uses it).
    ``hash_ids`` are block ids (Mooncake/Dynamo): equal leading ids mean a shared
    prefix, and the prompt is synthesized from them instead of from a context.
    """

    request_id: str
    session_id: str
    round_idx: int
    arrival_ms: float
    prefix_len: int
    input_len: int
    output_len: int
    tool_wait_after_ms: float = 0.0
    hash_ids: tuple[int, ...] | None = None
    reset_before: bool = False

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + self.input_len


@dataclass(frozen=True, slots=True)
class Spawn:
    """How a child unit hangs off its parent in a session graph (docs/session-graphs.md).

    The child starts ``delay_ms`` after round ``round_idx`` of unit ``parent_id``
    starts (``round_start``: its request is sent) or ends (``round_end``); the
    parent's round ``join_round`` does not start before the child (and its own
    descendants) ended, ``None``: no round waits (the agent task still does).
    ``line`` is where the trace said so (errors name it).
    """

    parent_id: str
    round_idx: int
    trigger: SpawnTrigger = "round_end"
    delay_ms: float = 0.0
    join_round: int | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class Unit:
    """A session (ordered rounds sharing one conversation) or one independent request.

    ``spawn`` is set on a child of a session graph (a sub-agent): it starts when its
    parent says, not at ``arrival_ms`` (``workbench.traces.graph``).
    """

    unit_id: str
    kind: UnitKind
    arrival_ms: float
    rounds: tuple[Round, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    spawn: Spawn | None = None

    @property
    def is_session(self) -> bool:
        return self.kind == "session"


@dataclass(frozen=True, slots=True)
class Workload:
    """An ordered list of units loaded from one trace.

    ``fmt`` names the reader that produced it; ``block_size`` is the token size
    of one ``hash_ids`` block when rounds carry them; ``meta`` holds reader
    specifics (sidecar manifest, detection note, tool-wait mode, ...).
    """

    units: tuple[Unit, ...]
    fmt: str
    source: str = ""
    block_size: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def rounds(self) -> Iterator[Round]:
        """Every round, in file order (unit file order, then round order)."""
        for unit in self.units:
            yield from unit.rounds

    @property
    def n_rounds(self) -> int:
        return sum(len(u.rounds) for u in self.units)

    @property
    def has_sessions(self) -> bool:
        return any(u.is_session for u in self.units)

    @property
    def has_hash_ids(self) -> bool:
        return any(r.hash_ids is not None for r in self.rounds())

    def head(self, n: int) -> Workload:
        """The first ``n`` units in file order (``max_items``)."""
        return dataclasses.replace(self, units=self.units[:n])


Status = Literal["ok", "error", "skipped", "cancelled"]


@dataclass(slots=True)
class RequestRecord:
    """One request as it happened. Written as one JSON line when it ends.

    Timestamps are ``int`` nanoseconds on the run's clock (``time.perf_counter_ns``
    on the wall clock, virtual ns in ``simulate``), ``None`` when the moment never
    came. ``token_times_ns[k]`` is when the k-th stream event carrying output token
    ids arrived and ``token_counts[k]`` how many ids it carried.
    """

    run_id: str
    request_id: str
    unit_ordinal: int
    session_id: str
    round_idx: int
    backend: str
    policy: str | None
    # the plan, after the context policy
    planned_prefix_tokens: int
    planned_input_tokens: int
    planned_output_tokens: int
    folded_prefix_tokens: int = 0
    derived_prefix: int = 0
    prefix_shortfall_tokens: int = 0
    sent_prompt_tokens: int = 0
    # raw times (ns)
    scheduled_ns: int | None = None
    released_ns: int | None = None
    admitted_ns: int | None = None
    dispatch_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    end_ns: int | None = None
    token_times_ns: list[int] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    # what the server said
    http_status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cached_tokens_reported: bool = False
    echoed_prompt_tokens: int = 0
    finish_reason: str | None = None
    server_request_id: str | None = None
    # bookkeeping
    routing_slot: int | None = None
    warmup: bool = False
    status: Status = "ok"
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Field → value, lists and ``extra`` copied one level deep.

        Every value here is a plain JSON type, so a one-level copy gives the same dict
        as ``dataclasses.asdict``, which deep-copies recursively (docs/design-notes.md,
        "Records and block hashes").
        """
        out = {name: getattr(self, name) for name in _RECORD_FIELDS}
        for key in ("token_times_ns", "token_counts"):
            out[key] = list(out[key])
        out["extra"] = {k: list(v) if isinstance(v, list) else v for k, v in self.extra.items()}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


_RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestRecord))


@dataclass(slots=True)
class RunResult:
    """Everything one run produced, in memory. ``run_dir`` is set once saved."""

    run_id: str
    records: list[RequestRecord]
    manifest: dict[str, Any] = field(default_factory=dict)
    lifecycle: list[dict[str, Any]] = field(default_factory=list)
    metrics_timeline: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str | None = None
    cancelled: bool = False

    @property
    def records_on_disk(self) -> bool:
        """True when the run kept its records on disk only (``executor.keep_records``):
        ``records`` and ``lifecycle`` are empty and readers go to ``run_dir`` instead."""
        return (
            self.manifest.get("records_kept") is False
            and self.run_dir is not None
            and not self.records
        )
