"""The replay CLI end to end: a run against the embedded engine, and Ctrl-C mid-run."""

import json
import signal
import subprocess
import sys
from pathlib import Path

from interrupt import default_sigint, wait_for_lines

from workbench.data import path as data_path
from workbench.report.headline import percentiles_part

LARGE = str(data_path("tracelab/multi_session_large.csv"))


# the embedded engine 50x faster than its cost model: the same requests and records,
# a fraction of the wall time (the trace's arrivals and tool waits are not scaled)
FAST_SIM = "target:\n  url: sim\n  engine:\n    speedup: 50\n"


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "workbench", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _replay(out: Path, *args: str) -> subprocess.Popen:
    """``workbench replay`` on the large bundled trace against a fast embedded engine."""
    config = out / "fast-sim.yaml"
    config.write_text(FAST_SIM)
    return _cli("replay", "--trace", LARGE, "--config", str(config), "--target", "sim",
                "--no-progress", "-o", str(out), *args, preexec_fn=default_sigint)


def test_replay_cli_writes_a_run_directory(tmp_path):
    proc = _replay(tmp_path, "--max-items", "3", "--arrival", "saturated",
                   "--tool-wait-scale", "0", "--run-id", "r1")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = tmp_path / "r1"
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert summary["requests"] == len(records) > 0
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"
    # the headline, not JSON (docs/metrics.md, "Headline")
    ttft = percentiles_part("TTFT", summary["ttft_ms"])  # "p50/p90/max … of 19 requests"
    assert out.startswith(f"{summary['ok']}/{summary['requests']} ok · {ttft} · "), out
    assert "· client OK" in out or "· client LIMITED" in out


def test_ctrl_c_keeps_finished_records_and_says_cancelled(tmp_path):
    proc = _replay(tmp_path, "--run-id", "r2")
    records = Path(tmp_path, "r2", "records.jsonl")
    wait_for_lines(records, 3, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lines = records.read_text().splitlines()
    parsed = [json.loads(line) for line in lines]  # every line is complete JSON
    assert sum(p["status"] == "ok" for p in parsed) >= 3, (len(parsed), err)
    manifest = json.loads(Path(tmp_path, "r2", "manifest.json").read_text())
    assert manifest["status"] == "cancelled"


def test_a_finished_run_also_writes_records_parquet(tmp_path):
    import pyarrow.parquet as pq

    proc = _replay(tmp_path, "--max-items", "2", "--arrival", "saturated",
                   "--tool-wait-scale", "0", "--run-id", "r3")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    table = pq.read_table(tmp_path / "r3" / "records.parquet")
    lines = (tmp_path / "r3" / "records.jsonl").read_text().splitlines()
    assert table.num_rows == len(lines) > 0
    assert "ttft_ms" in table.column_names


def test_a_hard_kill_loses_no_finished_record(tmp_path):
    """A SIGKILL mid-run leaves only complete JSON lines, every one seen before the kill."""
    proc = _replay(tmp_path, "--run-id", "r4")
    records = Path(tmp_path, "r4", "records.jsonl")
    wait_for_lines(records, 3, proc)
    proc.kill()
    proc.communicate(timeout=30)
    lines = records.read_text().splitlines()
    assert len(lines) >= 3
    assert all(json.loads(line)["status"] == "ok" for line in lines)
