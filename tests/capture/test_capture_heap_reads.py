"""A started capture proxy takes a socket read's buffer from glibc's heap: below the
threshold each read of a streamed answer mapped 256 KiB, shrank and unmapped it (three
system calls and page faults a piece: docs/capture.md, "The relay"). Checked in a fresh
interpreter, by glibc's own count of mapped blocks (``mallinfo2``) while a read's bytes are
held: mapped before anything of workbench's is imported, not once the proxy started.
(Imports may raise the threshold themselves, e.g. compiling a changed module frees large
blocks: so the fix is only proven where they do not, as with compiled modules cached.)"""

from __future__ import annotations

from pathlib import Path

import mapped_reads
from mapped_reads import needs_mallinfo2

TAIL = r"""
import asyncio
from workbench.capture import CaptureProxy
from workbench.heap import READ_BYTES as OURS
assert OURS == READ_BYTES

async def main():
    async with CaptureProxy("http://127.0.0.1:9", sys.argv[1], tokenizer="word"):
        print(mapped_by_a_read(), flush=True)

asyncio.run(main())
"""


@needs_mallinfo2
def test_a_started_proxy_reads_into_the_heap(tmp_path: Path) -> None:
    before, started = mapped_reads.run(TAIL, str(tmp_path), cwd=tmp_path)
    assert before == "1"  # a fresh interpreter maps each read
    assert started == "0"
