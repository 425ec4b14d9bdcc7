"""Block sequence hashes: chained, stable, one per (partial) block."""

import hashlib
import math
import os
import subprocess
import sys

import pytest

from workbench.context.hashing import block_hashes, fnv1a_32


def test_fnv1a_32_known_values():
    # published FNV-1a 32-bit test vectors
    assert fnv1a_32("") == 0x811C9DC5
    assert fnv1a_32("a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968
    # continued from a state: the hash of the concatenation (stream ids' cached heads)
    assert fnv1a_32("bar", fnv1a_32("foo")) == fnv1a_32(b"foobar")
    assert fnv1a_32("", fnv1a_32("a")) == fnv1a_32("a")


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 32, 100])
def test_length_is_ceil(n):
    assert len(block_hashes(list(range(n)), 16)) == math.ceil(n / 16)


def test_equal_leading_blocks_equal_leading_hashes():
    a = list(range(1000, 1064))
    b = a[:32] + [7] * 32
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert ha[:2] == hb[:2]
    assert ha[2] != hb[2] and ha[3] != hb[3]


def test_changed_token_changes_its_block_and_every_later_one():
    base = list(range(2000, 2100))
    h0 = block_hashes(base, 16)
    changed = list(base)
    changed[40] += 1  # block 2
    h1 = block_hashes(changed, 16)
    assert h1[:2] == h0[:2]
    assert all(x != y for x, y in zip(h0[2:], h1[2:], strict=True))


def test_chain_depends_on_prefix_not_only_on_block():
    # the same block after different prefixes hashes differently
    assert block_hashes([1, 2, 9, 9], 2)[1] != block_hashes([3, 4, 9, 9], 2)[1]


def test_partial_block_chained_to_previous():
    full = block_hashes([5] * 16, 16)
    with_tail = block_hashes([5] * 16 + [6, 7], 16)
    assert with_tail[0] == full[0]
    expected_tail = hashlib.blake2b(
        full[0].to_bytes(8, "little") + b"\x06\x00\x00\x00\x07\x00\x00\x00", digest_size=8
    ).digest()
    assert with_tail[1] == int.from_bytes(expected_tail, "little")


def test_stable_known_value():
    assert block_hashes([1, 2, 3, 4, 5], 2) == [
        18389742664249816232,
        11220972698411055348,
        16979051266233250281,
    ]


def test_stable_across_processes():
    code = "from workbench.context.hashing import block_hashes; print(block_hashes(range(50), 8))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2)
    }
    assert len(outs) == 1
    assert outs.pop().strip() == str(block_hashes(list(range(50)), 8))


def test_numpy_input_and_bad_input():
    import numpy as np

    assert block_hashes(np.arange(10), 4) == block_hashes(list(range(10)), 4)
    with pytest.raises(ValueError):
        block_hashes([1, 2], 0)
    with pytest.raises(ValueError):
        block_hashes([-1], 4)
