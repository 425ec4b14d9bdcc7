"""heap.py: glibc's mmap threshold is fixed and the heap trimmed (no-ops without glibc)."""

import platform

import mapped_reads
import pytest
from mapped_reads import needs_mallinfo2

from workbench import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_prepare_and_trim_on_glibc():
    assert heap.prepare() is True
    blob = [bytearray(200_000) for _ in range(50)]  # mapped, then freed
    del blob
    heap.trim()  # returns free heap pages; must not raise


READ_TAIL = r"""
from workbench import heap
assert heap.READ_BYTES == READ_BYTES
assert heap.prepare()
print(mapped_by_a_read(), flush=True)
"""


@needs_mallinfo2
def test_a_fixed_threshold_keeps_a_socket_read_in_the_heap(tmp_path):
    """A run that keeps no records fixes glibc's mmap threshold (``prepare``); on plain
    asyncio (``executor.uvloop: false``) every read of the replay client asks ``recv``
    for ``READ_BYTES``: under a threshold fixed below that, each read mapped, shrank and
    unmapped its buffer (measured: 1,927 recvfrom, 1,931 mremap, ~1,900 mmap and munmap
    more than with uvloop, docs/design-notes.md, "Memory of long runs"). Checked in a
    fresh interpreter by glibc's count of mapped blocks (``mallinfo2``) while a read's
    bytes are held: mapped before, not once ``prepare`` ran."""
    before, prepared = mapped_reads.run(READ_TAIL, cwd=tmp_path)
    assert before == "1"  # a fresh interpreter maps each read
    assert prepared == "0"
