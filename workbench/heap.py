"""glibc's heap, set for a process's way of allocating (glibc only; elsewhere no-ops):
freed memory given back to the OS during long runs (docs/design-notes.md, "Memory of long
runs"); a socket read's buffer taken from the heap, not mapped for each read
(docs/capture.md, "The relay").
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

TRIM_EVERY = 5_000  # finished requests between two malloc_trim calls
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
#: what asyncio's socket transport asks ``recv`` for at each read (its ``max_size``): a
#: bytes object that large is allocated, then shrunk to the bytes that came
READ_BYTES = 256 * 1024
#: the fixed threshold (``prepare``): above a read's buffer, or each read of the replay
#: client on plain asyncio is mapped, shrunk and unmapped (docs/design-notes.md, "Memory
#: of long runs"); fixed, so glibc does not raise it to every larger block freed
MMAP_THRESHOLD_BYTES = 2 * READ_BYTES


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
    """Fix glibc's mmap threshold for this process (``MMAP_THRESHOLD_BYTES``: a socket
    read's buffer stays below it); False where there is no glibc."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim() -> None:
    """Return the heap's free pages to the OS (no-op without glibc)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def reads_from_heap() -> None:
    """Raise glibc's mmap threshold above a socket read's buffer (``READ_BYTES``), as the
    first large block freed would: below it, each read mapped its 256 KiB, shrank and
    unmapped it (three system calls and page faults a read: docs/capture.md, "The
    relay"). glibc raises its threshold to the size of a mapped block once it is freed
    (up to 32 MiB), so one block of 1 MiB freed here does it, and only raises it; nothing
    where the threshold is fixed (``prepare``) or higher already, nor without glibc."""
    block = bytearray(4 * READ_BYTES)
    del block
