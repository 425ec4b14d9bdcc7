"""The prefix-aware router's bounded lookups choose exactly what asking every worker
for its whole hit chooses (docs/cluster.md, "prefix-aware")."""

from __future__ import annotations

import random
from collections.abc import Sequence

from workbench.sim.kvcache import BlockManager
from workbench.sim.router import PrefixAware, RouteRequest


class _Worker:
    """A router's view of one worker: a real ``BlockManager`` and a fixed load."""

    def __init__(self, kv: BlockManager, load: tuple[int, int, float]) -> None:
        self.kv, self._load = kv, load
        self.lookups = 0  # blocks looked up for the router

    def load(self) -> tuple[int, int, float]:
        return self._load

    def cached_prefix_blocks(self, hashes: Sequence[int], limit: int | None = None) -> int:
        n = len(hashes) if limit is None else min(limit, len(hashes))
        hit = len(self.kv.longest_hit(hashes, n))
        self.lookups += hit + 1
        return hit

    def caches_block(self, block_hash: int) -> bool:
        self.lookups += 1
        return self.kv.holds(block_hash)


def _brute(router: PrefixAware, hashes: list[int], workers: list[_Worker]) -> int:
    """The rule as documented: every open worker's whole hit, least (-hit, load, usage, i)."""
    loads = [w.load() for w in workers]
    queued = [r + q for r, q, _ in loads]
    floor = min(queued)
    open_ = [i for i in range(len(workers)) if queued[i] - floor <= router.overload_threshold
             and loads[i][2] <= router.max_kv_usage]  # fmt: skip
    if not open_:
        return min(range(len(workers)), key=lambda i: (queued[i], loads[i][2], i))
    return min(open_, key=lambda i: (-workers[i].cached_prefix_blocks(hashes), queued[i],
                                     loads[i][2], i))  # fmt: skip


def _cache(rng: random.Random, chains: list[list[int]]) -> BlockManager:
    """A cache holding random prefixes of the chains, some with a block missing inside
    (a duplicate that stayed private, an eviction): hits are not monotone in the blocks."""
    kv = BlockManager(16, 4096)
    for chain in chains:
        n = rng.randint(0, len(chain))
        keep = [i for i in range(n) if rng.random() > 0.05]
        blocks = kv.allocate(len(keep))
        assert blocks is not None
        kv.commit(blocks, [chain[i] for i in keep], 0, len(keep))
        kv.release(blocks)
    return kv


def test_bounded_lookups_choose_what_whole_lookups_choose() -> None:
    rng = random.Random(5)
    whole = bounded = 0
    for case in range(300):
        chains = [[rng.getrandbits(62) for _ in range(rng.randint(1, 60))] for _ in range(3)]
        workers = [
            _Worker(_cache(rng, chains), (rng.randint(0, 6), rng.randint(0, 3),
                                          rng.choice([0.1, 0.5, 0.97])))
            for _ in range(rng.randint(1, 8))
        ]  # fmt: skip
        router = PrefixAware(overload_threshold=rng.choice([0, 2, 4]))
        for k in range(4):  # the same sessions again: the remembered worker is asked first
            chain = chains[rng.randrange(3)]
            hashes = chain[: rng.randint(0, len(chain))]
            for w in workers:
                w.lookups = 0
            want = _brute(router, hashes, workers)
            whole += sum(w.lookups for w in workers)
            for w in workers:
                w.lookups = 0
            got = router.choose(RouteRequest(f"r{case}.{k}", f"s{k % 2}", hashes), workers)
            bounded += sum(w.lookups for w in workers)
            assert got == want, (case, k)
    assert bounded < whole  # the bound saved lookups (the point of it)

