"""The array-based KV block manager against a plain reference model of vLLM's LRU.

The reference keeps one ``OrderedDict`` node per evictable block (the obvious
reading of docs/embedded-engine.md: least recently freed first, a request frees
its blocks tail first, a duplicate of a cached block stays private, reset
refused while blocks are in use). Random mixed sequences of allocate / commit /
acquire / release / reset must leave both in the same state after every step:
the same LRU order, the same hash index, free counts, evictions and evicted
hashes. Block ids are compared through a bijection (which physical block an
allocation hands out is not part of the semantics, only which are free).
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.sim.kvcache import BlockManager


class ReferenceLRU:
    """vLLM's prefix-cache block pool, one Python step per block."""

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.by_hash: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.free = list(range(num_blocks - 1, -1, -1))
        self.active = 0
        self.evicted: list[int] = []

    def num_free(self) -> int:
        return len(self.free) + len(self.lru)

    def allocate(self, n: int) -> list[int] | None:
        if n > self.num_free():
            return None
        out = []
        for _ in range(n):
            if self.free:
                out.append(self.free.pop())
            else:
                bid, _ = self.lru.popitem(last=False)
                h = self.hash[bid]
                assert h is not None
                del self.by_hash[h]
                self.evicted.append(h)
                self.hash[bid] = None
                out.append(bid)
        for bid in out:
            self.ref[bid] = 1
        self.active += n
        return out

    def commit(self, blocks: list[int], hashes: list[int]) -> None:
        for bid, h in zip(blocks, hashes, strict=True):
            if self.hash[bid] is None and h not in self.by_hash:
                self.hash[bid] = h
                self.by_hash[h] = bid

    def hit(self, hashes: list[int], max_blocks: int) -> list[int]:
        out = []
        for h in hashes[:max_blocks]:
            if h not in self.by_hash:
                break
            out.append(self.by_hash[h])
        return out

    def acquire(self, blocks: list[int]) -> None:
        for bid in blocks:
            if self.ref[bid] == 0:
                del self.lru[bid]
                self.active += 1
            self.ref[bid] += 1

    def release(self, blocks: list[int]) -> None:
        for bid in reversed(blocks):
            self.ref[bid] -= 1
            if self.ref[bid] == 0:
                self.active -= 1
                if self.hash[bid] is None:
                    self.free.append(bid)
                else:
                    self.lru[bid] = None

    def reset(self) -> bool:
        if self.active:
            return False
        for bid in self.lru:
            self.hash[bid] = None
            self.free.append(bid)
        self.lru.clear()
        self.by_hash.clear()
        return True


# an operation: (kind, request slot, size, content family)
_op = st.tuples(
    st.sampled_from(["admit", "admit", "admit", "release", "release", "reset", "dup"]),
    st.integers(0, 5),
    st.integers(1, 9),
    st.integers(0, 3),
)


def _hashes(family: int, n: int) -> list[int]:
    """Chained-prefix-like keys: family f's first k blocks are a prefix of its k+1."""
    return [hash((family, i)) for i in range(n)]


