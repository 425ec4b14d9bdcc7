"""No process outlives its run (issue 23, rule 1): a ``workbench replay --workers 2``
killed with SIGKILL (the OOM killer, Kubernetes past its grace period) takes its worker
processes and its embedded engine with it, and the run directory it left ``running`` is
reported as killed by ``workbench report`` and by the next run in that folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from proctree import descendants, kill_left, living
from waiting import until

from workbench.data import path as data_path

LARGE = str(data_path("tracelab/multi_session_large.csv"))
SMALL = str(data_path("tracelab/multi_session_example.csv"))
DEADLINE_S = 60.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _kill_and_see_children_end(proc: subprocess.Popen, kids: set[int]) -> None:
    """SIGKILL ``proc`` (no handler runs), then wait until every child of it ended too."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=DEADLINE_S)
    until(lambda: not living(kids), f"every child of {proc.pid} ended ({kids})")


def _shard_lines(run: Path) -> int:
    shards = run / "shards"
    if not shards.is_dir():
        return 0
    return sum(p.read_bytes().count(b"\n") for p in shards.glob("records-*.jsonl"))


@pytest.fixture
def server():
    """A server that outlives the replay (a real target does): the embedded engine in a
    process of the test's own, slowed so the plan lasts."""
    engine = subprocess.Popen(
        [sys.executable, "-m", "workbench.sim.process", json.dumps({"speedup": 0.2})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert engine.stdout is not None
        yield json.loads(engine.stdout.readline())["base_url"]
    finally:
        engine.kill()
        engine.wait(timeout=DEADLINE_S)


@pytest.mark.parametrize("target", ["url", "sim"])
def test_sigkill_of_a_sharded_replay_leaves_no_process_and_is_reported(
    tmp_path, capsys, request, target
):
    """``url``: the workers would go on sending the plan to a server that is still up
    (before: for minutes); ``sim``: the embedded engine's process ends too."""
    url = request.getfixturevalue("server") if target == "url" else "sim"
    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "replay", "--trace", LARGE, "--target", url,
         "--workers", "2", "--arrival", "saturated", "--max-concurrency", "8",
         "--tool-wait-scale", "0", "--no-progress", "-o", str(tmp_path), "--run-id", "killed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    kids: dict[int, int] = {}

    def sending() -> bool:
        kids.update(descendants(proc.pid))  # known even if the wait fails (then killed below)
        return _shard_lines(run) >= 5

    try:
        until(sending, "the workers sent requests", proc=proc)
        kids.update(descendants(proc.pid))
        # two workers (and the embedded engine for ``sim``; multiprocessing's resource
        # tracker may be there too)
        assert len(kids) >= (3 if target == "sim" else 2), kids
        _kill_and_see_children_end(proc, kids)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_left(kids)  # never leave one behind (they are orphans now)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "running" and manifest["host"]["pid"] == proc.pid

    # workbench report says so ...
    from workbench.commands.report import _read_status

    assert _read_status([str(run)]) == 1  # report exits 1 (ExitCode.FAILED)
    err = capsys.readouterr().err
    assert f"left 'running' by process {proc.pid}" in err and "no longer alive" in err, err
    # ... and so does the next run in that folder, in one warning line
    nxt = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "--trace", SMALL, "--max-items", "2",
         "-o", str(tmp_path), "--run-id", "next"],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )
    assert nxt.returncode == 0, nxt.stderr
    lines = [ln for ln in nxt.stderr.splitlines() if "left 'running'" in ln]
    assert len(lines) == 1 and str(run) in lines[0], nxt.stderr


def test_a_live_run_is_not_reported_as_killed(tmp_path):
    from workbench.records import RunManifest
    from workbench.storage.rundir import process_identity, running_note

    me = RunManifest("r", host=process_identity())  # status: running
    assert running_note(me) == f"still running (process {os.getpid()})"
    gone = RunManifest("r", host={**process_identity(), "pid_start": -1})  # pid reused
    assert "no longer alive" in (running_note(gone) or "")
    assert running_note(RunManifest("r", host=me.host, status="completed")) is None


def test_sigkill_of_a_parallel_virtual_sweep_leaves_no_process(tmp_path):
    """Points simulated in a process pool (``--parallel 2``) for a day of virtual time
    each: they end with the sweep, not when their point is done."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "sweep", "--trace", SMALL, "--virtual",
         "--parallel", "2", "--over", "arrival.max_concurrency=2,4", "--arrival",
         "closed-loop", "--max-concurrency", "2", "--duration", "86400", "-o", str(tmp_path),
         "--sweep-id", "v"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    runs = tmp_path / "v" / "runs"
    kids: dict[int, int] = {}

    def started() -> bool:
        kids.update(descendants(proc.pid))  # known even if the wait fails (then killed below)
        return runs.is_dir() and len(list(runs.glob("*/manifest.json"))) >= 2

    try:
        until(started, "both points started", proc=proc)
        kids.update(descendants(proc.pid))
        assert len(kids) >= 2, kids
        _kill_and_see_children_end(proc, kids)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_left(kids)  # never leave one behind (they are orphans now)

