"""A failed write stops the run (issue 23, rule 2): with the output disk full (a small
tmpfs, as root) or a file-size limit (``RLIMIT_FSIZE`` with SIGXFSZ ignored: EFBIG),
``replay``, ``simulate`` and ``report -o`` stop at the first failed write: one error line
naming the path and the errno, no traceback, no torn line in ``records.jsonl``, the
manifest ``failed`` with the reason, exit code ``WRITE_FAILED``."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from small_disk import small_disk

from workbench.data import path as data_path
from workbench.errors import ExitCode

LARGE = str(data_path("tracelab/multi_session_large.csv"))
SMALL = str(data_path("tracelab/multi_session_example.csv"))
TIMEOUT_S = 300


def _fsize_limit(limit: int):
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def _cli(args: list[str], preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=preexec)


def _check_failed_run(proc: subprocess.CompletedProcess, run: Path, errno_name: str,
                      *, manifest_must: bool = True) -> list[dict]:
    assert proc.returncode == ExitCode.WRITE_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "cannot write" in ln]
    assert len(errors) == 1, proc.stderr
    assert str(run) in errors[0] and errno_name in errors[0], errors
    records = []
    # sharded: the shard files stay (nothing could merge them); each holds whole lines
    files = [run / "records.jsonl", *sorted(run.glob("shards/records-*.jsonl"))]
    for f in [f for f in files if f.exists()]:
        data = f.read_bytes()
        assert not data or data.endswith(b"\n"), (f, data[-200:])  # whole lines only
        records += [json.loads(line) for line in data.splitlines()]
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest_must or manifest["status"] != "running":
        assert manifest["status"] == "failed", manifest["status"]
        assert errno_name in manifest["failure"], manifest.get("failure")
    return records


REPLAY = ["replay", "--trace", LARGE, "--target", "sim", "--arrival", "saturated",
          "--max-concurrency", "4", "--tool-wait-scale", "0", "--no-progress"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_size_limit_stops_a_replay_at_the_first_failed_write(tmp_path, workers):
    """records.jsonl hits the limit after a few dozen records; the run stops sending (far
    fewer requests than the plan's 2,000+), no line is torn."""
    proc = _cli([*REPLAY, "--workers", str(workers), "-o", str(tmp_path), "--run-id", "big"],
                _fsize_limit(200_000))
    records = _check_failed_run(proc, tmp_path / "big", "EFBIG")
    assert 0 < len(records) < 1000, len(records)


def test_a_full_disk_stops_a_replay(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        proc = _cli([*REPLAY, "-o", str(disk), "--run-id", "full"])
        records = _check_failed_run(proc, disk / "full", "ENOSPC", manifest_must=False)
        assert len(records) < 1000


def test_a_file_size_limit_stops_simulate(tmp_path):
    cfg = tmp_path / "cfg.json"  # records straight to disk, as a large run does
    cfg.write_text(json.dumps({"executor": {"keep_records": False}}))
    proc = _cli(["simulate", "--trace", LARGE, "--config", str(cfg), "-o", str(tmp_path),
                 "--run-id", "sim"], _fsize_limit(100_000))
    _check_failed_run(proc, tmp_path / "sim", "EFBIG")


def test_report_on_a_full_disk_is_one_line(tmp_path):
    done = _cli(["simulate", "--trace", SMALL, "--max-items", "3", "-o", str(tmp_path),
                 "--run-id", "s"])
    assert done.returncode == 0, done.stderr
    proc = _cli(["report", str(tmp_path / "s"), "-o", str(tmp_path / "reports")],
                _fsize_limit(100_000))
    assert proc.returncode == ExitCode.WRITE_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write" in lines[0] and "EFBIG" in lines[0], lines
    assert str(tmp_path / "reports") in lines[0]


def test_any_command_on_a_full_disk_is_one_line(tmp_path):
    """Not only runs: ``tracegen -o`` past a file-size limit says which file and errno."""
    proc = _cli(["tracegen", LARGE, "-o", str(tmp_path / "canonical.csv")],
                _fsize_limit(20_000))
    assert proc.returncode == ExitCode.WRITE_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write" in lines[0] and "EFBIG" in lines[0], lines
