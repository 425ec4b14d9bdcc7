"""The implicit decoders' events (a fill, a grow, the last token) and their two queues,
per slot: compiled when it can be, Python when it cannot.

``PyDecoders`` below is the reference; ``workbench/sim/decoders.c`` (``workbench.sim.
_decoders``) its compiled twin, the same methods and answers. ``new_decoders`` builds the
compiled one unless it is not built or ``WORKBENCH_COMPILED=0``. The state and the calls:
docs/virtual-time.md, "The implicit decoders' events compiled".
"""

from __future__ import annotations

import heapq
from typing import Any, Protocol

from workbench.kernels import compiled_wanted

native: Any = None  # the C module, or None
if compiled_wanted():
    try:
        from workbench.sim import _decoders as native  # type: ignore[attr-defined,no-redef]
    except ImportError:  # built without a C compiler: the twin serves
        native = None

COMPILED = native is not None
NEVER = 1 << 62  # ``next_grow`` / ``next_fill`` of an empty queue


class Decoders(Protocol):
    """The interface both implementations give (``decoders.c`` documents each method)."""

    def add(self, seq: Any, blocks: Any, hashes: Any, rank: int, co: int, fin: int,
            next_full: int, committed: int, cap: int) -> int: ...  # fmt: skip
    def remove(self, slot: int) -> tuple[int, int, int]: ...
    def clear(self) -> None: ...
    def grow_due(self, tick: int) -> int: ...
    def assign(self, got: Any, at: int, k: int) -> None: ...
    def fill(self, tick: int, blocks: bytearray, hashes: bytearray) -> list[Any]: ...
    def run(self, stop: int, blocks: bytearray, hashes: bytearray, ref: Any, own: Any,
            free: Any, log: Any, pos: Any, nfree: int, head: int, tail: int, no_hash: int,
            evict: bool) -> tuple[int, int, int, int, int]: ...  # fmt: skip
    def next_grow(self) -> int: ...
    def next_fill(self) -> int: ...


def new_decoders(block_size: int) -> Decoders:
    """The compiled ``Decoders`` where built and wanted, else ``PyDecoders``."""
    if native is not None:
        compiled: Decoders = native.Decoders(block_size)
        return compiled
    return PyDecoders(block_size)


