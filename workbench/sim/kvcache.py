"""KV block manager with prefix caching (pure: no clock, no asyncio).

vLLM's scheme: the cache is ``num_blocks`` blocks of ``block_size`` tokens. A
full block is identified by a chained hash of its tokens and its parent's hash,
so one key stands for the whole prefix up to and including that block; only
full blocks are cacheable. Blocks are reference counted; a cached block whose
count drops to 0 stays findable in an LRU list until a new allocation evicts it
(least recently freed first; a request frees its blocks tail first, so a
prefix's tail goes before its head).

Cost: a whole-trace replay moves tens of millions of blocks, and per block the
time is mostly memory latency, not bytecode, so the manager keeps per-block state
in numpy arrays and moves a request's blocks, and looks up and commits their
hashes, one compiled call at a time (``kvcache.c``, ``kvindex``; the class
docstring; docs/embedded-engine.md, "KV manager representation"); the block
hashing cuts and hashes the block tuples in C.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from workbench.sim import kvindex
from workbench.sim.kvindex import NO_HASH

if TYPE_CHECKING:
    from workbench.sim.hosttier import HostTier

ROOT_HASH = 0x51F15EED
_LOG_FACTOR, _LOG_SLACK = 3, 1024  # LRU log capacity: compaction is amortised O(1) per entry
_INDEX_FACTOR, _INDEX_MIN = 2, 1 << 15  # hash-index entries (stale ones too) before a rebuild


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


class BlockManager:
    """Reference-counted blocks, a hash index and an LRU of evictable blocks.

    Representation (docs/embedded-engine.md, "KV manager representation"):
    per-block state lives in numpy arrays — the reference count, the hash the
    block holds (``NO_HASH`` for none) and the position of its live entry in the
    LRU log — so a request's blocks are acquired, released and evicted by one
    call over the arrays (compiled, ``workbench/sim/kvcache.c``; vectorised numpy
    where the extension is not built) rather than one Python step and one
    ``OrderedDict`` node per block.

    * The LRU is an append-only log of block ids with lazy deletion: a block that
      turns evictable is appended at the tail with its position remembered; a hit
      that takes it back only forgets the position (the log entry turns stale);
      eviction scans the log from the head in chunks, skipping stale entries; the
      log is compacted when it runs full (amortised O(1) per entry).
    * The hash → block index (``kvindex``: a table probed in C, or a dict where the
      extension is not built) is authoritative only where the block still holds
      that hash (``_hash[block] == h``): eviction clears the block's hash and
      leaves the index entry stale instead of deleting it; lookups and commits
      check the entry against ``_hash``, and the index is rebuilt from the arrays
      past ``_INDEX_FACTOR`` entries a block (docs/embedded-engine.md).
    """

    def __init__(self, block_size: int, num_blocks: int, enable_caching: bool = True,
                 compiled: bool = kvindex.COMPILED) -> None:  # fmt: skip
        """``compiled``: the index and the block moves in C (``workbench/sim/kvcache.c``;
        the default when the extension is built), else the dict and numpy (the same
        answers, slower)."""
        if compiled and not kvindex.COMPILED:
            raise RuntimeError(
                "BlockManager(compiled=True): the C module workbench.sim._kvcache is not "
                "built (setup.py builds it at install, with a C compiler); compiled=False "
                "runs the same loops in numpy")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref = np.zeros(num_blocks, dtype=np.int64)
        self._hash = np.full(num_blocks, NO_HASH, dtype=np.int64)
        # hash → block, stale entries too (the class doc)
        limit = max(_INDEX_FACTOR * num_blocks, _INDEX_MIN)
        self._index = kvindex.new_index(limit, num_blocks, compiled)
        # the block moves in C (kvcache.c); the numpy ones below serve without it
        self._c = kvindex.native if compiled else None
        self._ncached = 0  # blocks holding a hash
        # uncached free blocks: a stack, the next ones taken from the top
        self._free = np.arange(num_blocks - 1, -1, -1, dtype=np.int64)
        self._nfree = num_blocks
        # LRU log: entries [head, tail) of _log; entry p is live iff _pos[_log[p]] == p
        self._log = np.empty(_LOG_FACTOR * num_blocks + _LOG_SLACK, dtype=np.int64)
        self._pos = np.full(num_blocks, -1, dtype=np.int64)
        # what the C calls take: memoryviews of the arrays, made once (a numpy array
        # exports its buffer in ~150 ns a call, a memoryview in a fraction: five of them
        # a block move, two an index probe; docs/embedded-engine.md)
        self._moves: tuple[memoryview, ...] = ()
        self._own: Any = self._hash  # the index's view of ``_hash`` (kvindex.Own)
        if self._c is not None:
            self._moves = tuple(a.data for a in (self._ref, self._hash, self._free,
                                                 self._log, self._pos))
            self._own = self._moves[1]
        self._head = self._tail = 0
        self._nlru = 0
        self.num_active = 0
        self.evictions = 0
        self.epoch = 0  # bumped by reset(): every remembered hit is void
        self.host: HostTier | None = None  # evicted blocks' hashes go there (sim.hosttier)

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: never-used plus evictable cached ones."""
        return self._nfree + self._nlru

    def block_state(self) -> tuple[Any, ...]:
        """What an allocation reads and writes: the reference counts, the hashes held, the
        free stack, the LRU log and positions (int64 arrays, in ``take``'s order), then
        the fresh count and the log's head and tail, for a caller that allocates as
        ``take`` would (``Decoders.run``) and reports it with ``took``."""
        arrays = self._moves or (self._ref, self._hash, self._free, self._log, self._pos)
        return (*arrays, self._nfree, self._head, self._tail)

    def took(self, nfree: int, head: int, evicted: int) -> None:
        """The caller of ``block_state`` took blocks down to ``nfree`` fresh ones and
        evicted ``evicted`` from the LRU log, whose head is now ``head`` (no host tier:
        it offloads no hash)."""
        self.num_active += self._nfree - nfree + evicted
        self._nfree, self._head = nfree, head
        if evicted:
            self._evicted(evicted, None)

    @property
    def usage(self) -> float:
        """Share of blocks held by requests (cached-but-free blocks do not count)."""
        return self.num_active / self.num_blocks

    @overload
    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[int]: ...

    @overload
    def longest_hit(self, hashes: Sequence[int], max_blocks: int,
                    known: list[int] | array[int]) -> list[int] | array[int]: ...

    def longest_hit(
        self, hashes: Sequence[int], max_blocks: int, known: list[int] | array[int] | None = None
    ) -> list[int] | array[int]:
        """Block ids of the longest cached prefix of ``hashes`` (at most ``max_blocks``).

        ``known`` is a still-valid earlier hit for the same hashes: only the
        blocks after it are looked up (the blocked head of the waiting queue is
        retried every step; rescanning a 10k-token prompt each time dominated),
        and when none is found ``known`` itself is returned (not a copy: the
        caller must not change it; a list or an int64 array, as given; a longer hit is a
        list). The lookups run compiled (``kvindex.prefix``).
        """
        if not self.enable_caching:
            return []
        i, end = len(known) if known else 0, min(max_blocks, len(hashes))
        if i >= end:
            return list(known) if known else []
        x = self._index
        # the next block alone first: a retried blocked head misses here
        if x.get(self._own, hashes[i]) < 0:
            return known if known else []  # ``known`` itself: no copy of a long hit
        hit = x.prefix(self._own, hashes, i, end)
        return list(known) + hit if known else hit

    def holds(self, block_hash: int) -> bool:
        """Whether a cached block holds ``block_hash`` (findable by ``longest_hit``)."""
        if not self.enable_caching:
            return False
        return self._index.get(self._own, block_hash) >= 0

    def shard(self) -> tuple[Any, ...] | None:
        """The compiled index's table, ``_hash`` and shift, for a router (``kvindex``)."""
        x, on = self._index, self.enable_caching
        return x.shard(self._own) if on and isinstance(x, kvindex.CompiledIndex) else None

    def held_prefix(self, blocks: Sequence[int] | np.ndarray,
                    hashes: Sequence[int] | np.ndarray) -> int:
        """How many leading ``blocks`` still hold the matching ``hashes`` (``hashes`` at
        least as long): that part of an earlier hit is what ``longest_hit`` would find
        again. Lists or int64 arrays; compiled, it stops at the first block that lost its
        hash (a list is read only that far; an array, read without converting, is the
        cheaper one to check again and again)."""
        if self._c is not None:
            held: int = self._c.held(self._own, blocks, hashes)
            return held
        b = np.asarray(blocks, dtype=np.int64)
        lost = np.flatnonzero(self._hash[b] != np.asarray(hashes[: len(b)], dtype=np.int64))
        return int(lost[0]) if len(lost) else len(b)

    def can_allocate(self, new_blocks: int, hit: Sequence[int]) -> bool:
        """Room for ``new_blocks`` after taking ``hit`` (evictable hits leave the pool)."""
        free = self.num_free
        if new_blocks > free:
            return False
        if new_blocks <= free - len(hit):
            return True
        if self._c is not None:
            reclaimed: int = self._c.idle(self._moves[0], hit)
        else:
            reclaimed = int(np.count_nonzero(self._ref[np.asarray(hit, dtype=np.int64)] == 0))
        return new_blocks <= free - reclaimed

    def acquire(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks (a prefix hit; distinct block ids)."""
        if not len(blocks):
            return
        if self._c is not None:
            idle = self._c.acquire(*self._moves, blocks)
        else:
            b = np.asarray(blocks, dtype=np.int64)
            r = self._ref[b]
            was_idle = r == 0
            idle = int(np.count_nonzero(was_idle))
            self._pos[b[was_idle]] = -1  # they leave the LRU: their log entries turn stale
            self._ref[b] = r + 1
        self._nlru -= idle
        self.num_active += idle

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (evicting LRU cached blocks as needed), or None if no room."""
        got = self.take(n)
        return None if got is None else got.tolist()

    def take(self, n: int) -> array[int] | None:
        """``allocate`` as an int64 array (the scheduler's block lists: compiled, no Python
        int is made per block)."""
        if n > self._nfree + self._nlru:
            return None
        self.num_active += n
        got: array[int] = array("q")
        if self._c is not None:
            raw, self._nfree, self._head, evicted, hashes = self._c.allocate(
                *self._moves, n, self._nfree, self._head, self._tail, NO_HASH,
                self.host is not None)
            if evicted:
                self._evicted(evicted, hashes)
            got.frombytes(raw)
            return got
        take = min(n, self._nfree)
        lo = self._nfree - take
        out = self._free[lo : self._nfree]
        self._nfree = lo
        if take < n:
            out = np.concatenate((out, self._evict(n - take)))
        self._ref[out] = 1
        got.frombytes(out.astype(np.int64).tobytes())
        return got

    def _evicted(self, n: int, hashes: list[int] | None) -> None:
        """Count ``n`` evicted blocks; their ``hashes`` go to the host tier (offloaded,
        least recently freed first)."""
        if self.host is not None and hashes is not None:
            self.host.put(hashes)
        self._ncached -= n
        self._nlru -= n
        self.evictions += n

    def _evict(self, n: int) -> np.ndarray:
        """Take the ``n`` least recently freed cached blocks, forgetting their hashes."""
        log, pos = self._log, self._pos
        parts: list[np.ndarray] = []
        need, head, tail = n, self._head, self._tail
        while need:  # bounded: each pass moves the head, and the log holds >= need live
            end = min(tail, head + max(2 * need, 64))
            if end == head:  # pragma: no cover - invariant: allocate checked num_free
                raise RuntimeError(f"LRU log exhausted with {need} of {n} blocks to evict")
            chunk = log[head:end]
            live = np.flatnonzero(pos[chunk] == np.arange(head, end))
            if len(live) >= need:
                live = live[:need]
                end = head + int(live[-1]) + 1
            parts.append(chunk[live])
            need -= len(live)
            head = end
        self._head = head
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        pos[out] = -1
        self._evicted(n, self._hash[out].tolist() if self.host is not None else None)
        self._hash[out] = NO_HASH  # their index entries turn stale
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference per block (distinct ids), tail first; unreferenced cached
        blocks stay findable (appended to the LRU, the tail block first)."""
        if not len(blocks):
            return
        if self._c is not None:
            self._nfree, self._head, self._tail, freed, cached = self._c.release(
                *self._moves, blocks, self._nfree, self._head, self._tail, NO_HASH)
            self.num_active -= freed
            self._nlru += cached
            return
        b = np.asarray(blocks, dtype=np.int64)[::-1]
        r = self._ref[b] - 1
        self._ref[b] = r
        zero = b[r == 0]
        if not len(zero):
            return
        self.num_active -= len(zero)
        cached_ = self._hash[zero] != NO_HASH
        lru = zero[cached_]
        if len(lru) < len(zero):
            plain = zero[~cached_]
            k = len(plain)
            self._free[self._nfree : self._nfree + k] = plain
            self._nfree += k
        if len(lru):
            k = len(lru)
            if self._tail + k > len(self._log):
                self._compact()
            t = self._tail
            self._log[t : t + k] = lru
            self._pos[lru] = np.arange(t, t + k)
            self._tail = t + k
            self._nlru += k

    def _compact(self) -> None:
        """Move the live LRU entries to the front of the log, in order."""
        live = self._live()
        m = len(live)
        self._log[:m] = live
        self._pos[live] = np.arange(m)
        self._head, self._tail = 0, m

    def _live(self) -> np.ndarray:
        h, t = self._head, self._tail
        chunk = self._log[h:t]
        live: np.ndarray = chunk[self._pos[chunk] == np.arange(h, t)]
        return live

    def commit(self, blocks: Sequence[int], hashes: Sequence[int], lo: int, hi: int) -> None:
        """Make just-filled blocks ``lo..hi-1`` findable; a duplicate of a cached block
        stays private (freed, not cached, when released)."""
        if not self.enable_caching or hi <= lo:
            return
        self._ncached += self._index.commit(self._own, blocks[lo:hi], hashes[lo:hi])

    def commit_take(self, blocks: bytearray, hashes: bytearray, n: int) -> array[int] | None:
        """``commit`` of every filled block in ``blocks``/``hashes`` (int64s, in order, as
        ``Decoders.fill`` writes them), then ``take(n)``: a span's evicting allocation,
        after the fills before it (``Scheduler.advance``), in one call."""
        if blocks and self.enable_caching:
            b, h = memoryview(blocks).cast("q"), memoryview(hashes).cast("q")
            self._ncached += self._index.commit(self._own, b, h)
        return self.take(n)

    def cached_blocks(self) -> int:
        return self._ncached

    def index(self) -> dict[int, int]:
        """hash → block of every cached block (for tests and debugging)."""
        held = np.flatnonzero(self._hash != NO_HASH)
        return dict(zip(self._hash[held].tolist(), held.tolist(), strict=True))

    def lru_order(self) -> list[int]:
        """Evictable block ids, next victim first (for tests and debugging)."""
        order: list[int] = self._live().tolist()
        return order

    def reset(self) -> bool:
        """Forget every cached block; refused (False) while any block is in use, as vLLM does."""
        if self.num_active:
            return False
        live = self._live()
        k = len(live)
        self._hash[live] = NO_HASH
        self._pos[live] = -1
        self._free[self._nfree : self._nfree + k] = live
        self._nfree += k
        self._head = self._tail = self._nlru = self._ncached = 0
        self._index.clear()
        if self.host is not None:
            self.host.clear()
        self.epoch += 1
        return True
