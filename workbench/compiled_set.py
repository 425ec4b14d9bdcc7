"""The modules compiled by mypyc, and the import finder that runs them or their sources.

``MODULES`` are compiled together, as one group (``setup.py``, ``mypycify``): their shared
library is ``workbench/_vt__mypyc.*.so`` and each module has a small extension beside its
``.py``. Compiled modules of one group call each other natively, so the set runs all
compiled or all from source, never mixed. ``install()`` (called by ``workbench/__init__``)
puts a finder first on ``sys.meta_path`` that loads every module of the set from its
``.py`` when

- ``WORKBENCH_COMPILED=0`` (the Python twin, the reference), or
- the build is stale or incomplete: the build writes ``MANIFEST`` beside this file with
  the sha256 of each compiled source; a source that no longer matches, or a missing
  extension, runs the sources for the whole set and warns once on stderr.

Where nothing of the set was built (no compiler at install), the sources run silently.
docs/virtual-time.md, "Compiled step loop".
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType

#: the group's name: its shared library is ``workbench/_vt__mypyc``
GROUP = "workbench._vt"
#: the compiled modules, in the order mypyc is given them
MODULES: tuple[str, ...] = (
    "workbench.clock",
    "workbench.segments",
    "workbench.sim.cost",
    "workbench.sim.decoders",
    "workbench.sim.engine",
    "workbench.sim.hosttier",
    "workbench.sim.kvcache",
    "workbench.sim.kvindex",
    "workbench.sim.scheduler",
)
#: the build's record of its sources (module -> sha256 of its .py), beside this file
MANIFEST = "_vt_manifest.json"
STALE_WARNING = ("workbench: compiled modules out of date with their sources: rebuild with "
                 "`pip install -e .`; running the Python twin\n")

_ROOT = os.path.dirname(os.path.abspath(__file__))  # the package directory


def compiled_wanted() -> bool:
    """False with ``WORKBENCH_COMPILED=0``: no compiled module runs, every twin does."""
    return os.environ.get("WORKBENCH_COMPILED", "1").strip() != "0"


def source_path(module: str, root: str = _ROOT) -> str:
    """The ``.py`` of a module of the set, under the package directory ``root``."""
    return os.path.join(root, *module.split(".")[1:]) + ".py"


def _extension(module: str, root: str) -> str | None:
    base = os.path.join(root, *module.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def manifest(root: str = _ROOT) -> dict[str, str]:
    """What the build writes: each module's source digest."""
    return {m: sha256_file(source_path(m, root)) for m in MODULES}


def state(root: str = _ROOT) -> str:
    """``"compiled"``, ``"off"`` (``WORKBENCH_COMPILED=0``), ``"unbuilt"`` (no piece of
    the set built) or ``"stale"`` (built, but a piece is missing or a source changed)."""
    if not compiled_wanted():
        return "off"
    pieces = [_extension(m, root) for m in (*MODULES, GROUP + "__mypyc")]
    record = os.path.join(root, MANIFEST)
    if not any(pieces) and not os.path.exists(record):
        return "unbuilt"
    if not all(pieces):
        return "stale"
    try:
        with open(record, encoding="utf-8") as f:
            recorded = json.load(f)
        return "compiled" if recorded == manifest(root) else "stale"
    except (OSError, ValueError):
        return "stale"


class _SourceFinder:
    """Finds the set's modules as their ``.py`` (ahead of the path finder, which would
    prefer the extension beside it)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.root))


_state: str | None = None


def install() -> str:
    """Decide once per process which runs; on sources, install the finder. Returns the state."""
    global _state
    if _state is None:
        _state = state()
        if _state != "compiled":
            sys.meta_path.insert(0, _SourceFinder(_ROOT))
        if _state == "stale":
            sys.stderr.write(STALE_WARNING)
    return _state


def compiled() -> bool:
    """True when the mypyc-compiled set runs (not its sources)."""
    return install() == "compiled"


__all__ = ["GROUP", "MANIFEST", "MODULES", "compiled", "compiled_wanted", "install",
           "manifest", "source_path", "state"]
