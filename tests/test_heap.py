"""heap.py: glibc's mmap threshold is fixed and the heap trimmed (no-ops without glibc)."""

import platform

import pytest

from workbench import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_prepare_and_trim_on_glibc():
    assert heap.prepare() is True
    blob = [bytearray(200_000) for _ in range(50)]  # mapped, then freed
    del blob
    heap.trim()  # returns free heap pages; must not raise



READ_SCRIPT = r"""
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

print(mapped_by_a_read(), flush=True)
from workbench import heap
assert heap.READ_BYTES == READ_BYTES
assert heap.prepare()
print(mapped_by_a_read(), flush=True)
"""


def _has_mallinfo2() -> bool:
    try:
        import ctypes

        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33+
    except (OSError, AttributeError, TypeError):
        return False
    return True


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
                    reason="glibc 2.33+ only (mallinfo2)")
def test_a_fixed_threshold_keeps_a_socket_read_in_the_heap(tmp_path):
    """A run that keeps no records fixes glibc's mmap threshold (``prepare``); on plain
    asyncio (``executor.uvloop: false``) every read of the replay client asks ``recv``
    for ``READ_BYTES``: under a threshold fixed below that, each read mapped, shrank and
    unmapped its buffer (measured: 1,927 recvfrom, 1,931 mremap, ~1,900 mmap and munmap
    more than with uvloop, docs/design-notes.md, "Memory of long runs"). Checked in a
    fresh interpreter by glibc's count of mapped blocks (``mallinfo2``) while a read's
    bytes are held: mapped before, not once ``prepare`` ran."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):  # glibc's own defaults
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", READ_SCRIPT], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, prepared = done.stdout.split()
    assert before == "1"  # a fresh interpreter maps each read
    assert prepared == "0"
