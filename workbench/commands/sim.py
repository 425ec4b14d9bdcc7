"""``workbench sim serve``: the embedded engine behind HTTP until Ctrl-C; ``sim
calibrate``: fit its cost model from a real engine's runs."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
from typing import Any

from workbench.commands._axes import json_items
from workbench.commands._flags import value_flag
from workbench.errors import ConfigError, ListenError, WorkbenchError

NAME = "sim"
HELP = "run the embedded (simulated) serving engine"

_KNOBS: list[tuple[str, type, str]] = [
    ("model", str, "served model name"),
    ("mode", str, "metrics dialect: vllm | sglang"),
    ("block-size", int, "KV block size in tokens (default 16)"),
    ("num-blocks", int, "KV capacity in blocks (default 65536)"),
    ("max-num-batched-tokens", int, "per-step token budget (default 8192)"),
    ("max-num-seqs", int, "max running requests (default 256)"),
    ("max-model-len", int, "max prompt + output tokens (default 131072)"),
    ("speedup", float, "divide every step time by this (default 1.0)"),
    ("seed", int, "seed of output ids and fault draws (default 0)"),
    ("error-rate", float, "fault: fraction of requests answered with HTTP 500"),
    ("disconnect-after-tokens", int, "fault: drop the connection after N tokens"),
    ("stall-after-tokens", int, "fault: stop sending after N tokens for --stall-s"),
    ("stall-s", float, "fault: stall length in seconds"),
    ("sglang-prompt-echo", int, "fault: prepend N prompt-tail ids to SGLang output_ids"),
    ("error-status", int, "fault: HTTP status of --error-rate answers (200: JSON error body)"),
    ("usage-fault", str, "fault: broken usage counts: string | huge | negative"),
]
_FLAGS = [
    ("zero-cost", "every step takes no time (throughput tests)"),
    ("no-prefix-caching", "disable prefix caching"),
    ("omit-usage", "fault: send no usage block"),
    ("sglang-cumulative", "fault: SGLang output_ids repeat everything so far"),
    ("text-cumulative", "fault: chat/completions text repeats everything so far"),
    ("error-echo-auth", "fault: --error-rate messages repeat the Authorization header"),
]


def _port(value: str) -> int:
    """A TCP port, 0 (any free one) to 65535: past it the socket's bind raised."""
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value!r}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sim_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve the four wire protocols, /metrics and friends")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=0, help="port (default 0: any free port)")
    for name, kind, text in _KNOBS:
        value_flag(serve, f"--{name}", type=kind, default=None, help=text)
    for name, text in _FLAGS:
        serve.add_argument(f"--{name}", action="store_true", default=None, help=text)
    cluster = serve.add_argument_group("simulated cluster (docs/cluster.md)")
    value_flag(cluster, "--workers", type=int, default=None,
               help="serve N engine workers behind one endpoint (default: one engine)")
    from workbench.sim.router import ROUTERS  # stdlib only: --help stays fast

    cluster.add_argument("--router", default=None, help=" | ".join(ROUTERS.names()))
    value_flag(cluster, "--overload-threshold", type=int, default=None,
               help="prefix-aware: requests above the least-loaded worker (default 4)")
    cluster.add_argument("--disagg", default=None, metavar="P:D",
                         help="prefill/decode disaggregation: P prefill and D decode workers")
    value_flag(cluster, "--bandwidth-gbps", type=float, default=None,
               help="disaggregation: KV transfer bandwidth in GB/s (default 50)")
    value_flag(cluster, "--dp", type=int, default=None, metavar="R",
               help="attention-DP: R ranks per worker, stepping together (default 1)")
    cluster.add_argument("--dp-placement", default=None,
                         help="attention-DP rank placement: least-loaded | round-robin")
    serve.add_argument("--engine-config", default=None, metavar="FILE",
                       help="engine knobs from a JSON/YAML file (e.g. from `sim calibrate`); "
                            "flags override it")
    serve.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                       help="engine knob, e.g. --engine scheduler=sglang or --engine "
                            "preset=MODEL/GPU/tpN (repeatable; over the file and the flags)")
    cal = sub.add_parser("calibrate", help="fit the cost model from a real engine's runs "
                                           "(docs/calibration.md)")
    cal.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="runs against a real server")
    cal.add_argument("-o", "--output", default="engine.json",
                     help="engine config to write (default engine.json)")
    cal.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                     help="a knob of the real server that is not fitted, e.g. num_blocks=16384 "
                          "(repeatable)")
    cal.add_argument("--no-replay", action="store_true",
                     help="skip replaying the runs in virtual time to check the fit")
    cal.add_argument("--preset", default=None, metavar="MODEL/GPU/tpN[/fp8|/fp8w]",
                     help="refit this hardware preset's factors to the runs instead and "
                          "write a calibrated preset (-o NAME.json), which --engine "
                          "preset=NAME.json takes in simulate, sweep and plan")


