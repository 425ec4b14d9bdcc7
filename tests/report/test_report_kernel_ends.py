"""A report's kernel does not outlive ``workbench report`` (issue 23, rule 1): killed with
SIGKILL mid-render, the command takes its Jupyter kernel with it (jupyter_client gives the
kernel its parent's pid, ``JPY_PARENT_PID``; ipykernel's parent poller ends the kernel when
that parent is gone: docs/run-directory.md, "Processes")."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from proctree import descendants, kill_left, living
from waiting import until

from workbench.data import path as data_path

SMALL = str(data_path("tracelab/multi_session_example.csv"))
DEADLINE_S = 120.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


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
        kernels = until(lambda: descendants(proc.pid, cmd_contains=b"ipykernel"),
                        "the report started its kernel", proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
        until(lambda: not living(kernels), f"the report's kernels ended ({kernels})")
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_left(kernels)
