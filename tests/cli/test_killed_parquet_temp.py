"""``records.parquet`` is written as the run goes, into ``records.parquet.tmp``, a row
group per 8,192 records (``metrics.columns.RecordTables``), and renamed into place when
the run is saved. A run killed with SIGKILL after its first row group leaves that
temporary; what reads the run (``workbench report``, ``metrics.columns.convert``, the
stored summary) reads past it, and the first of them to write the Parquet file replaces
it. A run stopped by SIGINT or SIGTERM saves its Parquet file whole and leaves none
(docs/run-directory.md, "Stopping"). Real processes, each stopped once its temporary is
on disk."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from interrupt import default_sigint, wait_for_file

from workbench.errors import ExitCode
from workbench.storage.columnar import BATCH_ROWS

pytestmark = pytest.mark.slow  # three live runs of 8,192 requests or more
TMP = "records.parquet.tmp"


def _trace(path: Path) -> str:
    """Twice a row group of one-request sessions, 10 ms apart in the trace (saturated)."""
    rows = ["session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
            "tool_wait_after_ms"]
    rows += [f"{i},{i * 10},0,0,16,2,0" for i in range(2 * BATCH_ROWS)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _stopped(tmp_path: Path, sig: signal.Signals) -> tuple[Path, subprocess.Popen, str]:
    """A live replay against the embedded engine, sent ``sig`` once its Parquet temporary
    exists (its first row group written): the run directory, the process, its stderr."""
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "replay", "--trace", _trace(tmp_path / "t.csv"),
         "--format", "session", "--arrival", "saturated", "--max-concurrency", "64",
         "--target", "sim", "--no-progress", "-o", str(out), "--run-id", "r"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    run = out / "r"
    try:
        wait_for_file(run / TMP, proc, bound_s=600)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    return run, proc, err


def _records(run: Path) -> int:
    return (run / "records.jsonl").read_bytes().count(b"\n")


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run, proc, _ = _stopped(tmp_path_factory.mktemp("killed"), signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert (run / TMP).is_file() and not (run / "records.parquet").exists()
    assert _records(run) >= BATCH_ROWS
    return run


def test_report_of_a_killed_run_reads_past_its_parquet_temporary(killed, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(killed, run)
    proc = subprocess.run([sys.executable, "-m", "workbench", "report", str(run),
                           "-o", str(tmp_path / "reports")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == ExitCode.FAILED, proc.stderr  # killed: not whole (README)
    assert "Traceback" not in proc.stderr, proc.stderr
    n = _records(run)
    assert proc.stdout.startswith(f"INCOMPLETE (killed) · {n}/{n} ok · "), proc.stdout
    assert not (run / TMP).exists() and _rows(run / "records.parquet") == n


def test_convert_and_the_stored_summary_of_a_killed_run_read_past_it(killed, tmp_path):
    from workbench.metrics.columns import convert
    from workbench.metrics.summary import summarize_stored

    run = tmp_path / "r"
    shutil.copytree(killed, run)
    n = _records(run)
    assert summarize_stored(run)["requests"] == n  # builds records.parquet first
    assert not (run / TMP).exists() and _rows(run / "records.parquet") == n
    shutil.copy(killed / TMP, run / TMP)  # the temporary again, beside a Parquet file
    assert _rows(convert(run)) == n
    assert not (run / TMP).exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_saves_its_parquet_whole_and_leaves_no_temporary(tmp_path, sig):
    run, proc, err = _stopped(tmp_path, sig)
    assert proc.returncode == ExitCode.CANCELLED, err
    assert not (run / TMP).exists()
    assert _rows(run / "records.parquet") == _records(run)
