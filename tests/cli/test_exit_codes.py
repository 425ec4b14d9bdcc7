"""Distinct, documented exit codes (workbench.errors.ExitCode), from real CLI runs."""

import json
import re
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


@pytest.mark.parametrize(("extra", "code", "ok"), [
    ((), ExitCode.ERROR_RATE, "0/3"),                           # default --max-error-rate 0
    (("--max-error-rate", "0.5"), ExitCode.ERROR_RATE, "0/3"),  # 100 % > 50 %
    # errors allowed, but each session stopped at its first failure: 5 of 8 rounds never
    # sent, a partial run (it exited 0, while `report` of it exits 1)
    (("--max-error-rate", "1"), ExitCode.FAILED, "0/3"),
    (("--max-error-rate", "1", "--continue-on-error"), ExitCode.COMPLETED, "0/8"),
])
def test_a_run_whose_requests_all_failed_does_not_exit_0(tmp_path, extra, code, ok):
    proc = _cli("replay", "--config", _failing_config(tmp_path, 1.0), "--no-progress",
                "-o", str(tmp_path), *extra)
    assert proc.returncode == code, proc.stderr
    assert f"{ok} ok · " in proc.stdout, proc.stdout  # the headline


def test_a_partial_run_exits_1_from_the_command_that_ran_it_and_from_report(tmp_path):
    """One rule (``commands._run_end``): the run that did not finish whole exits 1 from
    ``replay`` and from ``report`` of it, each saying how it ended in the same words."""
    proc = _cli("replay", "--config", _failing_config(tmp_path, 1.0), "--no-progress",
                "-o", str(tmp_path), "--run-id", "p", "--max-error-rate", "1")
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    note = ("INCOMPLETE: partial (of 8 planned rounds, 3 were recorded, 0 of them skipped, "
            "and 5 never sent)")
    assert note in proc.stdout.splitlines(), proc.stdout
    from workbench.commands.report import _read_status

    assert _read_status([str(tmp_path / "p")]) == ExitCode.FAILED  # report's status


@pytest.mark.parametrize(("command", "failed"), [("replay", "8 of 8"), ("simulate", "2 of 5")])
def test_report_judges_a_run_by_the_max_error_rate_its_manifest_records(tmp_path, capsys,
                                                                         command, failed):
    """The run's ``--max-error-rate`` is in its manifest, so ``report`` of it exits 4 as the
    command did; a manifest without it (older, or an API run's) still reads, unjudged.
    (``simulate``: the embedded engine's context is too short for 2 of the 5 requests.)"""
    from workbench.commands.report import _read_status
    from workbench.storage.rundir import read_manifest

    given = (["--config", _failing_config(tmp_path, 1.0), "--no-progress"]
             if command == "replay" else ["--trace", _partial_trace(tmp_path)])
    proc = _cli(command, *given, "--continue-on-error", "-o", str(tmp_path), "--run-id", "e",
                "--max-error-rate", "0.25")
    assert proc.returncode == ExitCode.ERROR_RATE, proc.stderr
    # the command says why it exits 4, in the words report uses
    assert (f"workbench {command}: {failed} requests failed, more than --max-error-rate 0.25"
            in proc.stderr.splitlines()), proc.stderr
    run = tmp_path / "e"
    assert read_manifest(run).max_error_rate == 0.25
    capsys.readouterr()
    assert _read_status([str(run)]) == ExitCode.ERROR_RATE
    assert capsys.readouterr().err.splitlines() == [
        f"workbench report: {run}: {failed} requests failed, more than --max-error-rate 0.25 "
        "(the run's)"]
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["max_error_rate"]  # as written before the field was
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert read_manifest(run).max_error_rate is None
    assert _read_status([str(run)]) == ExitCode.COMPLETED


def test_the_exit_rule_in_one_place():
    from workbench.commands._run_end import run_exit_status as rule

    assert rule("completed") == ExitCode.COMPLETED
    for status in ("partial", "failed", "cancelled", "running", "killed"):
        assert rule(status) == ExitCode.FAILED, status  # read by report, or ended so
    assert rule("cancelled", cancelled=True) == ExitCode.CANCELLED  # stopped by a signal
    assert rule("partial", errors=3, ok=0, max_error_rate=0.5) == ExitCode.ERROR_RATE
    assert rule("completed", errors=1, ok=3, max_error_rate=0.25) == ExitCode.COMPLETED
    assert rule("completed", errors=1, ok=3) == ExitCode.COMPLETED  # report: no threshold


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


