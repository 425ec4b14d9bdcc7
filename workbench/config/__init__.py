"""``RunConfig``: one replay = trace + context + arrival + backend + target (+ seed, SLO).

Each section is a module of its own with its fields and rules; this one composes them
and checks the cross-axis rules of docs/axes.md before any request is sent. From dicts
or YAML/JSON files (``--config``), back to dicts for the run manifest.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench import ranges, redact
from workbench.arrival import MODES
from workbench.backends import BACKENDS
from workbench.backends.extras import resolve_headers
from workbench.config import validation as v
from workbench.config.arrival import ArrivalSpec, parse_output_policy
from workbench.config.backend import BackendSpec, token_id_backends
from workbench.config.context import ContextSpec, context_keys
from workbench.config.executor import EXECUTOR_KINDS, KEEP_RECORDS_AUTO_MAX, ExecutorSpec
from workbench.config.target import TargetSpec
from workbench.config.trace import TraceSpec
from workbench.context import POLICIES
from workbench.errors import ConfigError
from workbench.plurals import noun
from workbench.records import Workload

__all__ = [
    "CONFIG_MAX_BYTES", "EXECUTOR_KINDS", "KEEP_RECORDS_AUTO_MAX", "ArrivalSpec", "BackendSpec",
    "ConfigError", "ContextSpec", "ExecutorSpec", "RunConfig", "TargetSpec", "TraceSpec",
    "available", "parse_output_policy", "token_id_backends",
]

CONFIG_MAX_BYTES = v.CONFIG_MAX_BYTES

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
    overwrite: bool = False  # replace a finished run of this ``run_id`` (docs/run-directory.md)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a dict; each axis may be a dict or a bare string (its main field)."""
        if not isinstance(d, dict):
            raise ConfigError(f"a run config is a mapping, got {type(d).__name__}")
        v.check_depth("config", d)  # bounded before anything is built or walked
        unknown = sorted(set(d) - set(_SECTIONS) - set(_TOP_LEVEL))
        if unknown:
            valid = ", ".join([*_SECTIONS, *_TOP_LEVEL])
            raise ConfigError(f"unknown config {noun(len(unknown), 'key')} {unknown}; "
                              f"valid: {valid}", field=unknown[0])
        kwargs: dict[str, Any] = {k: d[k] for k in _TOP_LEVEL if k in d and d[k] is not None}
        for key, (spec_cls, main) in _SECTIONS.items():
            if key in d and d[key] is not None:
                kwargs[key] = _section(key, spec_cls, main, d[key])
        cfg = cls(**kwargs)
        cfg.check()
        return cfg

    @classmethod
    def from_file(cls, path: str | Path,
                  lay_over: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                  given: Container[str] = ()) -> RunConfig:
        """A YAML (``.yaml``/``.yml``) or JSON run config (``validation.read_config_file``).
        ``lay_over``: what goes over the file's raw values (the command line's flags) before
        the one check, so a flag can replace a value the file got wrong; told the file's data
        with each section a mapping (``sections_of``). A refused field's error names the
        file and the field's line, unless the value came from over it (a field in ``given``:
        the flags name it, ``commands._flags``)."""
        data, text = v.read_config_file(path, "config")
        try:
            data = sections_of(data or {})
        except ConfigError as exc:
            raise ConfigError(v.in_file(path, text, str(exc), field=exc.field)) from None
        if lay_over is not None:  # its own refusals name the flags
            data = lay_over(data)
        try:
            return cls.from_dict(data)
        except ConfigError as exc:  # named in the file: its path and the field's line
            if (exc.field or v.message_field(str(exc))) in given:
                raise  # the flag's value: the command line names it
            raise ConfigError(v.in_file(path, text, str(exc), field=exc.field)) from None

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

    def check(self) -> None:
        """Rules that need no trace: types and ranges first (``_check_types``), then each
        section's own rules, then the rules that combine two sections."""
        self._check_types()
        self.arrival.check()
        b, e = self.backend, self.executor
        b.check(self.arrival.request_timeout_s, e.kind)
        if self.context.policy is not None:
            policy = POLICIES.get(self.context.policy, "context.policy")
            if policy.needs_output_ids and not b.returns_ids:
                others = [n for n in POLICIES.names() if not POLICIES.get(n).needs_output_ids]
                raise ConfigError(
                    f"context.policy {policy.name!r} carries the server's exact output "
                    f"token ids, which backend {b.name!r} cannot return; use one of "
                    f"{', '.join(token_id_backends())} or policy "
                    f"{' or '.join(repr(n) for n in others)}"
                )
        a = self.arrival
        if e.workers > 1 and a.max_streams is not None:
            raise ConfigError(
                "arrival.max_streams is not divided between executor.workers yet: run it with "
                "executor.workers 1")
        if e.workers > 1 and a.max_concurrency is not None and a.max_concurrency < e.workers:
            raise ConfigError(
                f"executor.workers {e.workers} > arrival.max_concurrency {a.max_concurrency}: "
                "every worker needs at least one slot; lower workers or raise max_concurrency"
            )
        e.check()

    def _check_types(self) -> None:
        """Every field's type (its annotation) and range (``workbench.ranges.RANGES``)."""
        for key in _SECTIONS:
            ranges.check_dataclass(getattr(self, key), key)
        self.context.check_options()
        hints = ranges.hints_of(RunConfig)
        for key in _TOP_LEVEL:
            ranges.check_value(key, getattr(self, key), hints[key])
        v.check_url("target.url", self.target.url)
        v.check_metrics_scrape("backend", self.backend.metrics_urls, self.backend.metrics_series)
        if self.run_id is not None:
            v.check_run_id("run_id", self.run_id)
        if self.slo:
            # imported here: reading a config needs no metrics module (bench/README.md,
            # "CLI start-up")
            from workbench.metrics.slo import run_slo

            run_slo(self.slo, "slo")  # the one SLO grammar (docs/sweeps.md "SLO")
        self.target.check_engine()
        self.backend.check_options()

    def register_secrets(self) -> None:
        """Register every credential this run sends for redaction (docs/security.md)."""
        b = self.backend
        opts = b.options or {}
        headers = opts.get("headers")
        if isinstance(headers, dict):
            try:
                resolve_headers(headers)  # registers every value, $ENV ones as read
            except ConfigError:  # an unset $ENV: the run's own check says so
                for k, val in headers.items():
                    if not str(val).startswith("$"):
                        redact.register_sent(str(k), val)
        redact.register(os.environ.get(b.api_key_env) if b.api_key_env else None)
        if not self.target.is_sim:
            redact.register_url(self.target.url)
        for url in b.metrics_urls:  # further /metrics endpoints (--metrics-url)
            redact.register_url(url)
        redact.register_body(opts.get("extra_body"))

    def check_out_dir(self) -> None:
        """``out_dir`` is a writable directory, or can be created as one (before a run)."""
        if self.out_dir:
            v.check_out_dir("out_dir", self.out_dir)

    def check_workload(self, workload: Workload) -> None:
        """Rules that depend on what the trace holds."""
        self.context.check_applies(workload)

    def keeps_records(self, n_requests: int) -> tuple[bool, str]:
        """Whether a live run of ``n_requests`` keeps its records in memory, and why."""
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

    @property
    def loops_until_deadline(self) -> bool:
        return self.arrival.loops_until_deadline


