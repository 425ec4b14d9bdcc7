"""Axis options shared by ``replay`` and ``simulate``: flags → a RunConfig dict."""

from __future__ import annotations

import argparse
from typing import Any

from workbench.config import RunConfig


def add_axis_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", help="trace file (any supported format)")
    p.add_argument("--format", default=None, help="trace format (default: detect)")
    p.add_argument("--max-items", type=int, help="replay only the first N units (file order)")
    p.add_argument("--policy", help="context policy: trace-reported | prefix-preserving")
    p.add_argument("--shared-prefix", action="store_true", default=None,
                   help="first rounds reuse a shared prefix pool keyed by provider/model/project")
    p.add_argument("--max-model-len", type=int, help="context guard: skip rounds that overflow")
    p.add_argument("--arrival", help="trace-timed | saturated | closed-loop")
    p.add_argument("--rate", type=float, help="rescale trace arrivals to R units/s")
    p.add_argument("--max-concurrency", type=int, help="units (sessions) active at once")
    p.add_argument("--duration", type=float, dest="duration_s", help="closed-loop duration (s)")
    p.add_argument("--warmup", type=int, help="warm-up sessions (≤3 rounds each, excluded)")
    p.add_argument("--tool-wait-scale", type=float, help="multiply every tool wait")
    p.add_argument("--output-len", help="trace | fixed:K | budget:T")
    p.add_argument("--continue-on-error", action="store_true", default=None,
                   help="keep a session going after a failed round")
    p.add_argument("--request-timeout", type=float, help="per-request timeout (s)")
    p.add_argument("--stream-idle-timeout", type=float, help="stream idle timeout (s)")
    p.add_argument("--backend", help="openai | openai-chat | vllm-tokens | sglang-tokens")
    p.add_argument("--seed", type=int, help="seed of the synthetic token pool")
    p.add_argument("--config", help="YAML/JSON RunConfig file; flags override it")
    p.add_argument("-o", "--out", dest="out_dir", help="parent folder of the run directory")
    p.add_argument("--run-id", help="name of the run directory (default: timestamped)")
    p.add_argument("--max-error-rate", type=float, default=0.0, metavar="FRACTION",
                   help="exit with status 4 when more than this fraction of the requests "
                   "failed (default 0: any failed request; 1: never)")


def exit_status(summary: dict[str, Any], cancelled: bool, max_error_rate: float) -> int:
    """The command's exit status for a finished run (``workbench.errors.ExitCode``).

    The error rate is failed / (ok + failed) requests: skipped rounds (context guard)
    and cancelled requests are neither.
    """
    from workbench.errors import ConfigError, ExitCode

    if not 0.0 <= max_error_rate <= 1.0:  # NaN fails both comparisons
        raise ConfigError(f"--max-error-rate: expected a fraction in [0, 1], got {max_error_rate}")
    if cancelled:
        return ExitCode.CANCELLED
    errors, ok = int(summary.get("errors") or 0), int(summary.get("ok") or 0)
    if errors and errors / (errors + ok) > max_error_rate:
        return ExitCode.ERROR_RATE
    return ExitCode.COMPLETED


_AXIS_FLAGS = {
    "trace": {"trace": "path", "format": "format", "max_items": "max_items"},
    "context": {"policy": "policy", "shared_prefix": "shared_prefix",
                "max_model_len": "max_model_len"},
    "arrival": {
        "arrival": "mode", "rate": "rate", "max_concurrency": "max_concurrency",
        "duration_s": "duration_s", "warmup": "warmup", "tool_wait_scale": "tool_wait_scale",
        "output_len": "output_len", "request_timeout": "request_timeout_s",
        "stream_idle_timeout": "stream_idle_timeout_s",
    },
    "backend": {"backend": "name"},
}


def config_from_args(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> RunConfig:
    """The ``--config`` file (if any) with every given flag layered on top."""
    base = RunConfig.from_file(args.config).to_dict() if args.config else {}
    for section, flags in _AXIS_FLAGS.items():
        for flag, key in flags.items():
            value = getattr(args, flag, None)
            if value is not None:
                base.setdefault(section, {})[key] = value
    if getattr(args, "continue_on_error", None):
        base.setdefault("arrival", {})["stop_session_on_error"] = False
    for key in ("seed", "out_dir", "run_id"):
        if getattr(args, key, None) is not None:
            base[key] = getattr(args, key)
    for key, value in (extra or {}).items():
        section, _, name = key.partition(".")
        base.setdefault(section, {})[name] = value
    return RunConfig.from_dict(base)
