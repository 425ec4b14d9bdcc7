"""The prefix-aware router's bounded lookups choose exactly what asking every worker
for its whole hit chooses (docs/cluster.md, "prefix-aware"), in Python and in its compiled
twin (``Shards.choose``, ``workbench/sim/kvcache.c``: the workers' indexes held once)."""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from typing import Any

import pytest

from workbench.clock import VirtualClock
from workbench.sim import kvindex
from workbench.sim.cluster import Cluster, ClusterConfig
from workbench.sim.config import EngineConfig
from workbench.sim.kvcache import BlockManager
from workbench.sim.router import PrefixAware, RouteRequest


class _Worker:
    """A router's view of one worker: a real ``BlockManager`` and a fixed load."""

    def __init__(self, kv: BlockManager, load: tuple[int, int, float],
                 compiled: bool = False) -> None:  # fmt: skip
        self.kv, self._load, self.compiled = kv, load, compiled
        self.lookups = 0  # blocks looked up for the router
        self.asked: Sequence[int] | None = None  # the hashes of the last whole lookup
        self.found: tuple[Sequence[int], list[int]] | None = None  # a compiled router's hit

    def prefix_shard(self) -> tuple[Any, ...] | None:
        return self.kv.shard() if self.compiled else None

    def load(self) -> tuple[int, int, float]:
        return self._load

    def cached_prefix_blocks(self, hashes: Sequence[int], limit: int | None = None) -> int:
        n = len(hashes) if limit is None else min(limit, len(hashes))
        hit = len(self.kv.longest_hit(hashes, n))
        self.lookups += hit + 1
        self.asked = hashes
        return hit

    def caches_block(self, block_hash: int) -> bool:
        self.lookups += 1
        return self.kv.holds(block_hash)

    def found_prefix(self, hashes: Sequence[int], hit: list[int]) -> None:
        self.found = (hashes, hit)


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


@pytest.mark.parametrize("compiled", [False, True])
def test_bounded_lookups_choose_what_whole_lookups_choose(compiled: bool) -> None:
    if compiled and not kvindex.COMPILED:
        pytest.skip("the C extension is not built")
    rng = random.Random(5)
    whole = bounded = 0
    for case in range(300):
        chains = [[rng.getrandbits(62) for _ in range(rng.randint(1, 60))] for _ in range(3)]
        workers = [
            _Worker(_cache(rng, chains), (rng.randint(0, 6), rng.randint(0, 3),
                                          rng.choice([0.1, 0.5, 0.97])), compiled)
            for _ in range(rng.randint(1, 8))
        ]  # fmt: skip
        router = PrefixAware(overload_threshold=rng.choice([0, 2, 4]))
        for k in range(4):  # the same sessions again: the remembered worker is asked first
            chain = chains[rng.randrange(3)]
            hashes: Sequence[int] = chain[: rng.randint(0, len(chain))]
            if k % 2:
                hashes = array("q", hashes)  # as the cluster gives them (Sequence.hashes)
            for w in workers:
                w.lookups = 0
            want = _brute(router, hashes, workers)
            whole += sum(w.lookups for w in workers)
            for w in workers:
                w.lookups, w.asked, w.found = 0, None, None
            req = RouteRequest(f"r{case}.{k}", f"s{k % 2}", hashes)
            got = router.choose(req, workers, [w.load() for w in workers])
            bounded += sum(w.lookups for w in workers)
            assert got == want, (case, k)
            assert (router._shards is not None) == compiled
            loads = [w.load() for w in workers]
            floor = min(r + q for r, q, _ in loads)
            some_open = any(r + q - floor <= router.overload_threshold
                            and u <= router.max_kv_usage for r, q, u in loads)  # fmt: skip
            if compiled and len(hashes) and some_open:
                # the winner is handed its whole hit (its blocks): admission starts from it
                found = workers[got].found
                assert found is not None and found[0] is hashes
                assert list(found[1]) == workers[got].kv.longest_hit(hashes, len(hashes))
                assert all(w.found is None for w in workers if w is not workers[got])
            else:
                assert all(w.found is None for w in workers)
    assert bounded < whole  # the bound saved lookups (the point of it)


def test_a_cluster_of_engines_routes_through_the_compiled_indexes() -> None:
    """Engines with the compiled index give the router their shards; a cache without
    prefix caching (nothing to hold) leaves the Python rule in charge."""
    for caching, want in ((True, kvindex.COMPILED), (False, False)):
        cfg = EngineConfig(num_blocks=256, enable_prefix_caching=caching)
        cluster = Cluster(cfg, ClusterConfig(workers=3, router="prefix-aware"), VirtualClock())
        router = cluster.router
        assert isinstance(router, PrefixAware)
        req = RouteRequest("r", "s", array("q", [1, 2]))
        assert router.choose(req, cluster.workers, cluster.loads()) == 0
        assert (router._shards is not None) == want


