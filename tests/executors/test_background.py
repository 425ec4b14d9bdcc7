"""``BackgroundRun``: the panel's replay in a process of its own, followed by a snapshot."""

from __future__ import annotations

from pathlib import Path

from waiting import until

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import stderr_tail
from workbench.executors.background import BackgroundRun, Snapshot, SnapshotBox

DEMO = str(data_path("tracelab/multi_session_example.csv"))


def cfg(**over: object) -> RunConfig:
    d: dict = {"trace": {"path": DEMO, "max_items": 2},
               "target": {"url": "sim", "engine": {"speedup": 50.0}}}
    d.update(over)
    return RunConfig.from_dict(d)


def test_a_run_without_out_dir_comes_back_in_memory_and_leaves_no_directory() -> None:
    job = BackgroundRun(cfg()).start()
    temp = Path(job.temp_dir or "")
    assert temp.is_dir() and job.run_dir.parent == temp
    snap = job.wait(120)
    assert snap.phase == "done" and snap.status == "completed"
    assert (snap.done, snap.total) == (5, 5)  # the last count is never held back
    result = job.result()
    assert [r.status for r in result.records] == ["ok"] * 5
    assert result.run_dir is None and not temp.exists()
    assert result.manifest.client["release_lag_ms"]["count"] == 5


def test_records_are_read_as_the_run_directory_grows(tmp_path: Path) -> None:
    job = BackgroundRun(cfg(out_dir=str(tmp_path))).start()
    tail = job.records()
    job.wait(120)
    seen = tail.read()
    assert len(seen) == 5 and tail.read() == []  # each record once
    assert job.result().run_dir == str(tmp_path / (job.cfg.run_id or ""))


def test_a_failure_names_its_kind_and_the_config_never_reaches_the_command_line(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("session_id,arrival_time\n0,zero\n")
    url = "http://someone:s3cret-pw@127.0.0.1:9"
    job = BackgroundRun(cfg(trace={"path": str(bad)}, target={"url": url})).start()
    assert job.proc is not None and "s3cret-pw" not in " ".join(map(str, job.proc.args))
    snap = job.wait(120)
    assert snap.phase == "failed" and snap.error_kind == "TraceFormatError"
    assert str(bad) in (snap.error or "")


def test_the_snapshot_keeps_stopping_until_the_outcome_and_the_outcome_for_good() -> None:
    box = SnapshotBox()
    assert box.read() == Snapshot()
    box.update(phase="running", done=3, total=10)
    box.update(phase="stopping")
    assert box.update(phase="running", done=4).phase == "stopping"  # a late message
    end = box.update(phase="cancelled")
    assert box.update(phase="running").phase == "cancelled" and box.read() is end
    assert end.finished and end.done == 4 and end.seq == 4


def test_an_unreachable_url_fails_without_showing_its_password() -> None:
    job = BackgroundRun(cfg(target={"url": "http://someone:s3cret-pw@127.0.0.1:9"})).start()
    snap = job.wait(120)
    assert snap.phase == "failed" and "cannot reach" in (snap.error or "")
    assert "s3cret-pw" not in (snap.error or "") and "127.0.0.1:9" in (snap.error or "")


# -- issue 40: the child ends with status 0, not SIGABRT (-6) -------------------------------
def test_the_process_exits_with_status_0_after_a_run_while_its_stdin_is_still_open() -> None:
    """The kernel closes the child's stdin only after the child has exited (``_read``): a
    child whose stdin watcher sat in a buffered ``readline`` aborted at interpreter exit."""
    job = BackgroundRun(cfg()).start()
    snap = job.wait(120)
    assert snap.phase == "done"
    assert job.proc is not None and job.proc.wait(timeout=30) == 0
    assert job.returncode == 0
    assert "Fatal Python error" not in stderr_tail(job._stderr)
    job.result()


def test_the_process_exits_with_status_0_after_a_stop() -> None:
    job = BackgroundRun(cfg(trace={"path": DEMO},
                            target={"url": "sim", "engine": {"speedup": 0.2}})).start()
    until(lambda: job.snapshot().done >= 1, "the job's first request ended")
    job.stop()
    snap = job.wait(120)
    assert snap.phase == "cancelled"
    assert job.proc is not None and job.proc.wait(timeout=30) == 0 and job.returncode == 0
    assert "Fatal Python error" not in stderr_tail(job._stderr)
