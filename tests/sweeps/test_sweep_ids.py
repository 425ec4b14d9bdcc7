"""A sweep given no id gets a directory of its own, even when sweeps start in one second."""

from __future__ import annotations

from pathlib import Path

import workbench as wb
from workbench.sweeps.sweep_runner import fresh_sweep_dir, new_sweep_id

TRACE = Path(__file__).resolve().parents[2] / "workbench/data/tracelab/multi_session_example.csv"


def test_fresh_sweep_dirs_never_share_a_directory(tmp_path: Path) -> None:
    dirs = [fresh_sweep_dir(tmp_path, "grid") for _ in range(5)]
    assert len(set(dirs)) == 5 and all(d.is_dir() and d.parent == tmp_path for d in dirs)
    # the first free name of that second is the plain id, the later ones -2, -3 ...
    names = sorted(d.name for d in dirs)
    assert all(n.startswith(new_sweep_id("grid")[:8]) and "-grid" in n for n in names)


def test_taken_second_gets_a_suffix(tmp_path: Path) -> None:
    taken = tmp_path / new_sweep_id("grid")
    taken.mkdir()
    d = fresh_sweep_dir(tmp_path, "grid")
    assert d != taken and d.is_dir()


def test_two_different_sweeps_in_a_row_both_run(tmp_path: Path) -> None:
    cfg = {"trace": {"path": str(TRACE), "max_items": 1}, "target": {"url": "sim"}}
    first = wb.sweep(cfg, {"arrival.rate": [1, 2]}, virtual=True, out_dir=tmp_path)
    again = wb.sweep(cfg, {"arrival.rate": [1]}, virtual=True, out_dir=tmp_path)
    assert first.sweep_dir != again.sweep_dir
    assert len(first.points) == 2 and len(again.points) == 1