@pytest.mark.skipif(not kvindex.COMPILED, reason="the C extension is not built")
@pytest.mark.parametrize("args", [
    (array("q", [1]), [(0, 0, 0.1)], -1, 4, 0.95),  # a load short
    (array("q", [1]), [(0, 0, 0.1), (0, 0)], -1, 4, 0.95),  # a load not a triple
    (array("q", [1]), [(0, 0, 0.1), ("x", 0, 0.1)], -1, 4, 0.95),  # not a count
    (array("d", [1.0]), [(0, 0, 0.1), (0, 0, 0.1)], -1, 4, 0.95),  # hashes not int64
    ([1 << 70], [(0, 0, 0.1), (0, 0, 0.1)], -1, 4, 0.95),  # a hash past int64
])
def test_the_compiled_choice_refuses_bad_arguments(args: tuple[Any, ...]) -> None:
    shards = kvindex.native.Shards([BlockManager(16, 64).shard() for _ in range(2)])
    with pytest.raises((ValueError, TypeError, OverflowError)):
        shards.choose(*args)
    with pytest.raises(TypeError):
        kvindex.native.Shards([(b"ro", b"ro", 60)])  # read-only buffers
    with pytest.raises(TypeError):
        kvindex.native.Shards([list(BlockManager(16, 64).shard() or ())])  # not a tuple
    table, own, shift = BlockManager(16, 64).shard() or ()
    with pytest.raises(ValueError):
        kvindex.native.Shards([(table, own, shift + 1)])  # the shift does not fit the table



@pytest.mark.skipif(not kvindex.COMPILED, reason="the C extension is not built")
def test_a_known_hit_only_speeds_the_home_workers_walk() -> None:
    """``known`` (the session's last hit on its home worker) is checked against the
    blocks' hashes before any lookup: right, stale, short, long or garbage, the choice
    and the winner's blocks are the ones found without it."""
    rng = random.Random(9)
    for case in range(300):
        chains = [[rng.getrandbits(62) for _ in range(rng.randint(1, 60))] for _ in range(3)]
        kvs = [_cache(rng, chains) for _ in range(rng.randint(1, 6))]
        shards = kvindex.native.Shards([kv.shard() for kv in kvs])
        loads = [(rng.randint(0, 6), rng.randint(0, 3), rng.choice([0.1, 0.5, 0.97]))
                 for _ in kvs]  # fmt: skip
        chain = chains[rng.randrange(3)]
        hashes = array("q", chain[: rng.randint(0, len(chain))])
        home = rng.randrange(-1, len(kvs))
        plain = shards.choose(hashes, loads, home, 4, 0.95)
        true = kvs[home].longest_hit(hashes, len(hashes)) if home >= 0 else []
        for known in (
            array("q", true),  # what it holds now
            array("q", true[: rng.randint(0, len(true))]),  # an older, shorter hit
            array("q", [*true, *rng.sample(range(4096), 5)]),  # longer than it holds
            array("q", rng.sample(range(4096), rng.randint(0, 40))),  # other blocks
            array("q", [-1, 4096, 1 << 40]),  # no blocks at all
        ):
            assert shards.choose(hashes, loads, home, 4, 0.95, known) == plain, case
            assert shards.choose(hashes, loads, home, 4, 0.95, known.tobytes()) == plain
    with pytest.raises(ValueError):
        shards.choose(hashes, loads, 0, 4, 0.95, b"1234567")  # not int64s


def test_the_router_keeps_a_last_hit_only_for_a_session_with_more_to_come() -> None:
    if not kvindex.COMPILED:
        pytest.skip("the C extension is not built")
    chain = [random.Random(4).getrandbits(62) for _ in range(8)]
    kv = BlockManager(16, 64)
    blocks = kv.allocate(8)
    assert blocks is not None
    kv.commit(blocks, chain, 0, 8)
    workers = [_Worker(kv, (0, 0, 0.1), compiled=True)]
    router = PrefixAware()
    router.choose(RouteRequest("a", "a", array("q", chain)), workers, [(0, 0, 0.1)])
    assert not router._known  # a request that is its own session: nothing kept
    router.choose(RouteRequest("b:0", "b", array("q", chain)), workers, [(0, 0, 0.1)])
    assert list(router._known) == ["b"]
    router.choose(RouteRequest("b:1", "b", array("q", chain)), workers, [(0, 0, 0.1)])
    assert list(router._known) == ["b"]  # taken by the next request, kept again
