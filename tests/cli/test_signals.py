"""SIGTERM (and SIGHUP, SIGQUIT, SIGUSR1) stops a real ``workbench replay`` subprocess
exactly as Ctrl-C does."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from interrupt import default_sigint, wait_for_lines, wait_for_text
from waiting import until

from workbench.data import path as data_path
from workbench.errors import ExitCode

LARGE = str(data_path("tracelab/multi_session_large.csv"))


def _replay(out: Path, run_id: str) -> subprocess.Popen:
    # sessions with tool waits and a slowed engine: requests are in flight at any moment
    return subprocess.Popen(
        [sys.executable, "-m", "workbench", "replay", "--trace", LARGE, "--target", "sim",
         "--arrival", "saturated", "--max-concurrency", "8", "--tool-wait-scale", "0",
         "--no-progress", "-o", str(out), "--run-id", run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                                 signal.SIGUSR1], ids=lambda s: s.name)
def test_sigterm_saves_the_run_as_cancelled(tmp_path, sig):
    """Every signal a user can send (SIGHUP: a terminal or ssh session gone; before, it
    killed the process where it stood: manifest ``running``, no summary, no Parquet)."""
    proc = _replay(tmp_path, "term")
    run = tmp_path / "term"
    wait_for_lines(run / "records.jsonl", 5, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert "Traceback" not in err, err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "cancelled"
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    statuses = {r["status"] for r in records}
    assert "ok" in statuses and "cancelled" in statuses, statuses  # in-flight ones are kept
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_cancelled"] is True
    assert summary["requests"] == len(records)
    assert pq.read_metadata(run / "records.parquet").num_rows == len(records)


def test_sigint_and_sigterm_end_the_same_way(tmp_path):
    """Same exit status, same manifest status, same set of files."""
    seen = []
    for sig, name in ((signal.SIGINT, "int"), (signal.SIGTERM, "term")):
        proc = _replay(tmp_path, name)
        wait_for_lines(tmp_path / name / "records.jsonl", 3, proc)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        files = sorted(p.name for p in (tmp_path / name).iterdir())
        seen.append((proc.returncode, manifest["status"], files))
    assert seen[0] == seen[1], seen


def test_sigterm_stops_a_sharded_run_the_same_way(tmp_path):
    """``executor.workers: 2``: the shards' records merge, in-flight ones cancelled."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({
        "trace": LARGE, "target": "sim", "executor": {"workers": 2},
        "arrival": {"mode": "saturated", "max_concurrency": 8, "tool_wait_scale": 0.0},
    }))
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "replay", "--config", str(cfg), "--no-progress",
         "-o", str(tmp_path), "--run-id", "sharded"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    run = tmp_path / "sharded"

    def records() -> int:
        shards = list((run / "shards").glob("records-*.jsonl")) if (run / "shards").exists() else []
        return sum(p.read_bytes().count(b"\n") for p in shards)

    until(lambda: records() >= 5, "the shards held 5 records", proc=proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert json.loads((run / "manifest.json").read_text())["status"] == "cancelled"
    statuses = {json.loads(x)["status"] for x in (run / "records.jsonl").read_text().splitlines()}
    assert {"ok", "cancelled"} <= statuses
    assert (run / "summary.json").exists() and (run / "records.parquet").exists()


def test_sigint_prints_the_headline_of_what_was_saved(tmp_path):
    """A stopped replay prints the headline a finished one prints, marked INCOMPLETE
    (cancelled), its run directory, then the one line and exit 130."""
    proc = _replay(tmp_path, "head")
    wait_for_lines(tmp_path / "head" / "records.jsonl", 3, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "workbench replay: interrupted by SIGINT", err
    summary = json.loads((tmp_path / "head" / "summary.json").read_text())
    lines = out.strip().splitlines()
    assert lines[0].startswith(
        f"INCOMPLETE (cancelled) · {summary['ok']}/{summary['requests']} ok · TTFT"), out
    assert lines[-1] == f"run directory: {tmp_path / 'head'}", out


SAVING = '"status": "cancelled"'  # the manifest as the stopped run starts saving


@pytest.mark.parametrize("command", ["replay", "simulate"])
@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_second_signal_while_the_run_saves_waits_for_the_save(tmp_path, command, second):
    """Ctrl-C pressed twice: the second press lands while the stopped run writes its
    summary and Parquet (the manifest already says ``cancelled``). The save finishes, the
    headline is printed, exit 130 (docs/run-directory.md, "Stopping"). Before, a second
    SIGINT raised inside the save: manifest ``cancelled`` but no summary.json, no
    records.parquet and no headline, for replay and simulate alike."""
    if command == "replay":
        proc = _replay(tmp_path, "twice")
    else:  # a long virtual span: stopped long before it ends
        proc = subprocess.Popen(
            [sys.executable, "-m", "workbench", "simulate", "--trace", LARGE, "--arrival",
             "closed-loop", "--max-concurrency", "4", "--duration", "86400",
             "-o", str(tmp_path), "--run-id", "twice"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=default_sigint)
    run = tmp_path / "twice"
    wait_for_lines(run / "records.jsonl", 3, proc)
    proc.send_signal(signal.SIGINT)
    wait_for_text(run / "manifest.json", SAVING, proc)
    proc.send_signal(second)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert "Traceback" not in err, err
    # the first signal stopped the run: the second only waited for the save
    assert err.strip().splitlines()[-1] == f"workbench {command}: interrupted by SIGINT", err
    assert json.loads((run / "manifest.json").read_text())["stop_signal"] == "SIGINT"
    records = (run / "records.jsonl").read_text().splitlines()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_cancelled"] is True and summary["requests"] == len(records)
    assert pq.read_metadata(run / "records.parquet").num_rows == len(records)
    assert out.startswith(f"INCOMPLETE (cancelled) · {summary['ok']}/{len(records)} ok"), out
    assert out.strip().splitlines()[-1] == f"run directory: {run}", out
