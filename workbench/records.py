"""The typed model everything else speaks: ``Round``/``Unit``/``Workload`` (a trace, in
file order), ``RequestRecord`` (one request: raw ns timestamps and usage, no derived
metric), ``RunResult`` and ``RunManifest`` (docs/run-directory.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

UnitKind = Literal["session", "independent"]
SpawnTrigger = Literal["round_start", "round_end"]

#: a unit's arrival offset from the start of its trace (``arrival_ms``): 366 days at most,
#: the one bound trace readers (``traces.bounds``) and a rate-rescaled arrival span
#: (``arrival.rate``) are held to (docs/trace-bounds.md, "Bounds"; docs/config-bounds.md)
MAX_ARRIVAL_MS = 366 * 24 * 3600 * 1000.0


class Prompted:
    """A request's prompt length: reused prefix + fresh input (``Round``, ``RoundPlan``)."""

    __slots__ = ()
    prefix_len: int
    input_len: int

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + self.input_len


@dataclass(frozen=True, slots=True)
class Round(Prompted):
    """One LLM request of a unit as the trace describes it: ``prefix_len`` tokens reused
    (a context policy fixes a claim that cannot hold), ``input_len`` fresh, ``output_len``
    to generate; ``arrival_ms`` (round 0 only); ``hash_ids``: block ids the prompt is
    synthesized from (equal leading ids, a shared prefix)."""

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


