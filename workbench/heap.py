"""Give freed heap memory back to the OS during long runs (glibc only; elsewhere no-ops).

A run that keeps its records on disk only holds nothing per finished request
(``sys.getallocatedblocks()`` stays flat), yet its RSS still grew ~1.2 KB per
request: every request allocates and frees buffers above the 512-byte small
object limit (the prompt's id list, the JSON body, orjson's output buffer,
the response reads), and glibc's heap keeps the freed pages. Two calls bound it
(docs/design-notes.md, "Memory of long runs"; figures: ``bench/README.md#memory``):

- ``prepare``: ``mallopt(M_MMAP_THRESHOLD, 64 KiB)`` fixes the size above
  which an allocation gets its own mapping (returned whole when freed). glibc
  otherwise raises that threshold each time such a block is freed, after which
  the same buffers come from the heap and fragment it;
- ``trim``: ``malloc_trim(0)`` returns the free pages of the heap
  (``madvise``), called every ``TRIM_EVERY`` finished requests (~1 ms each).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

TRIM_EVERY = 5_000  # finished requests between two malloc_trim calls
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 64 * 1024


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - glibc only: musl and macOS have none
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def prepare() -> bool:
    """Fix glibc's mmap threshold for this process; False where there is no glibc."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim() -> None:
    """Return the heap's free pages to the OS (no-op without glibc)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