class PyDecoders:
    """The reference: slot columns as lists, the queues as heaps of
    (step, rank, slot, generation)."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self._co: list[int] = []
        self._fin: list[int] = []
        self._next_full: list[int] = []
        self._committed: list[int] = []
        self._cap: list[int] = []
        self._rank: list[int] = []
        self._genf: list[int] = []
        self._geng: list[int] = []
        self._seq: list[Any] = []  # None: a free slot
        self._blocks: list[Any] = []
        self._hashes: list[Any] = []
        self._free: list[int] = []  # a stack of free slots
        self._fills: list[tuple[int, int, int, int]] = []
        self._grows: list[tuple[int, int, int, int]] = []
        self._pending: list[int] = []

    def add(self, seq: Any, blocks: Any, hashes: Any, rank: int, co: int, fin: int,
            next_full: int, committed: int, cap: int) -> int:  # fmt: skip
        if not self._free:  # grow the columns as the compiled one does (ids in order)
            n = len(self._seq)
            m = 2 * n if n else 64
            for col in (self._co, self._fin, self._next_full, self._committed, self._cap,
                        self._rank, self._genf, self._geng):  # fmt: skip
                col.extend([0] * (m - n))
            for ref in (self._seq, self._blocks, self._hashes):
                ref.extend([None] * (m - n))
            self._free = list(range(m - 1, n - 1, -1))
        i = self._free.pop()
        self._co[i], self._fin[i], self._next_full[i] = co, fin, next_full
        self._committed[i], self._cap[i], self._rank[i] = committed, cap, rank
        self._seq[i], self._blocks[i], self._hashes[i] = seq, blocks, hashes
        self._arm_fill(i)
        self._arm_grow(i)
        return i

    def remove(self, slot: int) -> tuple[int, int, int]:
        if not 0 <= slot < len(self._seq) or self._seq[slot] is None:
            raise IndexError(f"Decoders: slot {slot} is not in use")
        self._genf[slot] += 1
        self._geng[slot] += 1
        out = (self._next_full[slot], self._committed[slot], self._cap[slot])
        self._seq[slot] = self._blocks[slot] = self._hashes[slot] = None
        self._free.append(slot)
        return out

    def clear(self) -> None:
        n = len(self._seq)
        self._seq[:] = self._blocks[:] = self._hashes[:] = [None] * n
        self._free = list(range(n - 1, -1, -1))
        self._fills.clear()
        self._grows.clear()
        self._pending = []

    def _arm_fill(self, i: int) -> None:
        self._genf[i] += 1
        fill = min(self._fin[i], self._next_full[i] - self._co[i] - 1)
        heapq.heappush(self._fills, (fill, self._rank[i], i, self._genf[i]))

    def _arm_grow(self, i: int) -> None:
        self._geng[i] += 1
        grow = self._cap[i] - self._co[i]
        if grow <= self._fin[i]:
            heapq.heappush(self._grows, (grow, self._rank[i], i, self._geng[i]))

    def _take_due(self, heap: list[tuple[int, int, int, int]], tick: int,
                  gens: list[int]) -> list[int]:  # fmt: skip
        out = []
        while heap and heap[0][0] <= tick:
            step, _, i, gen = heapq.heappop(heap)
            if self._seq[i] is None or gens[i] != gen:
                continue
            if step < tick:
                raise RuntimeError(f"Decoders: an event of step {step} was not handled "
                                   f"by step {tick}")  # fmt: skip
            out.append(i)
        return out

    def grow_due(self, tick: int) -> int:
        self._pending = self._take_due(self._grows, tick, self._geng)
        return len(self._pending)

    def assign(self, got: Any, at: int, k: int) -> None:
        if k != len(self._pending):
            raise RuntimeError(f"Decoders.assign: {k} blocks for {len(self._pending)} grows")
        for j, i in enumerate(self._pending):
            self._blocks[i].append(got[at + j])
            self._cap[i] += self.bs
            self._arm_grow(i)
        self._pending = []

    def run(self, stop: int, blocks: bytearray, hashes: bytearray, ref: Any, own: Any,
            free: Any, log: Any, pos: Any, nfree: int, head: int, tail: int, no_hash: int,
            evict: bool) -> tuple[int, int, int, int, int]:  # fmt: skip
        evicted = 0
        while True:
            f, g = self.next_fill(), self.next_grow() - 1
            e = f if f < g else g
            if e >= stop:
                return stop, nfree, head, evicted, 0
            if f == e and self.fill(e, blocks, hashes):
                raise RuntimeError(f"Decoders.run: a request finished inside a span (step {e})")
            if g != e:
                continue
            k = self.grow_due(e + 1)
            fresh = min(k, nfree)
            need = k - fresh
            if k > 64 or (need and not evict):
                return e, nfree, head, evicted, k
            victims: list[int] = []
            q = head
            while len(victims) < need:
                if q >= tail:
                    raise RuntimeError("Decoders.run: the LRU log ran out")
                b = int(log[q])
                if pos[b] == q:
                    victims.append(b)
                q += 1
            pending = set(memoryview(hashes).cast("q").tolist())
            if any(int(own[b]) in pending for b in victims):
                return e, nfree, head, evicted, k
            got = [int(free[nfree - fresh + j]) for j in range(fresh)] + victims
            for b in victims:
                pos[b] = -1
                own[b] = no_hash
            for b in got:
                ref[b] = 1
            nfree -= fresh
            if victims:
                head = q
            evicted += len(victims)
            self.assign(got, 0, k)

    def fill(self, tick: int, blocks: bytearray, hashes: bytearray) -> list[Any]:
        bs, done = self.bs, []
        for i in self._take_due(self._fills, tick, self._genf):
            computed = self._co[i] + tick + 1
            if computed >= self._next_full[i]:
                full = computed // bs
                if len(self._hashes[i]) < full:  # keys from token ids: hashed as it fills
                    self._seq[i].ensure_hashes(bs, computed + 1)
                lo = self._committed[i]
                blocks += self._blocks[i][lo:full].tobytes()
                hashes += self._hashes[i][lo:full].tobytes()
                self._committed[i] = full
                self._next_full[i] = (full + 1) * bs
            if tick >= self._fin[i]:
                done.append(self._seq[i])
            else:
                self._arm_fill(i)
        return done

    def next_grow(self) -> int:
        return self._grows[0][0] if self._grows else NEVER

    def next_fill(self) -> int:
        return self._fills[0][0] if self._fills else NEVER
