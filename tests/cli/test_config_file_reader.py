"""Every configuration file the CLI takes is read by one bounded reader (docs/config-bounds.md).

``replay --config``, ``simulate --engine-config``, ``plan --preset FILE.json`` and
``parity SPEC``: a FIFO is refused by kind without blocking, and a 64 GiB (sparse) file
is refused at the 16 MiB bound without being read, each as one line with exit 2 naming
the file, before anything is created. Before the one reader, ``--engine-config`` and
``plan --preset`` blocked forever on a FIFO and read a file of any size whole
(``read_text``; here past the child's 4 GiB address-space limit), and ``parity`` read the
whole spec before cutting it to 1 MiB. The waits are bounded (``timeout``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import CONFIG_MAX_BYTES
from workbench.data import path as data_path
from workbench.errors import ExitCode

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 4 << 30  # address space: a whole read of the 64 GiB file cannot succeed
BOUND_S = 60  # CLI start-up is ~2 s; a FIFO that blocks is the only way to reach this


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _args(caller: str, path: Path, out: Path) -> list[str]:
    return {
        "replay --config": ["replay", "--trace", SESSIONS, "--config", str(path),
                            "--target", "sim", "-o", str(out)],
        "simulate --engine-config": ["simulate", "--trace", SESSIONS, "--engine-config",
                                     str(path), "-o", str(out)],
        "plan --preset": ["plan", "--trace", SESSIONS, "--preset", str(path), "--slo",
                          "ttft_ms:p90<=2000", "-o", str(out), "--parallel", "1"],
        "parity": ["parity", str(path), "-o", str(out)],
    }[caller]


WHAT = {"replay --config": "config", "simulate --engine-config": "engine config",
        "plan --preset": "engine config", "parity": "parity spec"}


def _refused(caller: str, path: Path, out: Path) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "workbench", *_args(caller, path, out)],
            capture_output=True, text=True, timeout=BOUND_S, preexec_fn=_limit_memory,
            env={**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{caller} {path.name} did not finish in {BOUND_S} s (blocked)")
    assert proc.returncode == ExitCode.CONFIG_ERROR, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())  # nothing ran
    return proc.stderr


@pytest.mark.parametrize("caller", WHAT)
def test_a_fifo_is_refused_by_kind_without_blocking(tmp_path, caller):
    fifo = tmp_path / "c.json"
    os.mkfifo(fifo)
    err = _refused(caller, fifo, tmp_path / "out")
    assert f"{fifo}: cannot read {WHAT[caller]}: not a regular file: a FIFO (named pipe)" \
        in err, err


@pytest.mark.parametrize("caller", WHAT)
def test_a_file_past_the_bound_is_refused_unread(tmp_path, caller):
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(64 << 30)  # sparse: no disk, but a whole read needs 64 GiB
    err = _refused(caller, big, tmp_path / "out")
    assert (f"{big}: {WHAT[caller]} file larger than the bound of {CONFIG_MAX_BYTES:,} bytes "
            "(docs/config-bounds.md)") in err, err


def test_a_fifo_as_a_calibrated_preset_is_refused_without_blocking(tmp_path):
    """``preset=FILE.json`` (a calibrated preset, read in ``sim.presets``, which sits below
    the config layer) is checked with ``stat`` before it is opened: it blocked forever."""
    fifo = tmp_path / "mybox.json"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "workbench", "simulate", "--trace", SESSIONS, "--engine",
             f"preset={fifo}", "-o", str(out)], capture_output=True, text=True,
            timeout=BOUND_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"preset={fifo.name} did not finish in {BOUND_S} s (blocked)")
    assert proc.returncode == ExitCode.CONFIG_ERROR and proc.stderr.count("\n") == 1, proc.stderr
    assert f"calibrated preset {fifo}: not a regular file" in proc.stderr
    assert not out.exists()
