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

from workbench.sweeps.serve import group_members

PY = sys.executable
TRACE = "synthetic:random,requests=6,input=fixed:64,output=fixed:8,rate=50"
#: the issue's bound: nothing of the server left this long after the sweep's SIGKILL
GONE_S = 3.0
START_S = 60.0
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
        deadline = time.monotonic() + START_S
        while not (mark.exists() and mark.read_text()):  # bounded: the deadline
            assert proc.poll() is None, "the sweep ended before its server answered"
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.02)
        pgid = os.getpgid(int(mark.read_text()))
        assert pgid != os.getpgid(proc.pid)  # a group of its own
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        while group_members(pgid) and time.monotonic() - killed < GONE_S + 2:  # bounded
            time.sleep(0.02)
        gone_after = time.monotonic() - killed
        print(f"server group gone {gone_after:.2f} s after the sweep's SIGKILL")
        assert group_members(pgid) == [], f"left running {gone_after:.1f} s after SIGKILL"
        assert gone_after < GONE_S
        assert _port_free(port)
        while set(_watchdogs()) - before and time.monotonic() - killed < GONE_S:  # bounded
            time.sleep(0.02)
        assert set(_watchdogs()) - before == set()  # the watchdog ended too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None and group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)  # a test never leaves an orphan behind
