"""The layer contracts of pyproject.toml ([tool.importlinter]) hold: no import goes up a
layer and no package imports a sibling it must be independent of (so no import cycles
between the packages), checked by import-linter's ``lint-imports``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports() -> list[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]


def test_the_layer_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*lint_imports(), "--no-cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_package_of_workbench_is_in_a_layer() -> None:
    """A new package must be placed in the layers, or the contracts say nothing about it."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in conf["contracts"] if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    pkg = ROOT / "workbench"
    children = {f"workbench.{p.name}" for p in pkg.iterdir() if (p / "__init__.py").exists()}
    children |= {f"workbench.{p.stem}" for p in pkg.glob("*.py")
                 if p.stem not in {"__init__", "__main__"}}
    children -= {"workbench.data"}  # bundled traces: data, no code that imports workbench
    assert children - named == set(), f"not in any layer: {sorted(children - named)}"


def test_the_readme_layout_names_every_room() -> None:
    """README's "Layout" lists every package and top-level module of workbench/, and
    nothing that is not there."""
    import re

    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    pkg = ROOT / "workbench"
    rooms = {p.name + "/" for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"}
    modules = {p.name for p in pkg.glob("*.py") if p.stem != "__init__"}
    listed_dirs = set(re.findall(r"^  ([a-z_]+/)", block, re.M))
    assert listed_dirs == rooms, (sorted(rooms - listed_dirs), sorted(listed_dirs - rooms))
    missing = {m for m in modules if m not in block}
    assert not missing, f"README Layout does not mention {sorted(missing)}"
    inside = block.split("\nnotebooks ->", 1)[0]  # the workbench/ part of the tree
    for name in re.findall(r"\b([a-z_0-9]+\.py)\b", inside):
        assert list(pkg.rglob(name)), f"README Layout names {name}, which is not in workbench/"
