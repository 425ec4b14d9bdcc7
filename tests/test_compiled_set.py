"""The mypyc-compiled set runs all compiled or all from source (``workbench.compiled_set``;
docs/virtual-time.md, "Compiled step loop"): compiled where its build matches its sources,
the sources with ``WORKBENCH_COMPILED=0``, and the sources with one warning where a source
changed after the build or a piece of it is missing. The digests of the two are compared
in tests/sim/test_sim_compiled_twin.py."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import compiled_set
from workbench.compiled_set import MANIFEST, MODULES, STALE_WARNING, manifest, source_path, state

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

# each module of the set as the child imported it, and what the switch decided
REPORT = ("import json, importlib; import workbench.compiled_set as c; "
          "print(json.dumps([c.install(), [importlib.import_module(m).__file__ "
          "for m in c.MODULES]]))")  # fmt: skip


def _child(pythonpath: Path, compiled: bool = True) -> tuple[str, list[str], str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath),
           "WORKBENCH_COMPILED": "1" if compiled else "0"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", REPORT], env=env, capture_output=True,
                         text=True, timeout=120, check=True, cwd=pythonpath)  # fmt: skip
    got, files = json.loads(out.stdout)
    return got, files, out.stderr


def _fake_build(root: Path) -> None:
    """A package directory with the set's sources, an (empty) extension for each and for
    the group, and the manifest: what ``state`` looks at."""
    for m in MODULES:
        src = Path(source_path(m, str(root)))
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {m}\n")
        src.with_suffix(SUFFIX).write_bytes(b"")
    (root / (compiled_set.GROUP.split(".")[-1] + "__mypyc" + SUFFIX)).write_bytes(b"")
    (root / MANIFEST).write_text(json.dumps(manifest(str(root))))


def test_state_compiled_where_the_build_matches_its_sources(tmp_path: Path,
                                                             monkeypatch) -> None:  # fmt: skip
    monkeypatch.delenv("WORKBENCH_COMPILED", raising=False)
    _fake_build(tmp_path)
    assert state(str(tmp_path)) == "compiled"
    monkeypatch.setenv("WORKBENCH_COMPILED", "0")
    assert state(str(tmp_path)) == "off"


def test_state_stale_on_a_changed_source_a_missing_extension_or_manifest(
        tmp_path: Path, monkeypatch) -> None:  # fmt: skip
    monkeypatch.delenv("WORKBENCH_COMPILED", raising=False)
    _fake_build(tmp_path)
    src = Path(source_path("workbench.sim.scheduler", str(tmp_path)))
    src.write_text(src.read_text() + "# edited\n")
    assert state(str(tmp_path)) == "stale"
    _fake_build(tmp_path)
    Path(source_path("workbench.sim.kvindex", str(tmp_path))).with_suffix(SUFFIX).unlink()
    assert state(str(tmp_path)) == "stale"
    _fake_build(tmp_path)
    (tmp_path / MANIFEST).unlink()
    assert state(str(tmp_path)) == "stale"
    _fake_build(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    assert state(str(tmp_path)) == "stale"


def test_state_unbuilt_where_nothing_of_the_set_was_built(tmp_path: Path,
                                                          monkeypatch) -> None:  # fmt: skip
    monkeypatch.delenv("WORKBENCH_COMPILED", raising=False)
    _fake_build(tmp_path)
    for so in tmp_path.rglob("*" + SUFFIX):
        so.unlink()
    (tmp_path / MANIFEST).unlink()
    assert state(str(tmp_path)) == "unbuilt"


def _built_here() -> bool:
    """The set's build is in this checkout; under CI it must be (else the twin tests would
    compare the sources with themselves)."""
    return state(str(PACKAGE)) != "unbuilt" or os.environ.get("CI") == "true"


def test_the_set_runs_compiled_where_built() -> None:
    if not _built_here():
        pytest.skip("the compiled set is not built here (setup.py; CI builds it)")
    got, files, err = _child(ROOT)
    assert got == "compiled", err
    assert all(f.endswith(SUFFIX) for f in files), files
    assert err == ""


def test_compiled_0_imports_every_source_of_the_set() -> None:
    got, files, err = _child(ROOT, compiled=False)
    assert got == "off"
    assert files == [source_path(m, str(PACKAGE)) for m in MODULES]
    assert err == ""


def test_a_changed_source_runs_the_whole_set_from_source_with_one_warning(
        tmp_path: Path) -> None:  # fmt: skip
    if not _built_here():
        pytest.skip("the compiled set is not built here (setup.py; CI builds it)")
    copy = tmp_path / "workbench"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "notebooks"))
    got, files, err = _child(tmp_path)  # the copy as built: compiled
    assert got == "compiled" and all(f.endswith(SUFFIX) for f in files)
    src = copy / "sim" / "hosttier.py"
    src.write_text(src.read_text() + "\n# edited after the build\n")
    got, files, err = _child(tmp_path)
    assert got == "stale"
    assert files == [source_path(m, str(copy)) for m in MODULES]
    assert err == STALE_WARNING  # once, for the whole set