def knobs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The engine knobs the user set (unset ones keep ``EngineConfig`` defaults)."""
    names = [name for name, _, _ in _KNOBS] + [name for name, _ in _FLAGS]
    keys = [name.replace("-", "_") for name in names]
    knobs = {key: getattr(args, key) for key in keys if getattr(args, key) is not None}
    if knobs.pop("no_prefix_caching", None):
        knobs["enable_prefix_caching"] = False
    return knobs


def cluster_knobs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster knobs (``workers``, ``router``, ...) the user set."""
    knobs: dict[str, Any] = {key: getattr(args, key) for key in ("workers", "router", "dp",
                             "dp_placement") if getattr(args, key) is not None}
    if args.overload_threshold is not None:
        knobs["router_options"] = {"overload_threshold": args.overload_threshold}
    if args.disagg is not None:
        p, sep, d = args.disagg.partition(":")
        if not (sep and p.isdigit() and d.isdigit()):
            raise ValueError(f"--disagg must be P:D (two integers), got {args.disagg!r}")
        knobs["disagg"] = {"prefill": int(p), "decode": int(d)}
        if args.bandwidth_gbps is not None:
            knobs["disagg"]["bandwidth_gbps"] = args.bandwidth_gbps
    elif args.bandwidth_gbps is not None:
        raise ValueError("--bandwidth-gbps needs --disagg P:D")
    return knobs


def serve_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """``sim serve``'s knobs: the ``--engine-config`` file's, the flags' over them, then
    the ``--engine KEY=VALUE`` pairs' (engine and cluster knobs together)."""
    from workbench.config.engine_file import read_engine_file

    knobs = read_engine_file(args.engine_config) if args.engine_config else {}
    knobs.update(knobs_from_args(args))
    knobs.update(cluster_knobs_from_args(args))
    knobs.update(json_items(args.engine, "--engine"))
    return knobs


