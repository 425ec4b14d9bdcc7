"""``RunConfig``: one replay = trace + context + arrival + backend + target (+ seed, SLO).

The four axes are independent: nothing in one implies a value in another. The
cross-axis rules of docs/axes.md are checked here, before any request is sent, each
with a message that says what to change. Configs come from dicts (a notebook's
parameters cell), YAML/JSON files (``--config``) and go back to dicts for the
run manifest.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workbench.arrival import MODES, ArrivalMode
from workbench.arrival.modes import modes_with
from workbench.arrival.processes import ArrivalProcess
from workbench.errors import ConfigError
from workbench.records import Workload

CONFIG_MAX_BYTES = 16 << 20
"""A ``--config`` file is YAML or JSON of a few KB; past 16 MiB it is not a config."""


@dataclass(frozen=True)
class TraceSpec:
    """Axis 1: which file, read how, and how much of it (``max_items`` units from unit
    ``offset``, file order: a contiguous window; ``workbench.traces.graph.window``)."""

    path: str = ""
    format: str = "auto"
    max_items: int | None = None
    offset: int = 0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContextSpec:
    """Axis 2: ``policy`` None means ``trace-reported`` for sessions, nothing otherwise.

    ``options``: the policies' own options, each declared by its policy
    (``workbench.context.policy_options``); a config spells them flat beside
    ``policy`` (``context.major_compaction_min_drop_tokens``), and ``to_dict``
    writes them back that way, every declared option with its value or default.
    """

    policy: str | None = None
    shared_prefix: bool = False
    max_model_len: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from workbench.context import policy_options

        if isinstance(self.options, dict):  # every declared option, given or default
            object.__setattr__(self, "options", {**policy_options(), **self.options})

    @classmethod
    def from_flat(cls, value: dict[str, Any]) -> ContextSpec:
        """From a config's ``context`` mapping: the policy options sit beside the fields."""
        from workbench.context import policy_options

        declared = policy_options()
        own = {k: v for k, v in value.items() if k not in declared}
        nested = own.pop("options", None) or {}
        if not isinstance(nested, dict):
            raise ConfigError(f"context.options: expected a mapping, got {nested!r}")
        return cls(**own, options={**nested, **{k: value[k] for k in value if k in declared}})

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        options = d.pop("options")
        return {**d, **options}


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


@dataclass(frozen=True)
class BackendSpec:
    """Axis 4: the wire protocol and its client-side options.

    ``flush_cache``: reset the server's prefix cache before the measured run
    (``workbench.backends.flush``): ``"auto"`` (default) tries and records what
    happened, ``True`` fails the run before any measured request when the server
    cannot reset, ``False`` never tries (a reset empties the cache for every client of
    a shared server). ``token_salt``: mixed into every synthetic
    token stream, so runs under different salts share no cacheable token — the
    isolation for servers that cannot flush; ``"run"`` salts with the run id.
    docs/cache-isolation.md.
    """

    name: str = "openai"
    api_key_env: str | None = "OPENAI_API_KEY"
    preflight: bool | None = None  # None: on for real servers, off for the embedded engine
    scrape_interval_s: float | None = 1.0
    # further Prometheus pages scraped beside the engine's /metrics (a GPU exporter), and
    # globs of further series to keep (docs/measurement-rules.md, "Further Prometheus
    # endpoints")
    metrics_urls: list[str] = field(default_factory=list)
    metrics_series: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    flush_cache: bool | Literal["auto"] = "auto"
    token_salt: str | None = None
    # start/stop the engine's profiler around the warm-up and measured requests (vLLM,
    # SGLang: workbench.backends.profile); profile_dir: where the server writes traces
    profile: bool = False
    profile_dir: str | None = None
    # False: non-streaming requests ("stream": false), the answer read whole: TTFT =
    # end-to-end latency, no TPOT/ITL (docs/wire-protocols.md, "Non-streaming")
    stream: bool = True

    def codec_options(self) -> dict[str, Any]:
        """The codec's options: ``options``, plus ``stream: False`` in non-streaming mode."""
        return dict(self.options) if self.stream else {**self.options, "stream": False}


