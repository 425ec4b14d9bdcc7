"""Distinct, documented exit codes (workbench.errors.ExitCode), from real CLI runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.data import path as data_path
from workbench.errors import ExitCode

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args],
                          capture_output=True, text=True, timeout=180)


def _failing_config(tmp_path: Path, error_rate: float) -> str:
    cfg = {"trace": {"path": SESSIONS, "max_items": 3},
           "arrival": {"mode": "saturated", "tool_wait_scale": 0.0},
           "target": {"url": "sim", "engine": {"error_rate": error_rate, "speedup": 50.0}}}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(("extra", "code"), [
    ((), ExitCode.ERROR_RATE),                           # default --max-error-rate 0
    (("--max-error-rate", "0.5"), ExitCode.ERROR_RATE),  # 100 % > 50 %
    (("--max-error-rate", "1"), ExitCode.COMPLETED),
])
def test_a_run_whose_requests_all_failed_does_not_exit_0(tmp_path, extra, code):
    proc = _cli("replay", "--config", _failing_config(tmp_path, 1.0), "--no-progress",
                "-o", str(tmp_path), *extra)
    assert proc.returncode == code, proc.stderr
    assert " 0/3 ok · " in proc.stdout, proc.stdout  # the headline


def test_a_clean_run_exits_0(tmp_path):
    proc = _cli("replay", "--config", _failing_config(tmp_path, 0.0), "--no-progress")
    assert proc.returncode == ExitCode.COMPLETED, proc.stderr


def test_configuration_error(tmp_path):
    proc = _cli("replay", "--trace", SESSIONS, "--max-concurrency", "0", "--no-progress")
    assert proc.returncode == ExitCode.CONFIG_ERROR
    assert "arrival.max_concurrency" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("arrival:\n  max_concurrency: '16'\n")
    proc = _cli("replay", "--trace", SESSIONS, "--config", str(bad), "--no-progress")
    assert proc.returncode == ExitCode.CONFIG_ERROR
    assert "arrival.max_concurrency: expected" in proc.stderr


def test_trace_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len\n"
                   "0,0,0,0,ten,5\n")
    proc = _cli("replay", "--trace", str(bad), "--format", "session", "--no-progress")
    assert proc.returncode == ExitCode.TRACE_ERROR, proc.stderr
    assert str(bad) in proc.stderr and "Traceback" not in proc.stderr


def test_every_exit_code_is_documented():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in ("COMPLETED", "FAILED", "CONFIG_ERROR", "TRACE_ERROR", "ERROR_RATE", "WRITE_FAILED",
                 "CANCELLED"):
        assert f"| {getattr(ExitCode, name)} |" in readme, name