def _partial_trace(tmp_path: Path) -> str:
    """Two sessions; the first's second request is past the embedded engine's context
    (131,072 tokens), so it fails and its third is never sent: every run of it is partial."""
    trace = tmp_path / "one_too_long.csv"
    trace.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                     "tool_wait_after_ms\n"
                     "0,0,0,0,512,16,10\n0,0,1,528,140000,16,10\n0,0,2,140544,64,16,0\n"
                     "1,500,0,0,400,16,10\n1,500,1,416,64,16,0\n")
    return str(trace)


def test_a_sweep_whose_point_ran_partial_exits_1_naming_the_run(tmp_path):
    """The one rule (``_run_end``) per point's run: every point done, yet a run of each
    is partial, so the sweep does not exit 0, and stderr names the point and run."""
    proc = _cli("sweep", "--trace", _partial_trace(tmp_path), "--virtual",
                "--over", "arrival.tool_wait_scale=0,1", "--parallel", "1",
                "--max-error-rate", "1",  # its failed request allowed: partial is the rule
                "-o", str(tmp_path), "--sweep-id", "s")
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    ended = ("INCOMPLETE: partial (of 5 planned rounds, 4 were recorded, 0 of them skipped, "
             "and 1 never sent)")
    for line in (f"point 0 (tool_wait_scale=0) run p000-r0: {ended}",
                 f"point 1 (tool_wait_scale=1) run p001-r0: {ended}"):
        assert line in proc.stderr.splitlines(), proc.stderr


@pytest.mark.parametrize(("extra", "code"), [
    ((), ExitCode.ERROR_RATE),                                  # default 0: any failure
    (("--max-error-rate", "0.25"), ExitCode.ERROR_RATE),        # 2 of 5 > 25 %
    (("--max-error-rate", "0.5"), ExitCode.COMPLETED),
])
def test_a_sweep_applies_max_error_rate_to_each_points_run(tmp_path, extra, code):
    """``sweep --max-error-rate`` judges each point's run as ``replay`` judges its own
    (``_run_end.run_exit_status``): every point still runs; a point over the rate exits 4,
    is named in one line on stderr and marked in the table; each run's manifest records
    the rate, so ``report`` of the run judges it alike. Point 1's engine is too short for
    the trace's long requests (2 of 5 fail); point 0's holds them."""
    from workbench.commands.report import _read_status
    from workbench.storage.rundir import read_manifest

    proc = _cli("sweep", "--trace", _partial_trace(tmp_path), "--virtual",
                "--continue-on-error", "--parallel", "1", *extra,
                "--over", "engine.max_model_len=262144,131072",
                "-o", str(tmp_path), "--sweep-id", "s")
    assert proc.returncode == code, proc.stderr
    sweep = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [p["status"] for p in sweep["points"]] == ["done", "done"]  # both ran
    rate = extra[1] if extra else "0"
    runs = tmp_path / "s" / "runs"
    assert [read_manifest(runs / r).max_error_rate for r in ("p000-r0", "p001-r0")] == \
        [float(rate)] * 2
    assert _read_status([str(runs / "p001-r0")]) == code
    over = [line for line in proc.stderr.splitlines() if "max-error-rate" in line]
    if code == ExitCode.COMPLETED:
        assert over == [] and "over --max-error-rate" not in proc.stdout, proc.stdout
        return
    # replay's words for its run (``_run_end.over_error_rate``), after the point and run
    assert over == [f"point 1 (max_model_len=131072) run p001-r0: 2 of 5 requests failed, "
                    f"more than --max-error-rate {rate}"], proc.stderr
    assert [p.get("over_max_error_rate") for p in sweep["points"]] == [False, True]
    assert sweep["max_error_rate"] == float(rate)  # the rate the table was judged by
    table = [re.split(r"\s{2,}", line.strip()) for line in proc.stdout.splitlines()]
    head = next(i for i, row in enumerate(table) if "over --max-error-rate" in row)
    assert table[head][-1] == "over --max-error-rate", proc.stdout
    rows = {row[0]: row[-1] for row in table[head + 1:head + 3]}  # in load order
    assert rows == {"131072": "True", "262144": "False"}, proc.stdout
    # its failed requests ended early: the highest throughput, said with its mark
    best = next(line for line in proc.stdout.splitlines() if line.startswith("Highest"))
    assert "max_model_len=131072" in best, best
    assert best.endswith(' It is over --max-error-rate (marked in the table\'s "over '
                         '--max-error-rate" column).'), best
    # judging by another rate writes nothing; keeping its verdict is the one write
    from workbench.commands.sweep import judge_error_rate
    from workbench.sweeps.store import load_sweep, write_error_rate

    stored = (tmp_path / "s" / "sweep.json").read_bytes()
    loaded = load_sweep(tmp_path / "s")
    assert list(judge_error_rate(loaded, 1.0)) == []
    assert (tmp_path / "s" / "sweep.json").read_bytes() == stored
    assert loaded.manifest.max_error_rate == float(rate)
    write_error_rate(loaded, 1.0, [])
    sweep = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert sweep["max_error_rate"] == 1.0
    assert [p["over_max_error_rate"] for p in sweep["points"]] == [False, False]