@dataclass(frozen=True)
class TargetSpec:
    """Where requests go: ``"sim"`` (the embedded engine, started for the run) or a URL."""

    url: str = "sim"
    engine: dict[str, Any] = field(default_factory=dict)
    # "sim" only: True runs the engine on the client's own event loop (its steps then
    # count as client lag); False (default) gives it a process of its own
    in_process: bool = False

    @property
    def is_sim(self) -> bool:
        return self.url == "sim"


@dataclass(frozen=True)
class ExecutorSpec:
    """How the client executes (not what it sends): processes, record batching, hashes.

    ``workers``: shard units over this many processes on this host (a unit is
    never split; ``max_concurrency`` is divided between shards; records merge
    into one run directory). ``record_flush_ms``: ``None`` (default) writes each
    record the moment its request ends, so even a hard crash loses nothing
    finished (docs/run-directory.md); a number batches writes, records then reach the OS at most
    this long after their request ends (faster at high request rates; a SIGKILL
    can lose that window, a cancel or Ctrl-C still loses nothing).
    ``block_hashes``: compute each prompt's chained block hashes (kept in records
    for the Dynamo export; incremental per session, but off saves O(prompt) work
    per request). ``uvloop``: use uvloop for ``run``/the CLI when installed.
    ``kind``: ``local`` (one process, or ``workers`` processes when > 1),
    ``processes`` (``workers`` processes on this host) or ``ray`` (``workers``
    Ray actors, see ``workbench.executors.ray``); ``address``: the Ray cluster
    to join (``ray://host:10001``, ``host:6379`` or ``auto``; None = a
    ``ray.init`` already made in this process, else a local one).
    ``gc_freeze``: ``gc.freeze()`` what exists when the measured run starts (and
    the finished records as they pile up), so no full garbage collection over
    them pauses the loop mid-run (restored after). ``keep_records``: ``True``,
    ``False`` or ``"auto"`` (default). False (with an ``out_dir``): records and
    lifecycle rows stay on disk only, the summary is scanned from there, and
    ``RunResult.records`` is empty (``to_frame``, ``summarize``, ``plot`` and
    ``load(run_dir)`` read them back from disk): memory stays flat in the number
    of requests. ``"auto"``: keep them when the plan has at most
    ``KEEP_RECORDS_AUTO_MAX`` requests, else as False (``RunConfig.keeps_records``;
    the manifest's ``records_kept`` and ``records_kept_reason`` say what a run did).
    Without an ``out_dir`` records are always kept: they have nowhere else to live.
    ``warm_connections``: open ``max_concurrency`` keep-alive connections (at
    most ``WARM_MAX``) before the run, so the first wave does not pay TCP setup
    inside its TTFT. ``http``: the HTTP client on the measured path: ``httptools``
    (default; ``workbench.backends.http1``) or ``aiohttp`` (the portable fallback,
    public API only, coarser stamps; ``workbench.backends.http_aiohttp``).
    ``pace_ms``: when streams end in lockstep, at most about this
    much loop time per iteration goes to finishing streams and sending the next
    requests; the rest wait their turn (FIFO) so the loop keeps reading sockets and
    token stamps stay exact. Deferred sends show as release lag. ``"auto"``
    (default): 1 ms while responses stream (several reads each), off while they
    arrive whole (nothing to protect, and holding sends would only keep requests
    waiting in the client); 0: off; a number: always, with that budget
    (``workbench.backends.pace``).
    """

    workers: int = 1
    record_flush_ms: float | None = None
    block_hashes: bool = True
    uvloop: bool = True
    kind: str = "local"
    address: str | None = None
    gc_freeze: bool = True
    keep_records: bool | Literal["auto"] = "auto"
    warm_connections: bool = True
    http: str = "httptools"
    pace_ms: float | Literal["auto"] = "auto"


