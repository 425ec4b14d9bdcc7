"""A ``sweep --serve`` server's parent-death watchdog: a tiny process that outlives the sweep.

It reads a pipe only the sweep holds: a line ``PGID`` names a group to guard, ``done``
ends it quietly, and end of file without ``done`` (the sweep died) SIGTERMs, then
``KILL_AFTER_S`` later SIGKILLs, every guarded group. Run as a script, importing nothing
of workbench (docs/security.md, "Processes and disks").
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: after the sweep died: SIGTERM, then SIGKILL this long after unless the group is gone
KILL_AFTER_S = 1.0
POLL_S = 0.02
DONE = b"done"


def _signal(pgid: int, sig: int) -> bool:
    """Signal the group; whether any process of it was there."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _end(groups: list[int]) -> None:
    """The sweep is gone: every guarded group goes, escalating to SIGKILL."""
    live = [g for g in groups if _signal(g, signal.SIGTERM)]
    deadline = time.monotonic() + KILL_AFTER_S
    while live and time.monotonic() < deadline:  # bounded: the deadline
        time.sleep(POLL_S)
        live = [g for g in live if _signal(g, 0)]
    for g in live:
        _signal(g, signal.SIGKILL)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe ends this process
    groups: list[int] = []
    buf = b""
    while True:  # bounded: by the pipe's end, which the sweep's exit or death brings
        chunk = os.read(0, 4096)
        if not chunk:
            _end(groups)
            return 0
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip() == DONE:
                return 0
            if line.strip().isdigit():
                groups.append(int(line))


if __name__ == "__main__":
    sys.exit(main())