def run(args: argparse.Namespace) -> int:
    if args.sim_command == "calibrate":
        return run_calibrate(args)
    import asyncio

    from workbench.sim.cluster import split_knobs
    from workbench.sim.config import EngineConfig
    from workbench.sim.metrics import SIM_GPU_PATH
    from workbench.sim.server import serve_forever

    try:
        engine_knobs, cluster = split_knobs(serve_knobs(args))
        config = EngineConfig.from_knobs(**engine_knobs)
    except (TypeError, ValueError, ConfigError) as exc:
        print(f"workbench sim serve: error: {exc}", file=sys.stderr)
        return 2

    def ready(handle: Any) -> None:
        print(f"embedded engine on {handle.base_url}", flush=True)
        # a second Prometheus page to scrape (--metrics-url): docs/measurement-rules.md
        print(f"simulated GPU exporter on {handle.base_url}{SIM_GPU_PATH}", flush=True)
        knobs = {k: v for k, v in dataclasses.asdict(config).items() if k != "faults"}
        print(f"config: {knobs}", flush=True)
        if config.faults.active:
            print(f"faults: {dataclasses.asdict(config.faults)}", flush=True)
        if cluster is not None:
            print(f"cluster: {cluster.to_dict()}", flush=True)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_forever(args.host, args.port, config, ready, cluster))
    except ListenError as exc:  # the flag to change: --host or --port
        value = args.host if exc.part == "host" else args.port
        print(f"workbench sim serve: error: --{exc.part} {value}: {exc}", file=sys.stderr)
        return 2
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    """``sim calibrate``: an engine config, or a calibrated preset (docs/calibration.md)."""
    from workbench.calibration.fit import calibrate
    from workbench.calibration.preset import calibrate_preset

    try:
        base = json_items(args.engine, "--engine")
        if args.preset:
            preset = calibrate_preset(args.run_dirs, args.preset, base=base)
            path = preset.write(args.output if args.output != "engine.json" else "preset.json")
        else:
            cal = calibrate(args.run_dirs, base=base, self_check=not args.no_replay)
    except (WorkbenchError, ValueError, OSError) as exc:
        print(f"workbench sim calibrate: error: {exc}", file=sys.stderr)
        return 2
    if args.preset:
        print(json.dumps(console_figures(
            {"preset": preset.preset, "fitted": preset.fit["fitted"],
             "before": preset.fit["before"], "after": preset.fit["after"],
             "in_sample": preset.fit["in_sample"], "held_out": preset.fit["held_out"]}),
            indent=2))
        print(f"calibrated preset: {path} (use --engine preset={path})")
        return 0
    path = cal.write(args.output)
    fit = cal.fit
    brief = {
        "prefill": {**{k: fit["prefill"][k] for k in ("form", "coeffs", "samples")},
                    **_stated_brief(fit["prefill"])},
        "decode": {**{k: fit["decode"][k] for k in ("coeffs", "floor_ms", "samples")},
                   **_stated_brief(fit["decode"])},
        "lone_constant": {k: fit["lone_constant"][k] for k in ("c_ms", "split",
                          "median_abs_pct_error") if k in fit["lone_constant"]},
        "replay": fit.get("replay"),
    }  # fmt: skip
    print(json.dumps(console_figures(brief), indent=2))
    for part in ("prefill", "decode"):
        note = fit[part]["stated_error"].get("note")
        if note:  # the in-sample error of an exact fit says nothing of other requests
            print(f"{part}: {note}; the fit reproduces its own samples, which tells "
                  "nothing of its error on others")
    if fit.get("replay"):
        print("replay: the calibration runs themselves, replayed (in sample, not held out)")
    print(f"engine config: {path}")
    return 0


#: significant figures of a fitted coefficient or a time the console prints; decimals of
#: a percentage (as the preset fit's report rounds its own): docs/calibration.md, "Console"
FIGURES, PCT_DECIMALS = 4, 3
#: keys whose numbers are percentages (an error in %)
_PCT_KEYS = ("pct_error", "error_pct", "in_sample", "held_out")


def console_figures(value: Any, key: str = "") -> Any:
    """``value`` (a fit's brief) with every float at the precision the console states it:
    percentages (under a key of ``_PCT_KEYS``, at any depth) to ``PCT_DECIMALS`` decimals,
    other figures to ``FIGURES`` significant figures; the written file keeps them whole
    (``3.000000203846893`` → ``3.0``, ``1.178e-07`` % → ``0.0``)."""
    if isinstance(value, dict):
        return {k: console_figures(v, k if isinstance(k, str) else key)
                for k, v in value.items()}
    if isinstance(value, list):
        return [console_figures(v, key) for v in value]
    if isinstance(value, float) and math.isfinite(value):
        if key.endswith(_PCT_KEYS):
            return round(value, PCT_DECIMALS) + 0.0  # + 0.0: no -0.0
        return float(f"{value:.{FIGURES}g}") + 0.0
    return value


def _stated_brief(part: dict[str, Any]) -> dict[str, Any]:
    """A fitted part's error as the console states it: held out (leave-one-out) beside in
    sample, the larger stated; or the note saying there is none to state, never the exact
    fit's 0 % alone (docs/calibration.md, "The stated error")."""
    stated = part["stated_error"]
    if stated["median_abs_pct_error"] is None:
        return {"stated_error": stated["note"]}
    return {"stated_error": {"median_abs_pct_error": stated["median_abs_pct_error"],
                             "in_sample": part["median_abs_pct_error"],
                             "held_out": part["held_out"]["median_abs_pct_error"]}}