@pytest.mark.parametrize(("before", "now", "code"), [
    ("0.5", "0", ExitCode.ERROR_RATE),  # stricter now: point 1 is over, judged by 0
    ("0", "0.5", ExitCode.COMPLETED),   # looser now: the old verdict (over 0) is not carried
])
def test_a_resumed_sweep_judges_its_reused_runs_by_the_rate_given_now(tmp_path, before, now,
                                                                      code):
    """A resumed sweep reuses its finished runs and judges them by the ``--max-error-rate``
    given now (docs/sweeps.md, "A sweep directory"): its exit status, stderr, table and
    ``sweep.json`` say that rate; a run made under another says so on stderr, since its
    own manifest (by which ``workbench report`` judges it) keeps the rate it was made with."""
    from workbench.storage.rundir import read_manifest

    args = ("sweep", "--trace", _partial_trace(tmp_path), "--virtual", "--continue-on-error",
            "--parallel", "1", "--over", "engine.max_model_len=262144,131072",
            "-o", str(tmp_path), "--sweep-id", "s")
    first = _cli(*args, "--max-error-rate", before)
    assert first.returncode != code, first.stderr
    proc = _cli(*args, "--max-error-rate", now)
    assert proc.returncode == code, proc.stderr
    assert "simulating" not in proc.stderr, proc.stderr  # both runs reused, none run again
    sweep = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert sweep["max_error_rate"] == float(now)
    over = code == ExitCode.ERROR_RATE
    assert [p["over_max_error_rate"] for p in sweep["points"]] == [False, over]
    lines = proc.stderr.splitlines()
    assert [line for line in lines if "requests failed, more than" in line] == (
        [f"point 1 (max_model_len=131072) run p001-r0: 2 of 5 requests failed, more than "
         f"--max-error-rate {now}"] if over else []), proc.stderr
    assert (f"note: runs p000-r0, p001-r0 were made with --max-error-rate {before} (their "
            f"manifests', by which workbench report judges them); this sweep judged them "
            f"by --max-error-rate {now}") in lines, proc.stderr
    assert ("over --max-error-rate" in proc.stdout) == over, proc.stdout
    runs = tmp_path / "s" / "runs"
    assert read_manifest(runs / "p001-r0").max_error_rate == float(before)  # kept as made


def test_a_sweep_of_whole_runs_exits_0(tmp_path):
    proc = _cli("sweep", "--trace", SESSIONS, "--max-items", "2", "--virtual",
                "--over", "arrival.tool_wait_scale=0,1", "--parallel", "1",
                "-o", str(tmp_path), "--sweep-id", "s")
    assert proc.returncode == ExitCode.COMPLETED, proc.stderr
    assert "INCOMPLETE" not in proc.stderr + proc.stdout


def test_a_demo_whose_run_is_partial_exits_1(tmp_path):
    """``demo`` follows the rule too: its report is rendered, its headline says the run is
    partial, and it exits 1 (``make demo``'s bundled run is whole: next test)."""
    proc = _cli("demo", "--trace", _partial_trace(tmp_path), "--no-progress",
                "-o", str(tmp_path))
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    assert proc.stdout.startswith("INCOMPLETE (partial) · 3/4 ok"), proc.stdout
    assert (tmp_path / "demo" / "report.html").exists()


def test_make_demos_bundled_run_is_whole(tmp_path):
    """``make demo`` (``workbench demo``: the bundled trace at its defaults) exits 0 by
    the rule only when its run is whole: the same trace, config and engine, in virtual
    time, completes with every request ok."""
    import workbench as wb
    from workbench.commands.demo import DEMO_TRACE

    result = wb.simulate({"trace": {"path": str(data_path(DEMO_TRACE))},
                          "arrival": {"mode": "trace-timed"},
                          "backend": "openai", "target": {"url": "sim"},
                          "out_dir": str(tmp_path), "run_id": "demo"})
    assert result.manifest.status == "completed"
    assert [r.status for r in result.records] == ["ok"] * 303
