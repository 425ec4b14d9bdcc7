"""The serving-trace formats end to end on the command line: ``workbench stats`` and
``workbench simulate`` on the public slices (docs/trace-formats.md, "azure", "burstgpt")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from public_data import FIXTURES, REPO

CONV = FIXTURES / "serving-traces/azure_conv_2023_head150.csv"
BURST = FIXTURES / "serving-traces/burstgpt_constructed.csv"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_azure_stats_and_simulate_end_to_end(tmp_path):
    stats = _cli("stats", str(CONV), cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert re.search(r"^format +azure \(detected\)$", stats.stdout, re.M)
    assert re.search(r"^  independent requests +150$", stats.stdout, re.M)
    assert re.search(r"^  arrival span \(ms\) +50,631\.1$", stats.stdout, re.M)
    sim = _cli("simulate", "--trace", str(CONV), "--max-items", "40", "-o",
               str(tmp_path / "runs"), "--json", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    summary = json.loads(sim.stdout[: sim.stdout.rindex("}") + 1])
    assert (summary["requests"], summary["ok"], summary["errors"]) == (40, 40, 0)


def test_burstgpt_stats_and_simulate_take_the_reader_options(tmp_path):
    stats = _cli("stats", str(BURST), "--trace-option", "model=GPT-4", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert re.search(r"^format +burstgpt \(detected\)$", stats.stdout, re.M)
    assert re.search(r"^  independent requests +3$", stats.stdout, re.M)
    sim = _cli("simulate", "--trace", str(BURST), "--trace-option", "log_type=API log",
               "-o", str(tmp_path / "runs"), "--json", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    summary = json.loads(sim.stdout[: sim.stdout.rindex("}") + 1])
    assert (summary["requests"], summary["ok"], summary["errors"]) == (2, 2, 0)
