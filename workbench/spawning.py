"""Child processes started fresh (multiprocessing's ``spawn``), whatever script started us.

A child started by ``spawn`` first runs the parent's main module again, so that what it
defines can be unpickled there (the ``multiprocessing`` guide, "Safe importing of main
module"). workbench's children (virtual-time sweep points, capacity-plan searches, the
``processes`` executor's shards) run workbench functions on plain data and need nothing
from it, and running it again breaks two ordinary ways of calling workbench:

- a script without an ``if __name__ == "__main__":`` guard would start its sweep again
  in every child; multiprocessing refuses that and the pool breaks;
- a script read from standard input (``python - <<EOF``) has ``__file__ == "<stdin>"``,
  a file the child cannot open.

``children_start()`` is held while workbench starts processes: the main module's
``__file__`` and ``__spec__`` (how ``spawn`` finds it) are hidden for that moment, so the
children start from workbench alone (docs/sweeps.md, "parallel-points"). Unless the
script registered an axis value of its own (a trace format, a backend: something the
children look up by name, ``registry.registered_in_main``): then they need the script,
and it runs again in them as ``spawn`` always does (it must have its main guard).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from multiprocessing.context import SpawnContext
from typing import Any

from workbench.registry import registered_in_main

_LOCK = threading.Lock()
_MISSING = object()


def spawn_context() -> SpawnContext:
    """The start method every workbench child uses: a fresh interpreter (no inherited
    threads, event loops or locks)."""
    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def children_start() -> Iterator[None]:
    """While held, processes started by ``spawn`` do not run the main module again."""
    main = sys.modules.get("__main__")
    if main is None or registered_in_main():
        yield
        return
    with _LOCK:
        saved: dict[str, Any] = {name: getattr(main, name, _MISSING)
                                 for name in ("__file__", "__spec__")}  # fmt: skip
        if saved["__file__"] is not _MISSING:
            del main.__file__
        if saved["__spec__"] is not _MISSING:
            main.__spec__ = None
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is not _MISSING:
                    setattr(main, name, value)


__all__ = ["children_start", "spawn_context"]
