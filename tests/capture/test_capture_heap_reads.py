"""A started capture proxy takes a socket read's buffer from glibc's heap: below the
threshold each read of a streamed answer mapped 256 KiB, shrank and unmapped it (three
system calls and page faults a piece: docs/capture.md, "The relay"). Checked in a fresh
interpreter, by glibc's own count of mapped blocks (``mallinfo2``) while a read's bytes are
held: mapped before anything of workbench's is imported, not once the proxy started.
(Imports may raise the threshold themselves, e.g. compiling a changed module frees large
blocks: so the fix is only proven where they do not, as with compiled modules cached.)"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import asyncio, ctypes, socket, sys
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
        got = b.recv(READ_BYTES)  # as asyncio's socket transport reads
        mapped = libc.mallinfo2().hblks - before
        assert got == b"data: {}\n\n"
        return mapped

print(mapped_by_a_read(), flush=True)  # before any import of workbench's
from workbench.capture import CaptureProxy
from workbench.heap import READ_BYTES as OURS
assert OURS == READ_BYTES

async def main():
    async with CaptureProxy("http://127.0.0.1:9", sys.argv[1], tokenizer="word"):
        print(mapped_by_a_read(), flush=True)

asyncio.run(main())
"""


def _has_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc 2.33+
    except (OSError, AttributeError, TypeError):
        return False
    return True


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
                    reason="glibc 2.33+ only (mallinfo2)")
def test_a_started_proxy_reads_into_the_heap(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):  # glibc's own defaults
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, started = done.stdout.split()
    assert before == "1"  # a fresh interpreter maps each read
    assert started == "0"
