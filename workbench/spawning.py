"""Child processes started fresh (``spawn``) that do not run the main script again
(``children_start``; docs/sweeps.md, "parallel-points").
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
