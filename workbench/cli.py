"""``workbench`` / ``python -m workbench``: parse arguments, call the API, exit; each
subcommand is a module of ``workbench/commands/``."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from workbench.errors import (
    STOP_SIGNALS,
    WRITE_ERRNOS,
    ConfigError,
    ExitCode,
    OutputWriteError,
    WorkbenchError,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_early() -> None:
    """Every stop signal takes Ctrl-C's path from the command's first line (main thread)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _interrupt)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``command``, only that one's arguments (the others
    listed by name and help: a command's arguments import what their choices and
    defaults need, ~50 ms for all of them, bench/README.md "CLI start-up")."""
    import importlib
    import pkgutil

    from workbench import __version__, commands
    from workbench.commands._flags import Parser

    parser = Parser(
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
        if command is None or command == mod.NAME:
            mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _parser=p)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top
    level's options take no value); None when there is none."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (None: the process's own command line, ``sys.argv``) and
    return its exit status. With None the process exits next, so what it holds is left
    to the operating system: ``gc.freeze`` keeps the interpreter's final collections off
    it (docs/virtual-time.md, "The process's exit")."""
    status = _main(sys.argv[1:] if argv is None else argv)
    if argv is None:
        import gc

        gc.freeze()
    return status


def _main(argv: Sequence[str]) -> int:
    interrupt_early()
    command = ""
    try:
        parser = build_parser(_command_of(argv))  # imports every command module
        args, extra = parser.parse_known_args(argv)
        command = args.command or ""
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
        from workbench import redact

        redact.install_log_redaction()
        streams = sys.stdout, sys.stderr
        # every console line goes through the redaction registry, whoever prints it
        sys.stdout = redact.RedactingStream(sys.stdout)
        sys.stderr = redact.RedactingStream(sys.stderr)
        try:
            return _run(args)
        finally:
            sys.stdout, sys.stderr = streams
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (workbench.signals): the run is saved
        print(f"workbench{' ' + command if command else ''}: interrupted by {signal_of(exc)}",
              file=sys.stderr)
        return ExitCode.CANCELLED


def signal_of(exc: KeyboardInterrupt) -> str:
    """The signal that stopped a command: ``KeyboardInterrupt("signal SIGTERM")`` as the
    stop signals' handlers raise it (``_interrupt``, ``workbench.signals``); a bare one is
    SIGINT's own (Python's handler, asyncio's runner)."""
    text = str(exc)
    return text.removeprefix("signal ") if text.startswith("signal SIG") else "SIGINT"


def _run(args: argparse.Namespace) -> int:
    """The subcommand; an error is one line a person can act on, no traceback (a refused
    value's field names the flag that gave it, as typed: ``commands._flags``)."""
    from workbench import redact

    try:
        return int(args._run(args) or 0)
    except (WorkbenchError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):  # stdout's reader went away (``| head``)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
            return 141  # 128 + SIGPIPE, as a shell reports a writer killed by the signal
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:  # a full disk, any command
            exc = OutputWriteError(exc.filename or "an output file", exc)
        if args.verbose:
            logging.getLogger("workbench").exception("%s failed", args.command)
        text = str(exc)
        if isinstance(exc, ConfigError) and exc.field:
            from workbench.commands._flags import flag_sources

            written = flag_sources(args).get(exc.field)
            if written and not text.startswith(written):
                text = f"{written}: {text}"
        print(f"workbench {args.command}: error: {redact.text(text)}", file=sys.stderr)
        return ExitCode.of_error(exc)