def sections_of(data: Any) -> dict[str, Any]:
    """A run config's raw data with each section a mapping (a bare string is its main
    field: ``arrival: poisson`` is ``{"mode": "poisson"}``; a null one: ``{}``), for
    values to be laid over it before it is checked; not a mapping: refused as ``from_dict``
    refuses it."""
    if not isinstance(data, dict):
        raise ConfigError(f"a run config is a mapping, got {type(data).__name__}")
    out = dict(data)
    for key, (_, main) in _SECTIONS.items():
        value = out.get(key)
        if value is None:
            out[key] = {}
        elif _is_main(value):
            out[key] = {main: value}
        elif isinstance(value, dict):
            out[key] = dict(value)
        else:
            raise ConfigError(f"{key} must be a mapping or a string, got {type(value).__name__}",
                              field=key)
    return out


def _is_main(value: Any) -> bool:
    """A section written as its main field's value (``backend: openai``)."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _section(key: str, spec_cls: type, main: str, value: Any) -> Any:
    if _is_main(value):
        return spec_cls(**{main: value})
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a mapping or a string, got {type(value).__name__}")
    names = context_keys() if spec_cls is ContextSpec else {
        f.name for f in dataclasses.fields(spec_cls)}  # fmt: skip
    unknown = sorted(set(value) - names)
    if unknown:
        raise ConfigError(f"unknown {key} {noun(len(unknown), 'option')} {unknown}; "
                          f"valid: {', '.join(sorted(names))}", field=f"{key}.{unknown[0]}")
    return ContextSpec.from_flat(value) if spec_cls is ContextSpec else spec_cls(**value)


def available() -> dict[str, list[str]]:
    """The registered names of every axis (what widgets and ``--help`` offer)."""
    # imported here, not at every CLI start (bench/README.md, "CLI start-up")
    from workbench.traces.load import available_formats

    return {
        "trace_formats": ["auto", *available_formats()],
        "context_policies": [*POLICIES.names(), *POLICIES.aliases()],
        "arrival_modes": MODES.names(),
        "backends": BACKENDS.names(),
    }
