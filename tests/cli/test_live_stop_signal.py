"""A live ``workbench replay`` stopped by a signal says which one: the manifest's
``stop_signal`` and stderr's last line (``workbench replay: interrupted by SIGTERM``), as a
stopped ``simulate`` does (docs/run-directory.md, "Stopping"). The replay is a real
subprocess against a real ``workbench sim serve``, signalled once its first record is on
disk."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from interrupt import default_sigint, wait_for_lines

from workbench.data import path as data_path
from workbench.errors import ExitCode

LARGE = str(data_path("tracelab/multi_session_large.csv"))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``workbench sim serve`` (real costs: requests stay in flight), its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sim", "serve"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]  # "embedded engine on URL": it listens
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_a_stopped_live_replay_records_and_says_its_signal(tmp_path: Path, server: str,
                                                            sig: signal.Signals) -> None:
    run = tmp_path / "live"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "replay", "--trace", LARGE, "--target", server,
         "--arrival", "saturated", "--max-concurrency", "8", "--tool-wait-scale", "0",
         "--no-progress", "-o", str(tmp_path), "--run-id", "live"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    wait_for_lines(run / "records.jsonl", 1, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"workbench replay: interrupted by {sig.name}", err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "cancelled"
    assert manifest["stop_signal"] == sig.name
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    statuses = [r["status"] for r in records]
    assert "ok" in statuses, statuses  # the one on disk when the signal was sent
    assert set(statuses) <= {"ok", "cancelled"}, statuses
    for r in records:  # every record is finished: its end stamped, none left open
        assert r["run_id"] == "live" and r["end_ns"] is not None, r
        if r["status"] == "ok":
            assert r["dispatch_ns"] <= r["first_token_ns"] <= r["end_ns"], r
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_cancelled"] is True and summary["requests"] == len(records)
