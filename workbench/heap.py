"""Give freed heap memory back to the OS during long runs (glibc only; elsewhere no-ops):
docs/design-notes.md, "Memory of long runs".
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

TRIM_EVERY = 5_000  # finished requests between two malloc_trim calls
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 64 * 1024


@functools.cache
def _libc() -> Any:
    """The C library the interpreter runs on, by the process's own symbols (``dlopen``
    of none): no ``ctypes.util.find_library``, whose import and ``ldconfig -p`` child
    cost every run ~17 ms of CPU at its start (bench/README.md, "virtual time")."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 - glibc only: musl and macOS have none
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no CDLL(None)
        return None
    return libc


def prepare() -> bool:
    """Fix glibc's mmap threshold for this process; False where there is no glibc."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim() -> None:
    """Return the heap's free pages to the OS (no-op without glibc)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
