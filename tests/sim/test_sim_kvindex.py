"""The KV manager's hash index: the compiled table and the dict give the same answers.

The compiled one (``workbench/sim/kvcache.c``) is what runs; the dict is the reference and
the fallback where no C compiler built the extension. Random commits, evictions (a block's
``own`` entry cleared, its index entry left stale), rebuilds and lookups drive both, with
keys anywhere in int64 and colliding in the table's low bits.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.sim import kvindex
from workbench.sim.kvindex import NO_HASH

_INT64 = st.integers(-(1 << 63), (1 << 63) - 1).filter(lambda h: h != NO_HASH)


def test_the_extension_is_built():
    """`make setup` builds it (setup.py): a build that silently failed would fall back to
    the dict, correct but several times slower."""
    assert kvindex.COMPILED
    assert isinstance(kvindex.new_index(64, 16), kvindex.CompiledIndex)


# an operation: commit (blocks, hashes) / evict block / rebuild / look up a prefix
_ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.lists(st.tuples(st.integers(0, 23), st.integers(0, 9)),
                                          max_size=12)),
    st.tuples(st.just("evict"), st.integers(0, 23)),
    st.tuples(st.just("rebuild"), st.none()),
    st.tuples(st.just("prefix"), st.lists(st.integers(0, 11), max_size=8)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.lists(_INT64, min_size=12, max_size=12, unique=True), _ops, st.integers(2, 40))
def test_compiled_and_dict_agree(keys, ops, limit):
    n = 24
    compiled, ref = kvindex.CompiledIndex(limit, n), kvindex.DictIndex(limit)
    own_c, own_r = np.full(n, NO_HASH, dtype=np.int64), np.full(n, NO_HASH, dtype=np.int64)
    for kind, arg in ops:
        if kind == "commit":
            blocks = list(dict.fromkeys(b for b, _ in arg))  # distinct ids, as the manager
            hashes = [keys[dict(arg)[b]] for b in blocks]
            # the engine's hashes are int64 arrays (Sequence.hashes), a router's lists
            given = array("q", hashes) if len(blocks) % 2 else hashes
            assert compiled.commit(own_c, blocks, given) == ref.commit(own_r, blocks, hashes)
        elif kind == "evict":
            own_c[arg] = own_r[arg] = NO_HASH
        elif kind == "rebuild":
            compiled.rebuild(own_c)
            ref.rebuild(own_r)
        else:
            hs = [keys[k] for k in arg]
            for start in range(len(hs) + 1):
                assert compiled.prefix(own_c, hs, start, len(hs)) == \
                    compiled.prefix(own_c, array("q", hs), start, len(hs)) == \
                    ref.prefix(own_r, hs, start, len(hs))
        assert own_c.tolist() == own_r.tolist()
        for h in keys:
            assert compiled.get(own_c, h) == ref.get(own_r, h)
    held = own_c[own_c != NO_HASH]
    assert len(set(held.tolist())) == len(held)  # no hash held twice


def test_colliding_keys_probe_past_each_other():
    """Keys equal in the bits the table hashes to still find their own block."""
    n = 64
    idx, own = kvindex.CompiledIndex(4 * n, n), np.full(n, NO_HASH, dtype=np.int64)
    keys = [i << 58 for i in range(1, 32)] + [-(i << 58) for i in range(1, 17)]
    assert idx.commit(own, list(range(len(keys))), keys) == len(keys)
    assert idx.prefix(own, keys, 0, len(keys)) == list(range(len(keys)))
    own[5] = NO_HASH  # evicted: its entry is stale, the others still answer
    assert idx.prefix(own, keys, 0, len(keys)) == [0, 1, 2, 3, 4]
    assert [idx.get(own, k) for k in keys[6:9]] == [6, 7, 8]
    assert idx.commit(own, [50], [keys[5]]) == 1  # the stale entry is taken over
    assert idx.get(own, keys[5]) == 50


def test_a_full_table_is_rebuilt_before_it_fills():
    """Far more commits than slots, whatever ``limit`` says: probing always ends."""
    n = 8
    idx, own = kvindex.CompiledIndex(16, n), np.full(n, NO_HASH, dtype=np.int64)
    idx.limit = 10**9  # only the table's room triggers rebuilds now
    for i in range(10_000):
        own[i % n] = NO_HASH  # evict, then commit a new hash to the same block
        assert idx.commit(own, [i % n], [i * 7919 + 1]) == 1
    assert [idx.get(own, (i * 7919 + 1)) for i in range(10_000 - n, 10_000)] == \
        [i % n for i in range(10_000 - n, 10_000)]


@pytest.mark.parametrize("bad", [
    lambda idx, own: idx.commit(own, [0, 1], [5]),  # lengths differ
    lambda idx, own: idx.commit(own, [99], [5]),  # no such block
    lambda idx, own: idx.commit(own, [0], ["x"]),  # not an int
    lambda idx, own: idx.prefix(own, [1 << 70], 0, 1),  # not an int64
    lambda idx, own: idx.prefix(own, array("d", [1.0]), 0, 1),  # an array, not of int64
    lambda idx, own: idx.commit(own, [0], array("i", [5])),
])
def test_bad_arguments_raise_instead_of_writing_anywhere(bad):
    idx, own = kvindex.CompiledIndex(64, 16), np.full(16, NO_HASH, dtype=np.int64)
    with pytest.raises((ValueError, IndexError, TypeError, OverflowError)):
        bad(idx, own)
    assert (own == NO_HASH).all()


def test_a_hash_given_twice_goes_to_the_first_free_block_in_both_indexes():
    """Block 1 held ``h``, was evicted (its entry stale), then blocks 0 and 1 are committed
    with ``h`` both: in order, block 0 takes it and block 1 stays private, in the compiled
    index and its twin alike (the twin once let block 1 win through its own stale entry)."""
    h, n = 7 << 40, 4
    for idx in (kvindex.CompiledIndex(16, n), kvindex.DictIndex(16)):
        own = np.full(n, NO_HASH, dtype=np.int64)
        assert idx.commit(own, [1], [h]) == 1
        own[1] = NO_HASH  # evicted
        assert idx.commit(own, [0, 1], [h, h]) == 1
        assert own.tolist() == [h, NO_HASH, NO_HASH, NO_HASH], type(idx).__name__
        assert idx.get(own, h) == 0
