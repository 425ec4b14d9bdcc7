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


def _module_imports() -> dict[str, set[str]]:
    """workbench module → the workbench modules it imports, at module level or inside a
    function alike (a lazy import is still a dependency); ``if TYPE_CHECKING:`` blocks
    are annotations only and do not count. ``from pkg import name`` depends on ``pkg``
    (its ``__init__`` runs) and on ``pkg.name`` when that is a module."""
    import ast

    pkg = ROOT / "workbench"
    mods: dict[str, Path] = {}
    for p in pkg.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        base_pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        found: set[str] = set()

        def visit(nodes: list[ast.AST], base_pkg: str = base_pkg, found: set[str] = found) -> None:
            for node in nodes:
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    visit(list(node.orelse))
                elif isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    target = node.module or ""
                    if node.level:
                        parts = base_pkg.split(".")
                        parts = parts[: len(parts) - node.level + 1]
                        target = ".".join([*parts, *([target] if target else [])])
                    found.add(target)
                    found.update(f"{target}.{a.name}" for a in node.names)
                else:  # function bodies, try/except, with, ...: every import counts
                    visit(list(ast.iter_child_nodes(node)))

        visit(list(ast.parse(path.read_text()).body))
        graph[mod] = {m for m in found if m in mods and m != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_inside_workbench() -> None:
    """No two modules of workbench import each other, directly or round a loop, at module
    level or inside a function (the layer contracts only see cycles between packages)."""
    assert _cycles(_module_imports()) == []


def test_the_cycle_check_sees_a_lazy_import_cycle() -> None:
    """The check is not vacuous: it sees imports inside functions, skips TYPE_CHECKING
    blocks, and a function-level import back to an importer is a cycle."""
    graph = _module_imports()
    # session.py imports metrics.files inside _write_outputs only
    assert "workbench.metrics.files" in graph["workbench.replay.session"]
    # extras.py imports base under TYPE_CHECKING only
    assert "workbench.backends.base" not in graph["workbench.backends.extras"]
    assert "workbench.metrics.summary" in graph["workbench.metrics.breakdown"]
    graph["workbench.metrics.summary"] = graph["workbench.metrics.summary"] | {
        "workbench.metrics.breakdown"
    }
    assert _cycles(graph) == [["workbench.metrics.breakdown", "workbench.metrics.summary"]]