EXECUTOR_KINDS: tuple[str, ...] = ("local", "processes", "ray")
# executor.keep_records "auto": the largest plan (requests) whose records stay in memory.
# A kept request costs 2.6 KB with short independent requests (bench/README.md#memory:
# 530 vs 268 MB RSS at 100k) and ~10 KB on agentic traces (the Mooncake slice, ~360 output
# tokens: one token time per stream event, plus the prompt's hashes; tracemalloc, kept vs
# not). 10k requests is then ~100 MB at most on top of the run, and still far above every
# bundled trace (<= 600 rounds) and a notebook's interactive runs.
KEEP_RECORDS_AUTO_MAX = 10_000

_SECTIONS: dict[str, tuple[type, str]] = {
    "trace": (TraceSpec, "path"),
    "context": (ContextSpec, "policy"),
    "arrival": (ArrivalSpec, "mode"),
    "backend": (BackendSpec, "name"),
    "target": (TargetSpec, "url"),
    "executor": (ExecutorSpec, "workers"),
}
_TOP_LEVEL = ("seed", "slo", "dry_run", "run_id", "out_dir", "label", "overwrite")


@dataclass(frozen=True)
class RunConfig:
    trace: TraceSpec = field(default_factory=TraceSpec)
    context: ContextSpec = field(default_factory=ContextSpec)
    arrival: ArrivalSpec = field(default_factory=ArrivalSpec)
    backend: BackendSpec = field(default_factory=BackendSpec)
    target: TargetSpec = field(default_factory=TargetSpec)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    seed: int = 0
    slo: dict[str, float] | None = None
    dry_run: bool = False
    run_id: str | None = None
    out_dir: str | None = None
    label: str | None = None
    #: replace an existing finished run of the same ``run_id`` (docs/run-directory.md)
    overwrite: bool = False

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a dict; each axis may be a dict or a bare string (its main field)."""
        if not isinstance(d, dict):
            raise ConfigError(f"a run config is a mapping, got {type(d).__name__}")
        from workbench.config.validation import check_depth

        check_depth("config", d)  # bounded before anything is built or walked
        unknown = sorted(set(d) - set(_SECTIONS) - set(_TOP_LEVEL))
        if unknown:
            valid = ", ".join([*_SECTIONS, *_TOP_LEVEL])
            raise ConfigError(f"unknown config key(s) {unknown}; valid: {valid}")
        kwargs: dict[str, Any] = {k: d[k] for k in _TOP_LEVEL if k in d and d[k] is not None}
        for key, (spec_cls, main) in _SECTIONS.items():
            if key in d and d[key] is not None:
                kwargs[key] = _section(key, spec_cls, main, d[key])
        cfg = cls(**kwargs)
        cfg.check()
        return cfg

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        from workbench.errors import TraceFormatError
        from workbench.traces._io import open_trace

        path = Path(path)
        try:  # opened like a trace: a FIFO or a device is refused, not read (no blocking)
            raw = open_trace(path, CONFIG_MAX_BYTES + 1, inflate=False)
        except TraceFormatError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.rule}") from None
        if len(raw) > CONFIG_MAX_BYTES:
            raise ConfigError(f"config {path} is larger than {CONFIG_MAX_BYTES:,} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"config {path} is not UTF-8 text (YAML or JSON)") from None
        from workbench.config.validation import load_yaml, parse_json

        if path.suffix in (".yaml", ".yml"):
            data = load_yaml(str(path), text)  # aliases and depth bounded while composing
        else:
            try:
                data = parse_json(str(path), text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        return cls.from_dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["context"] = self.context.to_dict()
        return d

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with top-level or dotted changes: ``cfg.replace(**{"arrival.rate": 2})``."""
        d = self.to_dict()
        for key, value in changes.items():
            section, _, name = key.partition(".")
            if name:
                d[section][name] = value
            else:
                d[section] = value
        return RunConfig.from_dict(d)

    # -- validation ---------------------------------------------------------------------
    def check(self) -> None:
        """Rules that need no trace: names exist, numbers in range, axis combinations.

        Types and ranges are ``_check_types``'s alone (one table, ``workbench.ranges``);
        the rules after it combine values that are already of their type and range."""
        from workbench.backends import BACKENDS
        from workbench.context import POLICIES

        self._check_types()
        a = self.arrival
        if a.mode not in MODES:
            raise ConfigError(
                f"arrival.mode {a.mode!r} is unknown; valid: {', '.join(MODES.names())}"
            )
        mode = self.arrival_mode
        if a.rate is not None and not mode.takes_rate:
            raise ConfigError(
                f"arrival.rate rescales trace arrivals and cannot be used with mode "
                f"{a.mode!r}; drop rate or use mode {modes_with('takes_rate')}"
            )
        self._check_process()
        if mode.closed_loop and not a.max_concurrency:
            raise ConfigError(f"arrival.mode {a.mode!r} needs max_concurrency (sessions active)")
        if a.duration_s is not None and not mode.closed_loop:
            raise ConfigError(
                f"arrival.duration_s only applies to mode {modes_with('closed_loop')}"
            )
        if a.drain not in ("finish", "truncate"):
            raise ConfigError(f"arrival.drain must be 'finish' or 'truncate', got {a.drain!r}")
        parse_output_policy(a.output_len)
        BACKENDS.canonical(self.backend.name)
        self._check_stream()
        if self.backend.profile_dir is not None and not self.backend.profile:
            raise ConfigError("backend.profile_dir is where the profiler's traces go: set "
                              "backend.profile true (--profile) too")
        if self.backend.profile and self.executor.kind == "ray":
            raise ConfigError("backend.profile runs with executor.kind local or processes "
                              "(the Ray executor has no hook around its measured window)")
        if self.backend.token_salt == "":
            raise ConfigError(  # an empty salt would salt nothing: the run is not isolated
                f"backend.token_salt {self.backend.token_salt!r} is empty, which salts "
                "nothing; give a word ('run': the run id) or leave it unset"
            )
        if self.context.policy is not None:
            policy = POLICIES.get(self.context.policy)
            if policy.needs_output_ids and not self.backend_returns_ids:
                others = [n for n in POLICIES.names() if not POLICIES.get(n).needs_output_ids]
                raise ConfigError(
                    f"context.policy {policy.name!r} carries the server's exact output "
                    f"token ids, which backend {self.backend.name!r} cannot return; use one of "
                    f"{', '.join(token_id_backends())} or policy "
                    f"{' or '.join(repr(n) for n in others)}"
                )
        self._check_executor()

    def _check_types(self) -> None:
        """Every field's type (its annotation) and range (``validation.RANGES``), first.

        The other rules below can then compare and combine values safely.
        """
        from workbench.config import validation as v

        for key in _SECTIONS:
            v.check_dataclass(getattr(self, key), key)
        self._check_context_options(v)
        hints = v.hints_of(RunConfig)
        for key in _TOP_LEVEL:
            v.check_value(key, getattr(self, key), hints[key])
        v.check_url("target.url", self.target.url)
        v.check_metrics_scrape("backend", self.backend.metrics_urls, self.backend.metrics_series)
        if self.run_id is not None:
            v.check_run_id("run_id", self.run_id)
        if self.slo:
            from workbench.metrics.slo import run_slo

            run_slo(self.slo, "slo")  # the one SLO grammar (docs/sweeps.md "SLO")
        self._check_engine(v)
        self._check_backend_options(v)

    def _check_context_options(self, v: Any) -> None:
        """``context.<option>``: names a registered policy declares, each of its type."""
        from workbench.context import POLICIES, policy_options

        opts = self.context.options
        unknown = sorted(set(opts) - set(policy_options()))
        if unknown:
            raise ConfigError(f"unknown context option(s) {unknown}; valid: "
                              f"{', '.join(sorted(_context_keys()))}")  # fmt: skip
        for name in POLICIES.names():
            policy = POLICIES.get(name)
            if dataclasses.is_dataclass(policy):
                v.check_mapping("context", opts, v.hints_of(type(policy)))

    def _check_engine(self, v: Any) -> None:
        """``target.engine`` knobs: the engine checks its own (``EngineConfig``, ``Faults``)
        against the one range table (``workbench.ranges``); the names here."""
        if not self.target.engine:
            return
        from workbench.sim.cluster import split_knobs
        from workbench.sim.config import EngineConfig

        try:  # a simulated cluster's knobs (workers, router, ...) are checked by the cluster
            engine_knobs, _cluster = split_knobs(self.target.engine)
            EngineConfig.from_knobs(**engine_knobs)
        except (ValueError, TypeError) as exc:  # an unknown knob name, a cluster knob
            raise ConfigError(f"target.engine: {exc}") from None

    def _check_stream(self) -> None:
        """``backend.stream``: false only for a codec that can ask for a whole answer, and
        only with a request timeout (the stream idle timeout does not apply to it)."""
        from workbench.backends import BACKENDS

        if "stream" in self.backend.options:
            raise ConfigError("backend.options.stream: set backend.stream (--no-stream) instead")
        if self.backend.stream:
            return
        able = [n for n in BACKENDS.names() if BACKENDS.get(n).whole_answers]
        if not BACKENDS.get(self.backend.name).whole_answers:
            raise ConfigError(
                f"backend.stream false (non-streaming): backend {self.backend.name!r} only "
                f"streams; use {' or '.join(able)}")
        if self.arrival.request_timeout_s is None:
            raise ConfigError(
                "backend.stream false (non-streaming) needs arrival.request_timeout_s: the "
                "stream idle timeout does not apply to a whole answer, so only the request "
                "timeout bounds a server that never answers")

    def _check_backend_options(self, v: Any) -> None:
        """``backend.options``: names the codec takes, each of the type it declares."""
        if not self.backend.options:
            return
        from workbench.backends import BACKENDS
        from workbench.backends.base import reconfigure
        from workbench.backends.extras import EXTRA_KEYS

        codec = BACKENDS.get(self.backend.name)
        opts = self.backend.options
        # headers, extra_body and the routing slot apply to every protocol (extras.py);
        # a header's $ENV value is read when the run starts, not here
        own = {k: val for k, val in opts.items() if k not in EXTRA_KEYS}
        v.check_mapping("backend.options", own, v.hints_of(type(codec)))
        reconfigure(codec, own)  # unknown names: ConfigError
        for key in ("headers", "extra_body"):
            if opts.get(key) is not None and not isinstance(opts[key], dict):
                raise ConfigError(f"backend.options.{key}: expected a mapping, "
                                  f"got {opts[key]!r} ({type(opts[key]).__name__})")
        for name, value in (opts.get("headers") or {}).items():
            v.check_header("backend.options.headers", name, value)
        for key in ("routing_header", "routing_field"):
            if opts.get(key) is not None and not isinstance(opts[key], str):
                raise ConfigError(f"backend.options.{key}: expected a name (string), "
                                  f"got {opts[key]!r}")
        if opts.get("routing_header") is not None:
            v.check_header("backend.options.routing_header", opts["routing_header"], "")

    def register_secrets(self) -> None:
        """Register every credential this run sends, however it was given, for redaction
        (``workbench.redact``): the ``api_key_env`` key, the target's and every further
        metrics URL's user, password and query values, every header value (``$ENV`` ones
        as read now) and the values of credential-named ``extra_body`` fields. Called
        before anything of the run is written or printed, and by every process that sends
        (docs/security.md)."""
        import os

        from workbench import redact
        from workbench.backends.extras import resolve_headers

        b = self.backend
        redact.register(os.environ.get(b.api_key_env) if b.api_key_env else None)
        if not self.target.is_sim:
            redact.register_url(self.target.url)
        for url in b.metrics_urls:  # further /metrics endpoints (--metrics-url)
            redact.register_url(url)
        opts = b.options or {}
        headers = opts.get("headers")
        if isinstance(headers, dict):
            try:
                resolve_headers(headers)  # registers every value, $ENV ones as read
            except ConfigError:  # an unset $ENV: the run's own check says so
                redact.register_headers(
                    {k: v for k, v in headers.items() if not str(v).startswith("$")})
        redact.register_body(opts.get("extra_body"))

    def check_out_dir(self) -> None:
        """``out_dir`` is a writable directory, or can be created as one (before a run)."""
        if self.out_dir:
            from workbench.config.validation import check_out_dir

            check_out_dir("out_dir", self.out_dir)

    def _check_executor(self) -> None:
        e, a = self.executor, self.arrival
        if e.workers > 1 and a.max_streams is not None:
            raise ConfigError(
                "arrival.max_streams is not divided between executor.workers yet: run it with "
                "executor.workers 1")
        if e.workers > 1 and a.max_concurrency is not None and a.max_concurrency < e.workers:
            raise ConfigError(
                f"executor.workers {e.workers} > arrival.max_concurrency {a.max_concurrency}: "
                "every worker needs at least one slot; lower workers or raise max_concurrency"
            )
        if e.kind not in EXECUTOR_KINDS:
            raise ConfigError(
                f"executor.kind {e.kind!r} unknown; valid: {', '.join(EXECUTOR_KINDS)}"
            )
        if not (isinstance(e.keep_records, bool) or e.keep_records == "auto"):
            raise ConfigError(
                f"executor.keep_records {e.keep_records!r} is invalid; valid: true, false, "
                f"'auto' (keep in memory up to {KEEP_RECORDS_AUTO_MAX} requests)"
            )
        from workbench.backends.transport import HTTP_CLIENTS

        if e.http not in HTTP_CLIENTS:
            raise ConfigError(
                f"executor.http {e.http!r} is unknown; valid: {', '.join(HTTP_CLIENTS)}"
            )
        if e.pace_ms != "auto" and (
            not isinstance(e.pace_ms, int | float) or isinstance(e.pace_ms, bool) or e.pace_ms < 0
        ):
            raise ConfigError(
                f"executor.pace_ms must be 'auto' or a number >= 0 (0 = off), got {e.pace_ms!r}"
            )
        if e.address is not None and e.kind != "ray":
            raise ConfigError("executor.address is a Ray cluster address: set executor.kind 'ray'")
        if e.kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "executor.kind 'ray' needs Ray: pip install 'workbench[ray]' (or 'ray>=2.9')"
            )

    def check_workload(self, workload: Workload) -> None:
        """Rules that depend on what the trace holds."""
        if self.context.policy is not None and workload.meta.get("needs_context_policy") is False:
            from workbench.context.policy import planned_file_message

            raise ConfigError(planned_file_message(self.context.policy, workload))
        if self.context.policy is not None and not workload.has_sessions:
            raise ConfigError(
                f"context.policy {self.context.policy!r} applies to sessions, but trace format "
                f"{workload.fmt!r} holds only independent requests; unset context.policy"
            )
        if self.context.policy is not None and workload.has_hash_ids:
            raise ConfigError(
                f"context.policy {self.context.policy!r} cannot apply to {workload.fmt!r}: its "
                "prompts come from block hash ids, not a conversation; unset context.policy"
            )

    def keeps_records(self, n_requests: int) -> tuple[bool, str]:
        """Whether a live run of ``n_requests`` holds its records in memory, and why.

        Without an ``out_dir`` they have nowhere else to live. ``"auto"`` keeps them
        up to ``KEEP_RECORDS_AUTO_MAX`` planned requests. A closed-loop run with a
        ``duration_s`` loops over its units until the deadline, so its request
        count is not known up front: ``"auto"`` keeps its records on disk only.
        """
        keep = self.executor.keep_records
        if not self.out_dir:
            return True, "no out_dir: records are kept in memory (nowhere else to live)"
        if keep != "auto":
            return bool(keep), f"executor.keep_records {str(keep).lower()}"
        if self.loops_until_deadline:
            return False, (
                "executor.keep_records 'auto': closed-loop with duration_s has no request "
                "count up front; records are on disk only"
            )
        limit = KEEP_RECORDS_AUTO_MAX
        if n_requests <= limit:
            return True, f"executor.keep_records 'auto': {n_requests} requests <= {limit}"
        return False, (
            f"executor.keep_records 'auto': {n_requests} requests > {limit} "
            "(KEEP_RECORDS_AUTO_MAX); records are on disk only"
        )

    def arrival_process(self) -> ArrivalProcess | None:
        """The arrival process of a process mode (``poisson``, ``gamma``, ``constant``), else
        None."""
        a = self.arrival
        if not self.arrival_mode.process:
            return None
        return ArrivalProcess(a.mode, a.rate, a.burstiness, a.ramp_up_strategy,
                              a.ramp_up_start_rps, a.ramp_up_end_rps, a.ramp_up_duration_s)

    def _check_process(self) -> None:
        a = self.arrival
        process = self.arrival_process()
        if process is not None:
            process.check()
        elif (a.burstiness != 1.0 or a.ramp_up_strategy is not None
              or a.ramp_up_start_rps is not None or a.ramp_up_end_rps is not None
              or a.ramp_up_duration_s is not None):
            raise ConfigError(
                f"arrival.burstiness and arrival.ramp_up_* shape an arrival process: use mode "
                f"{modes_with('process')} (mode {a.mode!r} draws no arrivals)"
            )

    @property
    def arrival_mode(self) -> ArrivalMode:
        """The registered arrival mode (``workbench.arrival.MODES``) and its capabilities."""
        return MODES.get(self.arrival.mode)

    @property
    def loops_until_deadline(self) -> bool:
        """A closed-loop mode with ``duration_s``: the unit list starts over until the
        deadline, so the request count is not known up front."""
        return self.arrival_mode.closed_loop and self.arrival.duration_s is not None

    @property
    def policy_name(self) -> str | None:
        from workbench.context import POLICIES

        return None if self.context.policy is None else POLICIES.canonical(self.context.policy)

    @property
    def backend_returns_ids(self) -> bool:
        from workbench.backends import BACKENDS

        return BACKENDS.get(self.backend.name).returns_token_ids


