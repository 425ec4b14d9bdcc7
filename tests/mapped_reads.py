"""Whether a socket read's buffer is mapped (its own ``mmap``) or taken from the heap,
by glibc's count of mapped blocks (``mallinfo2``) around one ``recv(READ_BYTES)``, in a
fresh interpreter (a test's process has long since moved its threshold). ``PROBE`` is
the script's head: it defines ``mapped_by_a_read()`` and prints its count once before any
import of workbench's; a test appends what it checks and ``run`` gives the counts printed."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = r"""
import ctypes, socket, sys
READ_BYTES = 256 * 1024  # workbench.heap's, not imported yet

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info

def mapped_by_a_read():
    a, b = socket.socketpair()
    with a, b:
        a.send(b"data: {}\n\n")
        before = libc.mallinfo2().hblks
        got = b.recv(READ_BYTES)  # as asyncio's socket transport reads (no uvloop)
        mapped = libc.mallinfo2().hblks - before
        assert got == b"data: {}\n\n"
        return mapped

print(mapped_by_a_read(), flush=True)  # before any import of workbench's
"""


def _has_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33+
    except (OSError, AttributeError, TypeError):
        return False
    return True


needs_mallinfo2 = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
    reason="glibc 2.33+ only (mallinfo2)")


def run(tail: str, *argv: str, cwd: Path) -> list[str]:
    """``PROBE + tail`` in a fresh interpreter on this tree, glibc at its own defaults:
    what it printed, split."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for name in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", PROBE + tail, *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()
