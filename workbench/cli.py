"""``workbench`` / ``python -m workbench``: parse arguments, call the API, exit.

Thin on purpose: every subcommand lives in ``workbench/commands/<name>.py`` and
turns its arguments into one public API call.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from workbench import __version__, commands, redact
from workbench.errors import ExitCode, WorkbenchError
from workbench.signals import interrupt_on_sigterm


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Replay agentic LLM workloads against serving engines and measure "
        "TTFT, TPOT and prefix-cache hits.",
    )
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"workbench.commands.{info.name}")
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the subcommand, with its own usage, not the top level's
        (getattr(args, "_parser", None) or parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    redact.install_log_redaction()
    interrupt_on_sigterm()  # SIGTERM (timeout, Docker, Kubernetes, Slurm) = Ctrl-C
    streams = sys.stdout, sys.stderr
    # every console line goes through the redaction registry, whoever prints it
    sys.stdout, sys.stderr = redact.RedactingStream(sys.stdout), redact.RedactingStream(sys.stderr)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = streams


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args._run(args) or 0)
    except (WorkbenchError, OSError) as exc:  # one line a person can act on, no traceback
        if isinstance(exc, BrokenPipeError):  # stdout's reader went away (``| head``)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
            return 141  # 128 + SIGPIPE, as a shell reports a writer killed by the signal
        if args.verbose:
            logging.getLogger("workbench").exception("%s failed", args.command)
        print(f"workbench {args.command}: error: {redact.text(str(exc))}", file=sys.stderr)
        return ExitCode.of_error(exc)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (workbench.signals): the run is saved
        print(f"workbench {args.command}: interrupted", file=sys.stderr)
        return ExitCode.CANCELLED
