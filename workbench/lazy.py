"""Names a package imports from its modules on first use (PEP 562): the package's
``__getattr__`` and ``__dir__`` for ``workbench`` and ``workbench.metrics``, so that
importing the package imports none of the modules behind its names (no socket, no
pandas: bench/README.md, "CLI start-up")."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, MutableMapping
from typing import Any


class LazyNames:
    """Each public name of ``package`` and the module it is imported from on first use;
    ``modules`` pairs a module with its names (space-separated). A name, once imported,
    is kept in the package's ``namespace`` (its ``globals()``): the next use is a plain
    attribute."""

    def __init__(self, package: str, namespace: MutableMapping[str, Any],
                 modules: Iterable[tuple[str, str]]) -> None:
        self.package = package
        self.namespace = namespace
        self.modules = {name: module for module, names in modules for name in names.split()}

    def get(self, name: str) -> Any:
        """The package's ``__getattr__``: ``name`` from its module (imported now)."""
        module = self.modules.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        self.namespace[name] = value
        return value

    def dir(self) -> list[str]:
        """The package's ``__dir__``: its lazy names and what it holds already."""
        return sorted({*self.modules, *self.namespace})
