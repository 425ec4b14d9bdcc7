"""The tree each side runs: a git revision's own temporary worktree, or this tree.

What a revision is is read back from its checkout, never taken from the spec; its
compiled modules are copied, built (``build_python``) or left to the Python twins
(docs/parity.md, "The two sides").
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.traces.load import file_sha256

GIT_TIMEOUT_S = 120
# (C source, the glob of its built module), relative to the package
COMPILED = (("kernels.c", "_kernels*.so"), ("sim/kvcache.c", "sim/_kvcache*.so"))


def package_dir() -> Path:
    import workbench

    return Path(workbench.__file__).resolve().parent


def repo_root() -> Path:
    """The git work tree holding this package."""
    return Path(_git(package_dir(), "rev-parse", "--show-toplevel"))


def _git(cwd: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                             timeout=GIT_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"git {' '.join(args)}: {exc}") from None
    if out.returncode:
        raise ConfigError(f"git {' '.join(args)} in {cwd}: {out.stderr.strip() or out.returncode}")
    return out.stdout.strip()


@dataclass
class Tree:
    """Where a side's children import ``workbench`` from, and what it is."""

    label: str
    root: Path  # the folder PYTHONPATH names (it holds workbench/)
    commit: str
    dirty: bool
    compiled: dict[str, str] = field(default_factory=dict)  # module: copied | absent | built
    checkout: bool = False  # a temporary worktree of ours (removed by ``release``)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "root": str(self.root), "commit": self.commit,
                "dirty": self.dirty, "compiled": self.compiled,
                "checkout": "git worktree (temporary)" if self.checkout else "this tree"}

    def release(self) -> None:
        if self.checkout:
            subprocess.run(["git", "-C", str(repo_root()), "worktree", "remove", "--force",
                            str(self.root)], capture_output=True, timeout=GIT_TIMEOUT_S,
                           check=False)  # fmt: skip
            shutil.rmtree(self.root.parent, ignore_errors=True)


def this_tree(label: str) -> Tree:
    pkg = package_dir()
    root = pkg.parent
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    except ConfigError:  # an installed wheel: no git
        commit, dirty = "unknown (not a git checkout)", False
    compiled = {so: ("present" if list(pkg.glob(so)) else "absent (Python twins)")
                for _, so in COMPILED}  # fmt: skip
    return Tree(label, root, commit, dirty, compiled)


def checkout(label: str, revision: str, build_python: str | None = None) -> Tree:
    """A temporary worktree of ``revision`` (``Tree.release`` removes it); ``build_python``
    builds its compiled modules when its C source differs from this tree's."""
    repo = repo_root()
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    tmp = Path(tempfile.mkdtemp(prefix=f"wb-parity-{label}-"))
    root = tmp / "tree"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(root), sha)
    tree = Tree(label, root, _git(root, "rev-parse", "HEAD"),
                bool(_git(root, "status", "--porcelain")), checkout=True)
    here, there = package_dir(), root / "workbench"
    differs = []
    for src, so in COMPILED:
        built = sorted(here.glob(so))
        same = ((there / src).is_file() and (here / src).is_file()
                and file_sha256(there / src) == file_sha256(here / src))
        if built and same:
            for f in built:
                shutil.copy2(f, there / f.relative_to(here))
            tree.compiled[so] = "copied (C source identical to this tree's)"
        else:
            tree.compiled[so] = "absent (Python twins: C source differs or not built here)"
            differs.append(so)
    if differs and build_python:
        note = _build(root, build_python)
        for so in differs:
            ok = note is None and list(there.glob(so))
            tree.compiled[so] = ("built in the checkout (its own C source)" if ok else
                                 f"absent (Python twins: the build failed: {note})")
    return tree


BUILD_TIMEOUT_S = 900


def _build(root: Path, python: str) -> str | None:
    """``python setup.py -q build_ext --inplace`` in ``root``; None, or why it failed."""
    try:
        out = subprocess.run([python, "setup.py", "-q", "build_ext", "--inplace"], cwd=root,
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                             check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if out.returncode:
        tail = out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        return tail[0]
    return None
