"""The KV manager's hash → block index: compiled when it can be, a dict when it cannot.

A whole-trace replay commits and looks up millions of block hashes (~9 M for the
Mooncake conversation trace). As a Python dict each one costs a boxed int, a
dict probe and a bytecode round trip, ~300 ns; the compiled table
(``workbench/sim/kvcache.c``, built into ``workbench.sim._kvcache`` when the
package is installed with a C compiler at hand) is an int64 array of (key, block) pairs probed
linearly, each step's commit and each prefix lookup one C call
(docs/embedded-engine.md, "KV manager representation"). Both classes here give
the same answers for the same calls (tests/sim/test_sim_kvcache_model.py drives
both against a reference LRU); ``new_index`` builds the compiled one when the
extension is there, and ``COMPILED`` says which.

An entry is authoritative only while its block still holds the key
(``own[block] == key``, ``own`` being the manager's per-block hash array, which
eviction clears): stale entries are left in place and the index is rebuilt from
``own`` once it holds ``limit`` entries, stale ones too, so a lookup or commit
checks the entry against ``own``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.kernels import compiled_wanted

native: Any = None  # the C module (no stubs), or None
if compiled_wanted():
    try:  # the one import of the C module: kvcache.py takes its block moves from here
        from workbench.sim import _kvcache as native  # type: ignore[attr-defined,no-redef]
    except ImportError:  # built without a C compiler: the dict below serves
        native = None

NO_HASH = -1  # ``own`` of a block holding no hash: Python's hash() never returns -1

#: the manager's per-block hash array, or (compiled) a memoryview of it made once
Own = np.ndarray | memoryview


class DictIndex:
    """The index as a dict (the reference, and the fallback without the extension)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # entries (stale ones too) before a rebuild
        self._d: dict[int, int] = {}

    def get(self, own: np.ndarray, h: int) -> int:
        """The block holding ``h``, or -1."""
        b = self._d.get(h)
        return -1 if b is None or own[b] != h else b

    def prefix(self, own: np.ndarray, hashes: Sequence[int], start: int, end: int) -> list[int]:
        """The blocks holding ``hashes[start]``, ``hashes[start + 1]``, … up to the first
        miss before ``end``."""
        get, out = self._d.get, []
        for h in hashes[start:end]:
            b = get(h)
            if b is None or own[b] != h:
                break
            out.append(b)
        return out

    def commit(self, own: np.ndarray, blocks: Sequence[int], hashes: Sequence[int]) -> int:
        """Make ``blocks`` hold ``hashes``, in order: a block already holding a hash keeps
        it, one whose hash a block already holds stays private. Returns how many blocks
        now hold their hash."""
        if len(set(hashes)) < len(hashes):  # a hash twice: the first free block takes it
            cached = self._place(own, blocks, hashes)
        else:
            cached = self._commit_distinct(own, blocks, hashes)
        if len(self._d) > self.limit:
            self.rebuild(own)
        return cached

    def _commit_distinct(self, own: np.ndarray, blocks: Sequence[int],
                         hashes: Sequence[int]) -> int:
        """``commit`` of distinct hashes, vectorised: the order among them cannot matter."""
        b = np.asarray(blocks, dtype=np.int64)
        h = np.asarray(hashes, dtype=np.int64)
        keep = own[b] == NO_HASH
        if not keep.all():  # blocks that already hold a hash keep it
            b, h = b[keep], h[keep]
            blocks, hashes = b.tolist(), h.tolist()
        # setdefault inserts what is new and returns the entry already there otherwise
        got = np.fromiter(map(self._d.setdefault, hashes, blocks), dtype=np.int64,
                          count=len(b))
        new = got == b
        own[b[new]] = h[new]
        rest = ~new  # an entry was there: live (stays private), or stale (taken over)
        return int(np.count_nonzero(new)) + self._place(own, b[rest].tolist(),
                                                        h[rest].tolist())

    def _place(self, own: np.ndarray, blocks: Sequence[int], hashes: Sequence[int]) -> int:
        """``commit`` a block at a time, in order (what the compiled index does): a free
        block takes its hash unless a block holds it already; with a hash given twice the
        first free block takes it, however stale entries point. How many took one."""
        d, cached = self._d, 0
        for bi, hv in zip(blocks, hashes, strict=True):
            bi, hv = int(bi), int(hv)
            if own[bi] != NO_HASH:  # a block already holding a hash keeps it
                continue
            cur = d.get(hv)
            if cur is None or own[cur] != hv:  # new, or stale: this block holds it now
                d[hv] = bi
                own[bi] = hv
                cached += 1
        return cached

    def rebuild(self, own: np.ndarray) -> None:
        """Drop the stale entries: the index again maps exactly the held hashes."""
        held = np.flatnonzero(own != NO_HASH)
        self._d = dict(zip(own[held].tolist(), held.tolist(), strict=True))

    def clear(self) -> None:
        self._d.clear()


class CompiledIndex:
    """The index as an open-addressing table of int64 (key, block) pairs, probed in C
    (``workbench/sim/kvcache.c``); at most 3/4 full, rebuilt past ``limit`` entries."""

    def __init__(self, limit: int, num_blocks: int) -> None:
        self.limit = limit
        bits = max(4, (2 * max(limit, 2 * num_blocks) - 1).bit_length())
        # (key, block) pairs, every block -1: empty (an empty slot's key is never read:
        # ``find`` stops at its block), filled in one pass, not zeroed then strided over
        # (64 workers' 4 MB tables: ~1 ms a table against ~5; issue 44)
        self._table = np.full(2 << bits, -1, dtype=np.int64)
        self._tv = self._table.data  # what the C calls take (BlockManager._moves)
        self._shift = 64 - bits
        self._room = 3 << (bits - 2)  # entries the table may take
        self._entries = 0  # occupied slots, stale ones too

    def get(self, own: Own, h: int) -> int:
        got: int = native.get(self._tv, own, self._shift, h)
        return got

    def prefix(self, own: Own, hashes: Sequence[int], start: int, end: int) -> list[int]:
        got: list[int] = native.prefix(self._tv, own, self._shift, hashes,
                                         start, end)  # fmt: skip
        return got

    def commit(self, own: Own, blocks: Sequence[int], hashes: Sequence[int]) -> int:
        if self._entries + len(blocks) > self._room:  # never full: probing always ends
            self.rebuild(own)
        cached, added = native.commit(self._tv, own, self._shift, blocks,
                                        hashes, NO_HASH)  # fmt: skip
        self._entries += added
        if self._entries > self.limit:
            self.rebuild(own)
        return int(cached)

    def shard(self, own: Own) -> tuple[memoryview, Own, int]:
        """What a router's ``Shards`` holds of it: written in place, never reallocated."""
        return self._tv, own, self._shift

    def rebuild(self, own: Own) -> None:
        self._entries = native.rebuild(self._tv, own, self._shift, NO_HASH)

    def clear(self) -> None:
        self._table[1::2] = -1
        self._entries = 0


COMPILED = native is not None


def new_index(limit: int, num_blocks: int, compiled: bool | None = None
              ) -> DictIndex | CompiledIndex:  # fmt: skip
    """The compiled index (``compiled``; default: when the extension is built), else the
    dict."""
    use = COMPILED if compiled is None else compiled
    return CompiledIndex(limit, num_blocks) if use else DictIndex(limit)
