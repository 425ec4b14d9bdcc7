"""A run killed with SIGKILL (no summary, manifest left ``running``): ``workbench report``
still renders it, says on stderr and on the report's first screen that the run was
killed, and exits 1, alone or in a comparison; the run's id is escaped wherever the
report shows it. docs/run-directory.md, "Reading a run that is not whole"."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from interrupt import wait_for_lines

from workbench.data import path as data_path
from workbench.errors import ExitCode

RUN_ID = "<img src=x onerror=alert(1)>"  # a hostile id: the report escapes it


def cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workbench", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, int]:
    """A real ``workbench replay`` against the embedded engine, SIGKILLed once three of
    its records are on disk: the run directory and the killed process's pid."""
    out = tmp_path_factory.mktemp("runs")
    proc = cli("replay", "--trace", str(data_path("tracelab/multi_session_large.csv")),
               "--target", "sim", "--no-progress", "-o", str(out), "--run-id", RUN_ID)
    run = out / RUN_ID
    wait_for_lines(run / "records.jsonl", 3, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -9
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"
    assert not (run / "summary.json").exists()
    return run, proc.pid


def killed_note(pid: int) -> str:
    return (f"INCOMPLETE: the run was killed (left 'running' by process {pid} on "
            f"{socket.gethostname()}, which is no longer alive); its records up to then are "
            "on disk, it has no summary")


@pytest.fixture(scope="module")
def report(killed, tmp_path_factory) -> tuple[subprocess.Popen, str, str, Path]:
    """``workbench report`` of the killed run: the process, its stdout and stderr, and
    the reports folder."""
    reports = tmp_path_factory.mktemp("reports")
    proc = cli("report", str(killed[0]), "-o", str(reports))
    out, err = proc.communicate(timeout=600)
    return proc, out, err, reports


def test_the_report_of_a_killed_run_is_written_and_exits_1(killed, report):
    run, pid = killed
    proc, out, err, reports = report
    assert proc.returncode == ExitCode.FAILED, err
    assert "Traceback" not in err, err
    assert f"workbench report: {run}: {killed_note(pid)}" in err.splitlines()
    n = len((run / "records.jsonl").read_text().splitlines())
    lines = out.splitlines()
    # the first screen: the headline says killed (not "running"), then how it ended
    assert lines[0].startswith(f"INCOMPLETE (killed) · {n}/{n} ok · TTFT "), out
    assert lines[1] == killed_note(pid), out
    assert lines[-2] == f"report: {reports / RUN_ID / 'report.html'}", out
    meta = json.loads((reports / RUN_ID / "report.json").read_text())
    assert meta["headline"] == lines[:2]  # the report's own first lines, as printed


def test_the_report_of_a_killed_run_escapes_its_id(report):
    reports = report[3]
    html = (reports / RUN_ID / "report.html").read_text()
    assert "INCOMPLETE: the run was killed (left 'running' by process" in html
    assert "<img src=x onerror" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x onerror" not in (reports / "index.html").read_text()


def test_a_comparison_with_a_killed_run_exits_1_and_says_which(killed, tmp_path):
    whole = tmp_path / "runs"
    done = cli("simulate", "--trace", str(data_path("tracelab/multi_session_example.csv")),
               "--max-items", "2", "-o", str(whole), "--run-id", "whole")
    assert done.wait(timeout=300) == ExitCode.COMPLETED, done.communicate()  # 5 requests
    proc = cli("report", str(whole / "whole"), str(killed[0]), "-o", str(tmp_path / "rep"),
               "--run-id", "cmp")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == ExitCode.FAILED, err
    assert f"workbench report: {killed[0]}: {killed_note(killed[1])}" in err.splitlines()
    lines = out.splitlines()
    assert any(line.startswith("run 1 (baseline): 5/5 ok · ") for line in lines), out
    assert any(line.startswith("run 2: INCOMPLETE (killed) · ") for line in lines), out


def test_a_partial_run_says_how_many_rounds_were_planned_recorded_skipped_and_never_sent():
    """A simulate with --max-model-len 3000 skipped 8 rounds and ended their sessions: the
    report's first screen said only "planned rounds were skipped or never sent; the
    manifest's completion block counts them", sending the reader to a JSON file for the
    numbers that say how much of the plan the 23/31 ok stands for."""
    from workbench.records import RunManifest
    from workbench.report.tables import run_end_note

    m = RunManifest.from_dict({"status": "partial", "completion": {
        "status": "partial", "planned_rounds": 64, "recorded_rounds": 31,
        "skipped_rounds": 8, "not_sent_rounds": 33}})
    assert run_end_note(m) == (
        "INCOMPLETE: partial (of 64 planned rounds, 31 were recorded, 8 of them skipped, "
        "and 33 never sent)")
    one = RunManifest.from_dict({"status": "partial", "completion": {
        "planned_rounds": 2, "recorded_rounds": 1, "skipped_rounds": 1, "not_sent_rounds": 1}})
    assert run_end_note(one) == (
        "INCOMPLETE: partial (of 2 planned rounds, 1 was recorded, 1 of them skipped, and 1 "
        "never sent)")
    # without the counts, the note as before
    assert run_end_note(RunManifest.from_dict({"status": "partial"})).startswith(
        "INCOMPLETE: partial (planned rounds were skipped or never sent")
