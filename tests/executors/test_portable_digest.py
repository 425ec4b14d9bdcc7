"""Independent check of portable simulate digests (``report.canonical.CANONICAL_EXCLUDED``).

The same trace content and engine config, run by ``python -m workbench simulate`` in
separate processes under another cwd, TZ, LANG, PYTHONHASHSEED, output folder, run
id and trace path (relative or absolute, renamed), give one digest; any knob that
changes what the engine does (an engine option, the seed, the token salt, the
policy) gives another.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.data import path as data_path

TRACE = Path(data_path("tracelab/multi_session_example.csv"))
ROOT = Path(__file__).resolve().parents[2]


def digest(trace: str, cwd: Path, *args: str, **env: str) -> str:
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", trace,
           "--engine", "num_blocks=512", "--digest", *args]  # fmt: skip
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=full)
    assert done.returncode == 0, done.stderr
    return next(ln for ln in done.stdout.splitlines() if ln.startswith("digest:"))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("base")
    return digest(str(TRACE), d, "-o", str(d / "out"), TZ="UTC", LANG="C.UTF-8",
                  PYTHONHASHSEED="0")  # fmt: skip


def test_same_content_same_digest_under_any_environment(tmp_path: Path, base: str) -> None:
    here = tmp_path / "x y" / "ünï"
    here.mkdir(parents=True)
    shutil.copy(TRACE, here / "renamed.csv")
    got = digest("renamed.csv", here, "-o", "rel/out", "--run-id", "other-name",
                 TZ="Pacific/Chatham", LANG="de_DE.UTF-8", LC_ALL="de_DE.UTF-8",
                 PYTHONHASHSEED="12345")  # fmt: skip
    assert got == base


@pytest.mark.parametrize(
    "knob",
    [["--engine", "block_size=32"], ["--seed", "7"], ["--token-salt", "run-b"],
     ["--policy", "prefix-preserving"], ["--max-items", "1"]],
    ids=["engine-block-size", "seed", "token-salt", "policy", "max-items"],
)
def test_a_knob_that_changes_the_run_changes_the_digest(
    tmp_path: Path, base: str, knob: list[str]
) -> None:
    assert digest(str(TRACE), tmp_path, "-o", str(tmp_path / "o"), *knob) != base
