"""Axis 4 of a run config: the wire protocol and its client-side options (docs/axes.md,
docs/wire-protocols.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.backends import BACKENDS
from workbench.backends.base import body_paths, owned_body_paths, reconfigure
from workbench.backends.extras import EXTRA_KEYS
from workbench.config.validation import check_header
from workbench.errors import ConfigError
from workbench.ranges import check_mapping, hints_of


@dataclass(frozen=True)
class BackendSpec:
    """Axis 4: the wire protocol and its client-side options (docs/cache-isolation.md)."""

    name: str = "openai"
    api_key_env: str | None = "OPENAI_API_KEY"
    preflight: bool | None = None  # None: on for real servers, off for the embedded engine
    scrape_interval_s: float | None = 1.0
    # further Prometheus pages and series globs (docs/measurement-rules.md)
    metrics_urls: list[str] = field(default_factory=list)
    metrics_series: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    flush_cache: bool | Literal["auto"] = "auto"
    token_salt: str | None = None
    # the engine's profiler around the measured requests (workbench.backends.profile)
    profile: bool = False
    profile_dir: str | None = None
    # False: non-streaming requests (docs/wire-protocols.md, "Non-streaming")
    stream: bool = True

    def codec_options(self) -> dict[str, Any]:
        """The codec's options: ``options``, plus ``stream: False`` in non-streaming mode."""
        return dict(self.options) if self.stream else {**self.options, "stream": False}

    @property
    def returns_ids(self) -> bool:
        """Whether this backend's codec returns the server's exact output token ids."""
        return BACKENDS.get(self.name).returns_token_ids

    def check(self, request_timeout_s: float | None, executor_kind: str) -> None:
        """This axis's rules, with the two values of other sections they read."""
        BACKENDS.canonical(self.name, "backend.name")
        if self.api_key_env and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ConfigError(
                "backend.api_key_env: expected the name of an environment variable (letters, "
                "digits and '_', not starting with a digit; e.g. OPENAI_API_KEY), got a value "
                "that is not one (not shown: it may be the key itself, which belongs in that "
                "variable, never in a config or on a command line)")
        if "stream" in self.options:
            raise ConfigError("backend.options.stream: set backend.stream (--no-stream) instead")
        if not self.stream and not BACKENDS.get(self.name).whole_answers:
            able = [n for n in BACKENDS.names() if BACKENDS.get(n).whole_answers]
            raise ConfigError(
                f"backend.stream false (non-streaming): backend {self.name!r} only "
                f"streams; use {' or '.join(able)}")
        if not self.stream and request_timeout_s is None:
            raise ConfigError(
                "backend.stream false (non-streaming) needs arrival.request_timeout_s: the "
                "stream idle timeout does not apply to a whole answer, so only the request "
                "timeout bounds a server that never answers")
        if self.profile_dir is not None and not self.profile:
            raise ConfigError("backend.profile_dir is where the profiler's traces go: set "
                              "backend.profile true (--profile) too")
        if self.profile and executor_kind == "ray":
            raise ConfigError("backend.profile runs with executor.kind local or processes "
                              "(the Ray executor has no hook around its measured window)")
        if self.token_salt == "":
            raise ConfigError("backend.token_salt '' is empty, which salts nothing; give a "
                              "word ('run': the run id) or leave it unset")

    def check_options(self) -> None:
        """``backend.options``: names the codec takes, each of the type it declares."""
        if not self.options:
            return
        codec = BACKENDS.get(self.name)
        opts = self.options
        # the protocol-independent options (extras.py); $ENV headers are read at start
        own = {k: val for k, val in opts.items() if k not in EXTRA_KEYS}
        check_mapping("backend.options", own, hints_of(type(codec)))
        reconfigure(codec, own)  # unknown names: ConfigError
        check_mapping("backend.options", opts, _EXTRA_TYPES)
        owned = owned_body_paths(reconfigure(codec, own))
        _check_added("backend.options.extra_body (--body-field)", self.name, owned,
                     body_paths(opts.get("extra_body") or {}))
        if opts.get("routing_field"):
            _check_added("backend.options.routing_field (--routing-field)", self.name, owned,
                         [tuple(str(opts["routing_field"]).split("."))])
        for name, value in (opts.get("headers") or {}).items():
            check_header("backend.options.headers", name, value)
        if opts.get("routing_header") is not None:
            check_header("backend.options.routing_header", opts["routing_header"], "")


def _check_added(what: str, name: str, owned: list[tuple[str, ...]],
                 added: list[tuple[str, ...]]) -> None:
    """``extra_body`` and the routing field add fields; one that would replace a field the
    codec sets (or the object holding it) changes the request the records describe."""
    for path in added:
        for field_path in owned:
            if field_path[: len(path)] == path or path[: len(field_path)] == field_path:
                raise ConfigError(
                    f"{what} would replace "
                    f"{'.'.join(field_path)}, which the {name} backend sets itself on every "
                    "request (prompt, pinned output length, stream mode, request id): the "
                    "request sent would not be the one planned and recorded; use "
                    "--output-len, backend.options.temperature, --model or --no-stream for "
                    "those (docs/sweeps.md)")


#: an environment variable's name (POSIX: portable characters, no leading digit)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")


#: the types of the protocol-independent options (``backends.extras``)
_EXTRA_TYPES = {"headers": dict[str, Any] | None, "extra_body": dict[str, Any] | None,
                "routing_header": str | None, "routing_field": str | None}


def token_id_backends() -> list[str]:
    """The backends whose codec returns the server's exact output token ids."""
    return [n for n in BACKENDS.names() if BACKENDS.get(n).returns_token_ids]
