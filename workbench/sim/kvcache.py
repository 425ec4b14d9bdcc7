"""KV block manager with prefix caching (pure: no clock, no asyncio).

vLLM's scheme: the cache is ``num_blocks`` blocks of ``block_size`` tokens. A
full block is identified by a chained hash of its tokens and its parent's hash,
so one key stands for the whole prefix up to and including that block; only
full blocks are cacheable. Blocks are reference counted; a cached block whose
count drops to 0 stays findable in an LRU list until a new allocation evicts it
(least recently freed first; a request frees its blocks tail first, so a
prefix's tail goes before its head).

Cost: a whole-trace replay moves tens of millions of blocks, and per block the
time is mostly memory latency (a ref count, a hash object, a dict slot, an LRU
node), not bytecode, so plain loops are used and only the block hashing cuts and
hashes the block tuples in C (bench/README.md, "Design notes moved from docstrings").
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence

ROOT_HASH = 0x51F15EED


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    start: int = 0,
    parent: int = ROOT_HASH,
    stop: int | None = None,
) -> list[int]:
    """Chained hashes of the full blocks from block index ``start`` on.

    ``parent`` is the hash of block ``start - 1`` (``ROOT_HASH`` for block 0);
    only the first ``stop`` tokens count (all by default). Block ``i`` is
    ``hash((hash_{i-1}, hash(tuple(block_i))))``: the block tuples are cut and
    hashed in C (``zip`` over one iterator), only the chaining is a Python
    loop. Python's hash of a tuple of ints is not salted, so keys are stable
    across processes and runs.
    """
    end = len(token_ids) if stop is None else min(stop, len(token_ids))
    end -= end % block_size
    lo = start * block_size
    if end <= lo:
        return []
    it = iter(token_ids[lo:end])
    out: list[int] = []
    append = out.append
    h = parent
    for c in map(hash, zip(*[it] * block_size, strict=False)):  # one iterator: blocks
        h = hash((h, c))
        append(h)
    return out


def reported_cached_tokens(shared_prefix: int, prompt_tokens: int, block_size: int) -> int:
    """vLLM's ``cached_tokens``: min(shared prefix, prompt − 1) in whole blocks."""
    usable = max(0, min(shared_prefix, prompt_tokens - 1))
    return usable // block_size * block_size


class BlockManager:
    """Reference-counted blocks, a hash index and an LRU of evictable blocks."""

    def __init__(self, block_size: int, num_blocks: int, enable_caching: bool = True) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._by_hash: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._free = list(range(num_blocks - 1, -1, -1))
        self.num_active = 0
        self.evictions = 0
        self.epoch = 0  # bumped by reset(): every remembered hit is void
        self.evicted_log: list[int] = []  # hashes evicted since the scheduler last looked

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: never-used plus evictable cached ones."""
        return len(self._free) + len(self._lru)

    @property
    def usage(self) -> float:
        """Share of blocks held by requests (cached-but-free blocks do not count)."""
        return self.num_active / self.num_blocks

    def longest_hit(
        self, hashes: Sequence[int], max_blocks: int, known: list[int] | None = None
    ) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (at most ``max_blocks``).

        ``known`` is a still-valid earlier hit for the same hashes: only the
        blocks after it are looked up (the blocked head of the waiting queue is
        retried every step; rescanning a 10k-token prompt each time dominated).
        """
        if not self.enable_caching:
            return []
        hit: list[int] = list(known) if known else []
        get = self._by_hash.get
        for i in range(len(hit), min(max_blocks, len(hashes))):
            bid = get(hashes[i])
            if bid is None:
                break
            hit.append(bid)
        return hit

    def can_allocate(self, new_blocks: int, hit: Sequence[int]) -> bool:
        """Room for ``new_blocks`` after taking ``hit`` (evictable hits leave the pool)."""
        free = self.num_free
        if new_blocks > free:
            return False
        if new_blocks <= free - len(hit):
            return True
        reclaimed = operator.countOf(map(self._ref.__getitem__, hit), 0)
        return new_blocks <= free - reclaimed

    def acquire(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks (a prefix hit)."""
        ref, lru = self._ref, self._lru
        for bid in blocks:
            if ref[bid] == 0:
                del lru[bid]
                self.num_active += 1
            ref[bid] += 1

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (evicting LRU cached blocks as needed), or None if no room."""
        free = self._free
        if n > len(free) + len(self._lru):
            return None
        take = min(n, len(free))
        out = free[len(free) - take :]
        del free[len(free) - take :]
        if take < n:
            out.extend(self._evict(n - take))
        ref = self._ref
        for bid in out:
            ref[bid] = 1
        self.num_active += n
        return out

    def _evict(self, n: int) -> list[int]:
        """Take the ``n`` least recently freed cached blocks, forgetting their hashes."""
        lru, hashes, by_hash = self._lru, self._hash, self._by_hash
        out: list[int] = []
        for _ in range(n):
            bid = lru.popitem(last=False)[0]
            h = hashes[bid]
            del by_hash[h]  # type: ignore[arg-type]
            self.evicted_log.append(h)  # type: ignore[arg-type]
            hashes[bid] = None
            out.append(bid)
        self.evictions += n
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference per block, tail first; unreferenced cached blocks stay findable."""
        ref, hashes, lru, free = self._ref, self._hash, self._lru, self._free
        freed = 0
        for bid in reversed(blocks):
            r = ref[bid] - 1
            ref[bid] = r
            if not r:
                freed += 1
                if hashes[bid] is None:
                    free.append(bid)
                else:
                    lru[bid] = None
        self.num_active -= freed

    def commit(self, blocks: Sequence[int], hashes: Sequence[int], lo: int, hi: int) -> None:
        """Make just-filled blocks ``lo..hi-1`` findable; a duplicate of a cached block
        stays private (freed, not cached, when released)."""
        if not self.enable_caching:
            return
        own, by_hash = self._hash, self._by_hash
        for i in range(lo, hi):
            bid, h = blocks[i], hashes[i]
            if own[bid] is None and h not in by_hash:
                own[bid] = h
                by_hash[h] = bid

    def cached_blocks(self) -> int:
        return len(self._by_hash)

    def lru_order(self) -> list[int]:
        """Evictable block ids, next victim first (for tests and debugging)."""
        return list(self._lru)

    def reset(self) -> bool:
        """Forget every cached block; refused (False) while any block is in use, as vLLM does."""
        if self.num_active:
            return False
        for bid in self._lru:
            self._hash[bid] = None
            self._free.append(bid)
        self._lru.clear()
        self._by_hash.clear()
        self.epoch += 1
        return True