@dataclass(frozen=True, slots=True)
class Spawn:
    """How a child unit hangs off its parent (docs/session-graphs.md): it starts
    ``delay_ms`` after round ``round_idx`` of ``parent_id`` starts or ends (``trigger``);
    parent round ``join_round`` waits for it (None: none). ``line``: where the trace said so."""

    parent_id: str
    round_idx: int
    trigger: SpawnTrigger = "round_end"
    delay_ms: float = 0.0
    join_round: int | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class Unit:
    """A session (ordered rounds, one conversation) or one independent request; ``spawn``:
    a session graph's child, started by its parent (``workbench.traces.graph``)."""

    unit_id: str
    kind: UnitKind
    arrival_ms: float
    rounds: tuple[Round, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    spawn: Spawn | None = None

    @property
    def is_session(self) -> bool:
        return self.kind == "session"


class UnitStream(Sequence[Unit]):
    """Units produced when asked for, in file order, none held (docs/virtual-time.md,
    "Streamed runs"). A subclass gives ``__len__``, ``__iter__`` (a fresh pass each) and the
    totals; indexing walks forward from the last index asked, a slice is a tuple."""

    n_rounds: int = 0
    prefix_tokens: int = 0  # Σ prefix over every round (as the trace says it)
    prompt_tokens: int = 0  # Σ prefix + input
    output_tokens: int = 0
    has_hash_ids: bool = False

    def __init__(self) -> None:
        self._pass: Iterator[Unit] | None = None
        self._next = 0
        self._last: tuple[int, Unit] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to a worker process) without the pass in progress (a generator)."""
        return {**self.__dict__, "_pass": None, "_next": 0, "_last": None}

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Unit]:
        raise NotImplementedError

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            import itertools

            start, stop, step = i.indices(len(self))
            if step < 0:
                return tuple(self)[i]
            return tuple(itertools.islice(iter(self), start, stop, step))
        n = len(self)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(f"unit {i} of a stream of {n}")
        if self._last is not None and self._last[0] == i:
            return self._last[1]
        if self._pass is None or i < self._next:
            self._pass, self._next = iter(self), 0
        while self._next < i:
            next(self._pass)
            self._next += 1
        unit = next(self._pass)
        self._next = i + 1
        self._last = (i, unit)
        return unit


@dataclass(frozen=True, slots=True)
class Workload:
    """The units of one trace in file order (a tuple, or a ``UnitStream``); ``fmt`` its
    reader, ``block_size`` the tokens of a ``hash_ids`` block, ``meta`` reader specifics."""

    units: Sequence[Unit]
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
        if isinstance(self.units, UnitStream):
            return self.units.n_rounds
        return sum(len(u.rounds) for u in self.units)

    @property
    def streamed(self) -> bool:
        """Its units are drawn when asked for (``UnitStream``), not held."""
        return isinstance(self.units, UnitStream)

    @property
    def has_sessions(self) -> bool:
        return any(u.is_session for u in self.units)

    @property
    def has_hash_ids(self) -> bool:
        if isinstance(self.units, UnitStream):
            return self.units.has_hash_ids
        return any(r.hash_ids is not None for r in self.rounds())

    def head(self, n: int) -> Workload:
        """The first ``n`` units in file order (``max_items``)."""
        return dataclasses.replace(self, units=self.units[:n])


Status = Literal["ok", "error", "skipped", "cancelled"]


@dataclass(slots=True)
class RequestRecord:
    """One request as it happened, written as one JSON line when it ends. Times are int ns
    on the run's clock (None: never came); ``token_times_ns[k]`` is when the k-th stream
    event with output ids came and ``token_counts[k]`` how many it carried."""

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
        """Field → value, lists and ``extra`` copied one level deep (the values are plain
        JSON: the same as ``dataclasses.asdict``, docs/design-notes.md)."""
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
    """Everything one run produced, in memory; ``run_dir`` and ``summary`` (its
    ``summary.json``: not summarized again) set once saved."""

    run_id: str
    records: list[RequestRecord]
    # a result made without a run (a test's, a notebook's): no status, saved as this schema
    manifest: RunManifest = field(default_factory=lambda: RunManifest("", status=None))
    lifecycle: list[dict[str, Any]] = field(default_factory=list)
    metrics_timeline: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str | None = None
    cancelled: bool = False
    summary: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def records_on_disk(self) -> bool:
        """The run kept its records on disk only (``executor.keep_records``): read ``run_dir``."""
        return (
            self.manifest.records_kept is False
            and self.run_dir is not None
            and not self.records
        )


MANIFEST_SCHEMA = 2  # 1: the manifests written before this definition (no "schema" key)


@dataclass
class RunManifest:
    """What ran and how it ended: ``manifest.json`` (docs/run-directory.md). The ``ALWAYS``
    fields come from the prologue; later ones are left out of ``to_dict`` while None.
    Unknown keys are kept in ``extra``; ``from_dict`` reads any schema (1 too)."""

    run_id: str
    label: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    ideal_prefix_hit_rate: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    status: str | None = "running"  # None: a manifest read without one (a bare RunResult's)
    # the command's --max-error-rate, by which ``report`` judges the run as the command did
    # (README, "Exit codes"); None: none given (an API run, a manifest older than it)
    max_error_rate: float | None = None
    # -- set as the run goes -------------------------------------------------------------
    mode: str | None = None  # "virtual" for simulate
    engine: dict[str, Any] | None = None  # simulate: the engine's config
    cluster: dict[str, Any] | None = None  # simulate: a simulated cluster
    records_kept: bool | None = None
    records_kept_reason: str | None = None
    target: dict[str, Any] | None = None
    preflight: Any = None
    cache_flush: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None  # backend.profile: the answers, the trace files
    block_size: int | None = None
    executor: dict[str, Any] | None = None  # a sharded run's split, epoch, clocks
    virtual_executor: dict[str, Any] | None = None
    metrics_scrape: dict[str, Any] | None = None
    client: dict[str, Any] | None = None
    stop_reason: str | None = None
    stop_detail: str | None = None  # the stop in words ("server at URL refused N ...")
    stop_signal: str | None = None
    peak_active_units: int | None = None
    warmup: dict[str, Any] | None = None
    completion: dict[str, Any] | None = None
    virtual_duration_s: float | None = None
    failure: str | None = None
    finished_at: str | None = None
    cancelled: bool | None = None  # written with the saved files (storage.rundir.write_run)
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = MANIFEST_SCHEMA

    ALWAYS: ClassVar[tuple[str, ...]] = (
        "run_id", "label", "config", "trace", "policy", "plan", "ideal_prefix_hit_rate",
        "versions", "host", "started_at", "status",
    )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _MANIFEST_FIELDS:
            value = getattr(self, name)
            if name != "cancelled" and (name in self.ALWAYS or value is not None):
                out[name] = value
        out = {**out, **self.extra, "schema": self.schema}
        if self.cancelled is not None:  # last, where write_run puts it: a saved run read
            out["cancelled"] = self.cancelled  # back and saved again is the same bytes
        return out

    def copy(self) -> RunManifest:
        """A copy to hand out (a result's): later writes to this one do not reach it."""
        return dataclasses.replace(self, extra=dict(self.extra))

    def section(self, name: str) -> dict[str, Any]:
        """``config[name]`` (``arrival``, ``backend``...); {} when the run had none."""
        value = self.config.get(name)
        return value if isinstance(value, dict) else {}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunManifest:
        known = {k: v for k, v in d.items() if k in _MANIFEST_FIELDS}
        extra = {k: v for k, v in d.items() if k not in _MANIFEST_FIELDS and k != "schema"}
        return cls(**{"run_id": "", "status": None, **known}, extra=extra,
                   schema=int(d.get("schema", 1)))


_MANIFEST_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RunManifest) if f.name not in ("extra", "schema")
)


def manifest_of(run: Any) -> RunManifest:
    """``run.manifest`` when it is a ``RunManifest``, else an empty one (a frame, a summary)."""
    manifest = getattr(run, "manifest", None)
    return manifest if isinstance(manifest, RunManifest) else RunManifest.from_dict({})
