"""Run directories are exclusive and contained (issue 23, rule 3): a run id is claimed
atomically, an existing run is never replaced unless asked (``--overwrite``), of two runs
with one id at once one fails with exit code 2 before sending, and nothing is written
through a symlink out of ``out_dir``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from workbench.data import path as data_path
from workbench.errors import ExitCode
from workbench.storage.rundir import RunDirTaken, claim_run_dir

SMALL = str(data_path("tracelab/multi_session_example.csv"))
TIMEOUT_S = 180


def _args(command: str, out: Path, run_id: str, *extra: str) -> list[str]:
    target = ["--target", "sim", "--no-progress"] if command == "replay" else []
    return [sys.executable, "-m", "workbench", command, "--trace", SMALL, "--max-items", "3",
            "--arrival", "saturated", "--tool-wait-scale", "0", *target, "-o", str(out),
            "--run-id", run_id, *extra]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("command", ["replay", "simulate"])
def test_the_same_run_id_twice_keeps_the_first_run(tmp_path, command):
    first = _cli(*_args(command, tmp_path, "r"))
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir()}
    again = _cli(*_args(command, tmp_path, "r"))
    assert again.returncode == ExitCode.CONFIG_ERROR, again.stderr
    assert "already holds a run" in again.stderr and "Traceback" not in again.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir()} == before
    # asked: --overwrite replaces it with a fresh run
    over = _cli(*_args(command, tmp_path, "r", "--overwrite"))
    assert over.returncode == 0, over.stderr
    started = [json.loads(b)["started_at"] for b in
               (before["manifest.json"], (tmp_path / "r" / "manifest.json").read_bytes())]
    assert started[0] != started[1]


def test_two_runs_with_one_id_at_once(tmp_path):
    """Both start together: exactly one claims the directory; the other exits 2 before
    sending anything, and the winner's records are whole and its own."""
    procs = [subprocess.Popen(_args("replay", tmp_path, "same"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, ExitCode.CONFIG_ERROR], outs
    loser = outs[[p.returncode for p in procs].index(ExitCode.CONFIG_ERROR)]
    assert "already holds a run" in loser[1] and "Traceback" not in loser[1], loser
    assert loser[0] == ""  # no summary: it sent nothing
    run = tmp_path / "same"
    manifest = json.loads((run / "manifest.json").read_text())
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    assert manifest["status"] == "completed"
    assert len(records) == manifest["plan"]["rounds"]  # one run's, once each
    assert len({r["request_id"] for r in records}) == len(records)


def test_a_claim_is_atomic_between_threads(tmp_path):
    won, lost = [], []
    barrier = threading.Barrier(8)

    def claim(k: int) -> None:
        barrier.wait(timeout=30)
        try:
            claim_run_dir(tmp_path, "one", {"status": "running", "who": k})
            won.append(k)
        except RunDirTaken:
            lost.append(k)

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(won) == 1 and len(lost) == 7
    assert json.loads((tmp_path / "one" / "manifest.json").read_text())["who"] == won[0]


@pytest.mark.parametrize("command", ["replay", "simulate"])
def test_a_symlinked_run_directory_is_refused(tmp_path, command):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "r").symlink_to(elsewhere, target_is_directory=True)
    done = _cli(*_args(command, out, "r"))
    assert done.returncode == ExitCode.CONFIG_ERROR, done.stderr
    assert "is a symlink" in done.stderr and "Traceback" not in done.stderr
    assert list(elsewhere.iterdir()) == []  # nothing written through it


def test_a_symlinked_file_in_a_fresh_directory_is_refused(tmp_path):
    """A run file planted as a symlink (records.jsonl -> a file outside) counts as a run
    there: refused, and the file it points at is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out" / "r").mkdir(parents=True)
    (tmp_path / "out" / "r" / "records.jsonl").symlink_to(victim)
    with pytest.raises(RunDirTaken, match=r"records\.jsonl"):
        claim_run_dir(tmp_path / "out", "r", {"status": "running"})
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "out" / "r" / "manifest.json").exists()


def test_a_report_directory_without_a_run_can_take_one(tmp_path):
    """A notebook's run lands in its report directory (render_report makes it first)."""
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.html").write_text("<html>")
    d = claim_run_dir(tmp_path, "r", {"status": "running"})
    assert json.loads((d / "manifest.json").read_text())["status"] == "running"


@pytest.mark.parametrize("what", ["sweep", "report"])
def test_a_symlinked_sweep_or_report_directory_is_refused(tmp_path, what):
    """The same containment for a sweep directory and a report directory."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "x").symlink_to(elsewhere, target_is_directory=True)
    if what == "sweep":
        args = [sys.executable, "-m", "workbench", "sweep", "--trace", SMALL, "--virtual",
                "--max-items", "2", "--over", "arrival.rate=1,2", "-o", str(out),
                "--sweep-id", "x"]
    else:
        made = _cli(*_args("simulate", tmp_path, "s"))
        assert made.returncode == 0, made.stderr
        args = [sys.executable, "-m", "workbench", "report", str(tmp_path / "s"), "-o",
                str(out), "--run-id", "x"]
    done = _cli(*args)
    assert done.returncode == ExitCode.CONFIG_ERROR, done.stderr
    assert "is a symlink" in done.stderr and "Traceback" not in done.stderr
    assert list(elsewhere.iterdir()) == []


def test_overwrite_never_replaces_a_live_run(tmp_path):
    from workbench.storage.rundir import process_identity

    claim_run_dir(tmp_path, "live", {"status": "running", "host": process_identity()})
    with pytest.raises(RunDirTaken, match="still running"):
        claim_run_dir(tmp_path, "live", {"status": "running"}, overwrite=True)
    # a finished one is replaced when asked
    claim_run_dir(tmp_path, "done", {"status": "completed"})
    (tmp_path / "done" / "records.jsonl").write_text("{}\n")
    claim_run_dir(tmp_path, "done", {"status": "running", "new": True}, overwrite=True)
    assert json.loads((tmp_path / "done" / "manifest.json").read_text())["new"] is True
    assert not (tmp_path / "done" / "records.jsonl").exists()