class _Pair:
    """The manager and the reference driven alike, block ids mapped between them."""

    def __init__(self, num_blocks: int, compiled: bool = True) -> None:
        # the C moves and index, or numpy and the dict; the index rebuilt often (stale
        # entries)
        self.bm = BlockManager(16, num_blocks, compiled=compiled)
        self.bm._index.limit = 2 * num_blocks
        self.ref = ReferenceLRU(num_blocks)
        self.to_ref: dict[int, int] = {}
        self.held: dict[int, tuple[list[int], list[int]]] = {}  # slot -> (bm ids, ref ids)

    def map_blocks(self, got: list[int], want: list[int]) -> None:
        """Fresh blocks on both sides correspond from now on."""
        self.to_ref.update(zip(got, want, strict=True))

    def admit(self, slot: int, size: int, family: int) -> None:
        if slot in self.held:
            return
        hashes = _hashes(family, size)
        hit_bm = self.bm.longest_hit(hashes, size - 1)
        hit_ref = self.ref.hit(hashes, size - 1)
        assert [self.to_ref[b] for b in hit_bm] == hit_ref
        need = size - len(hit_bm)
        fits = self.bm.can_allocate(need, hit_bm)
        reclaimed = sum(1 for b in hit_ref if self.ref.ref[b] == 0)
        assert fits == (need <= self.ref.num_free() - reclaimed)
        if not fits:
            return
        self.bm.acquire(hit_bm)
        self.ref.acquire(hit_ref)
        new_bm, new_ref = self.bm.allocate(need), self.ref.allocate(need)
        assert new_bm is not None and new_ref is not None
        self.map_blocks(new_bm, new_ref)
        self.bm.commit(hit_bm + new_bm, hashes, len(hit_bm), size)
        self.ref.commit(new_ref, hashes[len(hit_ref) :])
        self.held[slot] = (hit_bm + new_bm, hit_ref + new_ref)

    def dup(self, slot: int, size: int, family: int) -> None:
        """Fresh blocks for content that may already be cached (computed concurrently)."""
        if slot in self.held:
            return
        hashes = _hashes(family, size)
        new_bm, new_ref = self.bm.allocate(size), self.ref.allocate(size)
        assert (new_bm is None) == (new_ref is None)
        if new_bm is None or new_ref is None:
            return
        self.map_blocks(new_bm, new_ref)
        self.bm.commit(new_bm, hashes, 0, size)
        self.ref.commit(new_ref, hashes)
        self.held[slot] = (new_bm, new_ref)

    def release(self, slot: int) -> None:
        if slot in self.held:
            a, b = self.held.pop(slot)
            self.bm.release(a)
            self.ref.release(b)

    def check(self) -> None:
        bm, ref = self.bm, self.ref
        in_use = [b for blocks, _ in self.held.values() for b in blocks] + bm.lru_order()
        assert len({self.to_ref[b] for b in set(in_use)}) == len(set(in_use))  # a bijection
        assert [self.to_ref[b] for b in bm.lru_order()] == list(ref.lru)
        assert bm.num_free == ref.num_free() and bm.num_active == ref.active
        assert bm.cached_blocks() == len(ref.by_hash)
        assert {h: self.to_ref[b] for h, b in bm.index().items()} == ref.by_hash
        assert bm.evictions == len(ref.evicted)
        for h, b in ref.by_hash.items():  # the index answers for every cached hash...
            assert [self.to_ref[x] for x in bm.longest_hit([h], 1)] == [b]
        for h in ref.evicted[-8:]:  # ...and for none evicted since
            assert bm.longest_hit([h], 1) == [] or h in ref.by_hash


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "dict"])
@settings(max_examples=300, deadline=None)
@given(st.integers(4, 40), st.lists(_op, max_size=60))
def test_block_manager_matches_reference_lru(compiled, num_blocks, ops):
    pair = _Pair(num_blocks, compiled)
    for kind, slot, size, family in ops:
        size = min(size, num_blocks)
        if kind == "admit":
            pair.admit(slot, size, family)
        elif kind == "dup":
            pair.dup(slot, size, family)
        elif kind == "release":
            pair.release(slot)
        else:
            assert pair.bm.reset() == pair.ref.reset()
        pair.check()
    for slot in list(pair.held):
        pair.release(slot)
        pair.check()
    assert pair.bm.reset() and pair.ref.reset()
    pair.check()
    assert pair.bm.num_free == num_blocks


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "dict"])
def test_lru_log_compacts_and_keeps_order(compiled):
    """Many release/hit cycles on a tiny cache run the log past its capacity."""
    pair = _Pair(4, compiled)
    for i in range(5000):
        pair.admit(0, 3, i % 2)
        pair.release(0)
        pair.admit(1, 2, 2 + i % 2)
        pair.release(1)
        pair.check()
    assert pair.bm.evictions > 1000


@pytest.mark.parametrize("bad", [
    lambda bm: bm.release([0, 99]),  # no such block
    lambda bm: bm.acquire([1, -3]),
    lambda bm: bm.release([0, "x"]),
])
def test_compiled_moves_refuse_bad_blocks_and_change_nothing(bad):
    bm = BlockManager(16, 8, compiled=True)
    got = bm.allocate(3)
    assert got is not None
    bm.commit(got, [11, 12, 13], 0, 3)
    before = (bm._ref.copy(), bm._hash.copy(), bm._pos.copy(), bm._free.copy(), bm.num_free)
    with pytest.raises((IndexError, TypeError)):
        bad(bm)
    after = (bm._ref, bm._hash, bm._pos, bm._free, bm.num_free)
    assert all((x == y).all() for x, y in zip(before[:4], after[:4], strict=True))
    assert before[4] == after[4]


def test_compiled_without_the_module_says_so(monkeypatch):
    from workbench.sim import kvindex

    monkeypatch.setattr(kvindex, "COMPILED", False)
    with pytest.raises(RuntimeError, match=r"workbench\.sim\._kvcache is not built"):
        BlockManager(16, 8, compiled=True)
    assert BlockManager(16, 8, compiled=False).allocate(2) is not None