def token_id_backends() -> list[str]:
    """The backends whose codec returns the server's exact output token ids."""
    from workbench.backends import BACKENDS

    return [n for n in BACKENDS.names() if BACKENDS.get(n).returns_token_ids]


def _context_keys() -> set[str]:
    from workbench.context import policy_options

    return {f.name for f in dataclasses.fields(ContextSpec)} | set(policy_options())


def _section(key: str, spec_cls: type, main: str, value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return spec_cls(**{main: value})
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a mapping or a string, got {type(value).__name__}")
    names = _context_keys() if spec_cls is ContextSpec else {
        f.name for f in dataclasses.fields(spec_cls)}  # fmt: skip
    unknown = sorted(set(value) - names)
    if unknown:
        raise ConfigError(
            f"unknown {key} option(s) {unknown}; valid: {', '.join(sorted(names))}"
        )
    return ContextSpec.from_flat(value) if spec_cls is ContextSpec else spec_cls(**value)


def parse_output_policy(spec: str) -> tuple[str, int]:
    """``trace`` → ("trace", 0); ``fixed:K`` → ("fixed", K); ``budget:T`` → ("budget", T),
    with K and T integers in 1..``MAX_OUTPUT_TOKENS`` (docs/config-bounds.md)."""
    from workbench.config.validation import MAX_OUTPUT_TOKENS

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


def available() -> dict[str, list[str]]:
    """The registered names of every axis (what widgets and ``--help`` offer)."""
    from workbench.backends import BACKENDS
    from workbench.context import POLICIES
    from workbench.traces.load import available_formats

    return {
        "trace_formats": ["auto", *available_formats()],
        "context_policies": [*POLICIES.names(), *POLICIES.aliases()],
        "arrival_modes": MODES.names(),
        "backends": BACKENDS.names(),
    }
