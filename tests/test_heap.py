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

