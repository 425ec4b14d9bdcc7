"""A virtual closed loop that makes no progress stops by itself, and the first signal
stops a virtual run even when its loop never gets to run a callback.

The repro: sessions whose first prompt is larger than the engine's whole cache are
refused at once (HTTP 400, ending the session), in no virtual time; the closed loop
re-admitted them at the same instant forever (10 GB, >10 CPU-minutes), and a SIGTERM,
queued on the loop that never ran it, did not stop it.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

from workbench.data import path as data_path
from workbench.errors import ExitCode

TRACE = str(data_path("tracelab/session_workload_example.csv"))
TIMEOUT_S = 120
ADDRESS_SPACE = 4 << 30  # the bug grew to 10 GB: a regression dies here, not the host


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_a_closed_loop_without_progress_in_virtual_time_stops_as_stalled(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", TRACE, "--max-items", "6",
           "--arrival", "closed-loop", "--duration", "2", "--max-concurrency", "2",
           "--engine", "num_blocks=512", "-o", str(tmp_path), "--run-id", "s"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                          preexec_fn=_limited)
    assert done.returncode == ExitCode.CANCELLED, done.stderr
    assert "closed loop stalled" in done.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["stop_reason"] == "stalled" and manifest["status"] == "cancelled"
    assert manifest["virtual_duration_s"] == 0.0
    records = [json.loads(x) for x in (tmp_path / "s" / "records.jsonl").read_text().splitlines()]
    # bounded: the stall is caught within one pass per slot, every record says why it ended
    assert 0 < len(records) <= 2 * manifest["plan"]["units"] + 2
    assert all(r["status"] == "error" and "HTTP 400" in r["error"] for r in records)


SPIN = """
import asyncio, sys, time
from workbench.clock import run_virtual
from workbench.signals import stop_on_signals

async def spin(flag):
    stopped = asyncio.Event()
    flag.arm(asyncio.get_running_loop(), stopped.set)
    print("armed", flush=True)
    deadline = time.monotonic() + {bound}
    while not stopped.is_set():  # a task that never yields to its loop
        if time.monotonic() > deadline:
            sys.exit(3)
    return "stopped"

with stop_on_signals() as flag:
    print(run_virtual(spin(flag)), flag.name, flush=True)
"""


def test_the_first_signal_stops_a_virtual_run_whose_loop_never_yields() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPIN.format(bound=TIMEOUT_S / 2)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "armed"  # waits for the event, no sleep
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.strip() == "stopped SIGTERM"
