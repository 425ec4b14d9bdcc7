"""Axis options shared by ``replay`` and ``simulate``: flags → a RunConfig dict."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from workbench.arrival import MODES
from workbench.backends import BACKENDS
from workbench.catalogs.requests import SLO_ABLE
from workbench.commands._flags import GivenItems, flag_sources, value_flag
from workbench.config import EXECUTOR_KINDS, RunConfig
from workbench.config.validation import json_or_text
from workbench.context import POLICIES
from workbench.errors import ConfigError
from workbench.ranges import MAX_DEPTH


def add_axis_arguments(p: argparse.ArgumentParser) -> None:
    add = _adder(p)
    add("--trace", help="trace file (any supported format)")
    add("--format", default=None, help="trace format (default: detect)")
    add("--max-items", type=int, help="replay only the first N units (file order)")
    add("--offset", type=int,
                   help="start the window at unit K (file order; with --max-items: units "
                        "K..K+N-1)")
    add("--trace-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a reader option (JSON or text), e.g. timing=original, "
                        "max_delay_s=60 (weka: docs/weka-traces.md), "
                        "tokenizer=PATH/tokenizer.json (sharegpt, aiperf-*, mooncake text_input)")
    add("--policy", help=f"context policy: {' | '.join(POLICIES.names())}")
    add("--shared-prefix", action="store_true", default=None,
                   help="first rounds reuse a shared prefix pool keyed by provider/model/project")
    add("--max-model-len", type=int, help="context guard: skip rounds that overflow")
    add("--arrival", help=" | ".join(MODES.names()))
    add("--rate", type=float, help="rescale trace arrivals to R units/s (modes "
                   "poisson, gamma, constant: draw arrivals at R units/s)")
    add("--burstiness", type=float,
                   help="--arrival gamma: shape of the gaps (1: poisson; < 1 burstier)")
    add("--ramp-up-strategy", choices=["linear", "exponential"],
                   help="arrival processes: ramp the rate over the units, or over "
                        "--ramp-up-duration (no --rate)")
    add("--ramp-up-start-rps", type=float,
                   help="ramp-up: rate of the first unit (at time 0)")
    add("--ramp-up-end-rps", type=float,
                   help="ramp-up: rate of the last unit (from --ramp-up-duration on)")
    add("--ramp-up-duration", type=float, dest="ramp_up_duration_s", metavar="S",
                   help="ramp-up: the rate moves from start to end over S seconds, then "
                        "stays at the end rate (a ramp in time, not over the units)")
    add("--max-concurrency", type=int,
                   help="agent tasks active at once (a unit and its sub-agents: one)")
    add("--max-streams", type=int, help="requests in flight at once (streams)")
    add("--session-budget", type=float, dest="session_budget_s",
                   help="per-session time budget (s): no round starts past it (truncated)")
    add("--duration", type=float, dest="duration_s", help="closed-loop duration (s)")
    add("--warmup", type=int, help="warm-up sessions (≤3 rounds each, excluded)")
    add("--tool-wait-scale", type=float, help="multiply every tool wait")
    add("--output-len", help="trace | fixed:K | budget:T")
    add("--continue-on-error", action="store_true", default=None,
                   help="keep a session going after a failed round")
    add("--stop-after-refused", type=int, metavar="N",
                   help="stop the run once N connections in a row could not be made (a dead "
                        "server; default 20; 0: never)")
    add("--request-timeout", type=float, help="per-request timeout (s)")
    add("--stream-idle-timeout", type=float, help="stream idle timeout (s)")
    add("--backend", help=" | ".join(BACKENDS.names()))
    add("--stream", action=argparse.BooleanOptionalAction, default=None,
                   help="--no-stream: non-streaming requests (\"stream\": false), the answer "
                        "read whole: TTFT = end-to-end latency, no TPOT/ITL (openai, "
                        "openai-chat; the request timeout applies, not the idle one)")
    add("--seed", type=int, help="seed of the synthetic token pool")
    add("--flush-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="reset the server's prefix cache before the run (default: try, "
                        "record what happened; --flush-cache fails if it cannot)")
    add("--token-salt", help="salt every synthetic token ('run': the run id) so "
                                        "runs share no cached prefix on a server that "
                                        "cannot flush")
    add("--profile", action="store_true", default=None,
                   help="start the engine's profiler before the measured requests and stop "
                        "it after (vLLM started with --profiler-config, SGLang)")
    add("--profile-dir", help="--profile: the server's trace directory (vLLM: its "
                                        "torch_profiler_dir; SGLang: sent as output_dir)")
    add("--config", help="YAML/JSON RunConfig file; flags override it")
    add("-o", "--out", dest="out_dir", help="parent folder of the run directory")
    add("--run-id", help="name of the run directory (default: timestamped)")
    add("--overwrite", action="store_true", default=None,
                   help="replace an existing finished run of this --run-id (default: refuse)")
    add("--max-error-rate", type=float, default=0.0, metavar="FRACTION",
                   help="exit with status 4 when more than this fraction of the requests "
                   "failed (default 0: any failed request; 1: never)")
    # the per-run knobs of the config file, as flags (docs/sweeps.md, "command line")
    g = p.add_argument_group("run knobs (config-file fields as flags)")
    gadd = _adder(g)
    gadd("--slo", action="append", default=[], metavar="BOUND",
                   help="SLO bound (repeatable). METRIC<=MS (METRIC: "
                        + ", ".join(SLO_ABLE) + "): "
                        "per request, the summary's attainment and goodput; workbench sweep "
                        "also takes percentile bounds METRIC:pQ<=MS (ttft_ms:p90<=2000) and "
                        "ok>=F (share of requests that must finish ok)")
    gadd("--workers", type=int, help="executor processes (units are sharded)")
    gadd("--executor", choices=EXECUTOR_KINDS, help="executor kind")
    gadd("--ray-address", help="Ray cluster to join (executor ray)")
    gadd("--fuse", type=float, dest="fuse_s", help="hard cap on the run's wall time (s)")
    gadd("--drain", choices=["finish", "truncate"],
                   help="closed-loop at the deadline: finish or truncate sessions")
    gadd("--model", help="model name sent in every request")
    gadd("--preflight", action=argparse.BooleanOptionalAction, default=None,
                   help="probe the server before the run (default: on for URLs)")
    gadd("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="extra request header (repeatable); VALUE $ENV reads ENV at start")
    gadd("--body-field", action="append", default=[], metavar="KEY=JSON",
                   help="extra request body field (repeatable; dotted KEY nests)")
    gadd("--routing-header", metavar="NAME",
                   help="send the unit's routing slot as this header")
    gadd("--routing-field", metavar="KEY",
                   help="send the unit's routing slot as this body field (dotted KEY nests)")
    gadd("--cached-tokens-details", action="store_true", default=None,
                   help="sglang-tokens: ask for and record the device/host split of cached "
                        "tokens (return_cached_tokens_details)")
    gadd("--metrics-url", action=GivenItems, field="backend.metrics_urls", default=None,
         metavar="URL",
                   help="a further Prometheus page to scrape beside the engine's /metrics "
                        "(repeatable; e.g. a GPU exporter http://HOST:9400/metrics)")
    gadd("--metrics-series", action=GivenItems, field="backend.metrics_series", default=None,
         metavar="GLOB",
                   help="keep the series matching this glob from every scraped page "
                        "(repeatable; e.g. 'DCGM_FI_DEV_*')")
    gadd("--percentiles", metavar="Q,Q,...",
                   help="latency percentiles to print, e.g. 50,90,99,99.9")


def _adder(p: Any) -> Callable[..., argparse.Action]:
    """``p.add_argument``, but a flag that takes one value is a ``value_flag``: stored by
    ``_flags.Given`` and remembered under its config field (``AXIS_FLAGS``), so a check
    that refuses the value names the flag as typed."""
    def add(*names: str, **kwargs: Any) -> argparse.Action:
        if "action" in kwargs:
            action: argparse.Action = p.add_argument(*names, **kwargs)
            return action
        dest = kwargs.get("dest") or names[-1].lstrip("-").replace("-", "_")
        return value_flag(p, *names, field=FIELD_OF_DEST.get(dest), **kwargs)
    return add


def parse_percentiles(spec: str) -> list[float]:
    """``--percentiles 50,99.9`` → ``[50.0, 99.9]``: finite numbers in [0, 100], at most 100."""
    try:
        qs = [float(q) for q in spec.split(",") if q.strip()]
    except ValueError:
        raise ConfigError(f"--percentiles {spec!r}: expected numbers, e.g. 50,90,99.9") from None
    if not qs or len(qs) > 100 or not all(0 <= q <= 100 for q in qs):
        raise ConfigError(f"--percentiles {spec!r}: 1 to 100 numbers, each in [0, 100]")
    return qs


#: every flag whose value goes into the config as given: ``dest`` or ``dest=key`` per section
AXIS_FLAGS: dict[str, tuple[str, ...]] = {
    "trace": ("trace=path", "format", "max_items", "offset"),
    "context": ("policy", "shared_prefix", "max_model_len"),
    "arrival": (
        "arrival=mode", "rate", "max_concurrency", "burstiness", "ramp_up_strategy",
        "ramp_up_start_rps", "ramp_up_end_rps", "ramp_up_duration_s", "max_streams",
        "session_budget_s", "duration_s", "warmup", "tool_wait_scale", "output_len",
        "request_timeout=request_timeout_s", "stream_idle_timeout=stream_idle_timeout_s",
        "fuse_s", "drain",
    ),
    "backend": ("backend=name", "flush_cache", "token_salt", "profile", "profile_dir",
                "stream", "metrics_url=metrics_urls", "metrics_series", "preflight"),
    "executor": ("workers", "executor=kind", "ray_address=address"),
}


#: the config field of each flag's value (``dest`` → ``section.key``; top-level: ``key``;
#: not ``-o``: an ``out_dir`` refusal quotes its whole path already)
FIELD_OF_DEST: dict[str, str] = {
    **{item.partition("=")[0]: f"{section}.{item.partition('=')[2] or item}"
       for section, items in AXIS_FLAGS.items() for item in items},
    **{key: key for key in ("seed", "run_id")},
    "stop_after_refused": "arrival.stop_after_refused",
}


def config_from_args(args: argparse.Namespace, extra: dict[str, Any] | None = None,
                     defaults: dict[str, Any] | None = None) -> RunConfig:
    """The ``--config`` file (if any) with every given flag on top; ``defaults``
    (``{"section.key": value}``: a sweep's first swept rate) fill what neither set."""
    rate = getattr(args, "max_error_rate", None)  # the output flags, before any request
    if rate is not None and not 0.0 <= rate <= 1.0:  # NaN fails both comparisons
        raise ConfigError(f"--max-error-rate: expected a fraction in [0, 1], got {rate}")
    if getattr(args, "percentiles", None):
        parse_percentiles(args.percentiles)
    if args.config:  # the flags over the file's raw values, then one check
        return RunConfig.from_file(args.config, lambda data: _lay_over(args, data, extra,
                                                                       defaults),
                                   given={*flag_sources(args), *(extra or {})})
    return RunConfig.from_dict(_lay_over(args, {}, extra, defaults))


def _lay_over(args: argparse.Namespace, base: dict[str, Any], extra: dict[str, Any] | None,
              defaults: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` (a config file's raw values, sections as mappings) with every given flag
    and ``extra`` on top, ``defaults`` under what neither set; not checked yet."""
    for section, flags in AXIS_FLAGS.items():
        for item in flags:
            flag, _, key = item.partition("=")
            value = getattr(args, flag, None)
            if value is not None:
                base.setdefault(section, {})[key or flag] = value
    if getattr(args, "continue_on_error", None):
        base.setdefault("arrival", {})["stop_session_on_error"] = False
    refused = getattr(args, "stop_after_refused", None)
    if refused is not None:  # 0: never stop on refused connections
        base.setdefault("arrival", {})["stop_after_refused"] = refused or None
    for key in ("seed", "out_dir", "run_id", "overwrite"):
        if getattr(args, key, None) is not None:
            base[key] = getattr(args, key)
    _knobs_into(args, base)
    for key, value in (extra or {}).items():
        section, _, name = key.partition(".")
        base.setdefault(section, {})[name] = value
    for key, value in (defaults or {}).items():
        section, _, name = key.partition(".")
        if isinstance(base.setdefault(section, {}), dict) and base[section].get(name) is None:
            base[section][name] = value
    return base


def _kv(item: str, flag: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
    return key.strip(), value


def is_sweep_bound(item: str) -> bool:
    """A percentile bound or the ok share: the SLO of a sweep, not of a run."""
    return ":p" in item or item.strip().startswith("ok")


def per_request_slo(items: list[str], allow_sweep_bounds: bool = False) -> dict[str, float]:
    """``--slo`` items without a percentile (``ttft_ms<=2000``): the run config's ``slo``."""
    from workbench.metrics.slo import SLO

    out: dict[str, float] = {}
    for item in items:
        if is_sweep_bound(item):
            if not allow_sweep_bounds:
                raise ConfigError(f"--slo {item!r}: percentile bounds and ok>=F are the SLO "
                                  "of a sweep (workbench sweep); a run takes METRIC<=MS")
            continue
        try:
            spec = SLO.parse([item])
        except ConfigError as e:
            raise ConfigError(f"--slo {item!r}: expected METRIC<=MS, e.g. ttft_ms<=2000 ({e})") \
                from None
        out.update(spec.per_request_mapping() if spec is not None else {})
    return out


def _knobs_into(args: argparse.Namespace, base: dict[str, Any]) -> None:
    slo = per_request_slo(getattr(args, "slo", None) or [],
                          bool(getattr(args, "sweep_bounds_ok", False)))
    if slo:
        base["slo"] = {**(base.get("slo") or {}), **slo}
    trace_opts = json_items(getattr(args, "trace_option", None) or [], "--trace-option")
    if trace_opts:
        trace = base.setdefault("trace", {})
        trace["options"] = {**(trace.get("options") or {}), **trace_opts}
    opts: dict[str, Any] = {
        key: getattr(args, key) for key in ("model", "routing_header", "routing_field")
        if getattr(args, key, None)
    }
    if getattr(args, "header", None):
        opts["headers"] = dict(_kv(h, "--header") for h in args.header)
    body: dict[str, Any] = {}
    for item in getattr(args, "body_field", None) or []:
        key, value = _kv(item, "--body-field")
        parsed = json_or_text(f"--body-field {key}", value)
        if key.count(".") >= MAX_DEPTH:
            raise ConfigError(f"--body-field {key[:40]}...: nested deeper than {MAX_DEPTH} levels")
        *parents, leaf = key.split(".")
        node = body
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = parsed
    if body:
        opts["extra_body"] = body
    if getattr(args, "cached_tokens_details", None):
        opts["return_cached_tokens_details"] = True
    if opts:
        backend = base.setdefault("backend", {})
        if isinstance(backend, str):
            backend = base["backend"] = {"name": backend}
        backend["options"] = {**(backend.get("options") or {}), **opts}


def json_items(items: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` items of ``flag``, each value JSON (bounded) when it parses, else text."""
    return {key: json_or_text(f"{flag} {key}", value)
            for key, value in (_kv(item, flag) for item in items)}

