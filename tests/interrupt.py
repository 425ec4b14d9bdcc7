"""Child processes that a test interrupts (with SIGINT, as Ctrl-C in a terminal would, or
SIGKILL) once their run has written records (``wait_for_lines``).

A background job of a non-interactive shell (``make test &``, ``nohup``, some CI
runners) starts with SIGINT ignored; every child inherits that, and Python keeps
an inherited ``SIG_IGN`` instead of installing its KeyboardInterrupt handler, so
``workbench replay`` then ignores SIGINT — as POSIX says a background job should.
The tests that send SIGINT are about a foreground run's Ctrl-C: their children get
SIGINT's default back before they start (seen: both such tests failed, the signal
ignored, when `.ci/run` ran as a background job).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path

from waiting import BOUND_S, until


def default_sigint() -> None:
    """``preexec_fn``: SIGINT back to its default in the child, before it execs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen) -> None:
    """Until ``path`` has ``n`` complete lines (a run's records appearing; fails if the
    process ended first, or at the failure bound of ``waiting.until``)."""
    until(lambda: path.exists() and path.read_bytes().count(b"\n") >= n,
          f"{path} had {n} lines", proc=proc)


def wait_for_file(path: Path, proc: subprocess.Popen, bound_s: float = BOUND_S) -> None:
    """Until ``path`` exists (a file a run creates as it goes: ``records.parquet.tmp``
    once its first row group is written; fails if the process ended first, or at the
    failure bound of ``waiting.until``)."""
    until(path.exists, f"{path} appeared", proc=proc, bound_s=bound_s, poll_s=0.02)


def wait_for_text(path: Path, text: str, proc: subprocess.Popen) -> None:
    """Until ``path`` holds ``text`` (a run's manifest saying it is being saved ``cancelled``;
    polled often: what follows it in the run takes a fraction of a second)."""

    def holds() -> bool:
        with contextlib.suppress(FileNotFoundError):
            return text in path.read_text()
        return False

    until(holds, f"{path} held {text!r}", proc=proc, poll_s=0.005)
