"""A report's kernel does not outlive ``workbench report`` (issue 23, rule 1): killed with
SIGKILL mid-render, the command takes its Jupyter kernel with it (jupyter_client gives the
kernel its parent's pid, ``JPY_PARENT_PID``; ipykernel's parent poller ends the kernel when
that parent is gone: docs/run-directory.md, "Processes")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.data import path as data_path

SMALL = str(data_path("tracelab/multi_session_example.csv"))
DEADLINE_S = 120.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _kernels_of(pid: int) -> dict[int, int]:
    """Live ipykernel processes descended from ``pid``: {pid: start time}."""
    parents: dict[int, list[int]] = {}
    info: dict[int, tuple[int, bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
            cmd = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
        info[int(entry.name)] = (int(fields[19]), cmd)
    out, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if b"ipykernel" in info[child][1]:
                out[child] = info[child][0]
            todo.append(child)
    return out


def _alive(pid: int, start: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[0] != b"Z" and int(fields[19]) == start


def test_sigkill_of_report_ends_its_kernel(tmp_path):
    made = subprocess.run([sys.executable, "-m", "workbench", "simulate", "--trace", SMALL,
                           "--max-items", "3", "-o", str(tmp_path), "--run-id", "s"],
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "report", str(tmp_path / "s"),
                             "-o", str(tmp_path / "reports")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kernels: dict[int, int] = {}
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not kernels and time.monotonic() < deadline and proc.poll() is None:
            kernels = _kernels_of(proc.pid)
            time.sleep(0.05)  # a poll interval, bounded by the deadline
        assert kernels, "no kernel started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while [p for p, s in kernels.items() if _alive(p, s)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p, s in kernels.items() if _alive(p, s)], kernels
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid, start in kernels.items():
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
