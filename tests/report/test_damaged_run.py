"""A damaged run directory is never read as if whole: ``workbench report`` says what was
damaged, where and what the numbers are based on, on stderr and in the report's headline
(exit 1), or refuses a directory it cannot trust (exit 2, nothing rendered).
docs/run-directory.md, "A damaged run directory"."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.data import path as data_path
from workbench.storage.rundir import RunDirError, run_damage


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd,
                          env={**__import__("os").environ,
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real run directory (8 records) made by a small ``simulate -o``."""
    root = tmp_path_factory.mktemp("runs")
    proc = cli("simulate", "--trace", str(data_path("tracelab/multi_session_example.csv")),
               "--max-items", "3", "-o", str(root), "--run-id", "whole", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "whole"


def copy(run: Path, tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(run, d)
    (d / "records.parquet").unlink(missing_ok=True)
    return d


def cut_mid_line(path: Path, line: int) -> None:
    """Keep ``line - 1`` whole lines and half of line ``line`` (a crash mid-write)."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: line - 1]) + lines[line - 1][: len(lines[line - 1]) // 2])


def test_a_whole_run_has_no_damage(run):
    assert run_damage(run) == []


def test_a_cut_last_line_is_named_with_the_records_read(run, tmp_path):
    d = copy(run, tmp_path)
    cut_mid_line(d / "records.jsonl", 8)
    assert run_damage(d) == [
        "records.jsonl: line 8 cut short (the run was interrupted?): 7 records read"]


def test_a_file_cut_in_its_first_line_is_not_read_as_empty(run, tmp_path):
    d = copy(run, tmp_path)
    cut_mid_line(d / "records.jsonl", 1)
    assert run_damage(d) == [
        "records.jsonl: line 1 cut short (the run was interrupted?): 0 records read",
        "records.jsonl: 0 records read, summary.json counted 8 (lines missing): "
        "the report counts the 0"]


def test_missing_lines_are_counted_against_the_summary(run, tmp_path):
    d = copy(run, tmp_path)
    lines = (d / "records.jsonl").read_bytes().splitlines(keepends=True)
    (d / "records.jsonl").write_bytes(b"".join(lines[:2] + lines[5:]))
    assert run_damage(d) == [
        "records.jsonl: 5 records read, summary.json counted 8 (lines missing): "
        "the report counts the 5"]


def test_a_cut_lifecycle_is_named_too(run, tmp_path):
    d = copy(run, tmp_path)
    n = len((d / "lifecycle.jsonl").read_bytes().splitlines())
    cut_mid_line(d / "lifecycle.jsonl", n)
    assert run_damage(d) == [
        f"lifecycle.jsonl: line {n} cut short (the run was interrupted?): "
        f"{n - 1} event{'' if n == 2 else 's'} read"]


def test_a_garbage_line_or_a_broken_manifest_is_an_error_naming_file_and_line(run, tmp_path):
    d = copy(run, tmp_path)
    lines = (d / "records.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = b"xx{\n"
    (d / "records.jsonl").write_bytes(b"".join(lines))
    with pytest.raises(RunDirError, match=r"records\.jsonl:3: invalid JSON line"):
        run_damage(d)
    proc = cli("report", str(d), "-o", str(tmp_path / "rep"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{d / 'records.jsonl'}:3: invalid JSON line" in proc.stderr
    assert not (tmp_path / "rep").exists()  # nothing rendered from it

    shutil.copy(run / "records.jsonl", d / "records.jsonl")
    (d / "manifest.json").write_text('{"run_id":')
    proc = cli("report", str(d), "-o", str(tmp_path / "rep"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{d / 'manifest.json'}: not a readable manifest" in proc.stderr
    assert not (tmp_path / "rep").exists()


def test_report_of_a_cut_run_says_so_on_the_console_and_its_first_screen(run, tmp_path):
    d = copy(run, tmp_path)
    cut_mid_line(d / "records.jsonl", 8)
    proc = cli("report", str(d), "-o", str(tmp_path / "rep"), cwd=tmp_path)
    note = "records.jsonl: line 8 cut short (the run was interrupted?): 7 records read"
    assert proc.returncode == 1, proc.stderr
    assert f"workbench report: DAMAGED: {d / note}" in proc.stderr.splitlines()
    out = proc.stdout.splitlines()
    assert out[0].startswith("7/7 ok ·") and out[1] == f"DAMAGED: {note}"
    meta = json.loads((tmp_path / "rep" / "run" / "report.json").read_text())
    assert meta["headline"][:2] == out[:2]  # the report's first lines, as printed


def test_compare_names_a_damaged_run_under_its_headline(run, tmp_path):
    from workbench.report.compare import compare_headline, load_runs

    d = copy(run, tmp_path)
    cut_mid_line(d / "records.jsonl", 8)
    runs = load_runs([run, d], ["whole", "cut"])
    lines = compare_headline(runs).lines
    at = next(i for i, line in enumerate(lines) if line.startswith("cut: "))
    assert lines[at + 1] == ("  DAMAGED: records.jsonl: line 8 cut short (the run was "
                             "interrupted?): 7 records read")
    assert not any("DAMAGED" in line for line in lines[:at])  # the whole run: none


def test_a_damage_line_is_red_like_a_warning():
    from workbench.report.headline import Headline

    html = Headline(["8/8 ok", "DAMAGED: records.jsonl: line 8 cut short"]).html()
    assert html.count("color:#a61b1b;") == 1 and "DAMAGED" in html
