"""A ``sweep --serve`` server dies with its sweep however the sweep dies (docs/security.md,
"Processes and disks"): SIGKILL of the sweep while its server — one that ignores
SIGTERM, or one started through a shell (``sh -c '… & wait'``) — runs leaves no process
of the server's group 3 s later, and its port free.

Before: the server's first process got SIGTERM from the parent-death signal and nothing
more, so a server that ignored it, or the shell's child, kept running and held the port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import until

from workbench.sweeps.serve import group_members

PY = sys.executable
TRACE = "synthetic:random,requests=6,input=fixed:64,output=fixed:8,rate=50"
#: the issue's bound (nothing of the server left 3 s after the sweep's SIGKILL) is a
#: figure printed, not asserted (a loaded machine stretches it); a server the watchdog
#: never killed ignores SIGTERM and sleeps an hour, so fails the failure bound of
#: ``waiting.until``
WATCHDOG = str(Path(__file__).resolve().parents[2] / "workbench" / "sweeps" / "watchdog.py")

#: a server that ignores SIGTERM, answers GET /health (and says so in a file), and holds
#: every other request (so the sweep's point waits on it: the sweep is mid-point)
SERVER = """
import http.server, os, pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
port, mark = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            pathlib.Path(mark).write_text(str(os.getpid()))
        else:
            time.sleep(3600)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    """Nothing listens there (a server would bind it again: SO_REUSEADDR, as servers do,
    so the closed connections' TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _watchdogs() -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if WATCHDOG.encode() in (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


@pytest.mark.parametrize("shell", [False, True], ids=["ignores-sigterm", "under-a-shell"])
def test_sigkill_of_the_sweep_leaves_no_server_process(tmp_path: Path, shell: bool) -> None:
    port = free_port()
    script, mark = tmp_path / "srv.py", tmp_path / "ready"
    script.write_text(SERVER)
    command = f"{PY} {script} {port} {mark}"
    if shell:
        command = f"sh -c '{command} & wait'"
    before = set(_watchdogs())
    proc = subprocess.Popen(
        [PY, "-m", "workbench", "sweep", "--trace", TRACE, "--target",
         f"http://127.0.0.1:{port}", "--over", "arrival.max_concurrency=1", "-o",
         str(tmp_path / "out"), "--sweep-id", "k", "--serve", command],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pgid = None
    try:
        until(lambda: mark.exists() and mark.read_text(), "the server answered", proc=proc)
        pgid = os.getpgid(int(mark.read_text()))
        assert pgid != os.getpgid(proc.pid)  # a group of its own
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        until(lambda: group_members(pgid) == [], "the server's group ended")
        print(f"server group gone {time.monotonic() - killed:.2f} s after the sweep's SIGKILL")
        assert _port_free(port)
        until(lambda: not set(_watchdogs()) - before, "the watchdog ended too")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None and group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)  # a test never leaves an orphan behind
