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
import time
from pathlib import Path


def default_sigint() -> None:
    """``preexec_fn``: SIGINT back to its default in the child, before it execs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until ``path`` has ``n`` complete lines (a run's records appearing; bounded in
    time, and fails if the process ended first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never had {n} lines")


def wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until ``path`` exists (a file a run creates as it goes: ``records.parquet.tmp``
    once its first row group is written; bounded in time, and fails if the process
    ended first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if path.exists():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until ``path`` holds ``text`` (a run's manifest saying it is being saved ``cancelled``;
    polled often: what follows it in the run takes a fraction of a second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(FileNotFoundError):
            if text in path.read_text():
                return
        time.sleep(0.005)
    raise AssertionError(f"{path} never held {text!r}")
