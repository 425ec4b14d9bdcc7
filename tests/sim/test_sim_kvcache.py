"""KV block manager and cost model: pure, exact."""

from array import array

import numpy as np
import pytest

from workbench.sim import cost, kvindex
from workbench.sim.config import EngineConfig
from workbench.sim.kvcache import BlockManager, block_hashes


def test_block_hashes_chain_the_prefix():
    a = block_hashes(list(range(48)), 16)
    assert len(a) == 3
    b = block_hashes([*range(16), *range(100, 116), *range(32, 48)], 16)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # same block 2, other parent
    assert block_hashes(list(range(47)), 16) == a[:2]  # only full blocks
    assert block_hashes(list(range(48)), 16, start=1, parent=a[0]) == a[1:]


def _fill(bm: BlockManager, tokens: list[int]) -> list[int]:
    hashes = block_hashes(tokens, bm.block_size)
    blocks = bm.allocate(len(hashes))
    assert blocks is not None
    bm.commit(blocks, hashes, 0, len(hashes))
    return blocks


def test_lru_evicts_least_recently_freed_tail_first():
    bm = BlockManager(16, 6)
    a_tokens, b_tokens = list(range(48)), list(range(1000, 1048))
    a = _fill(bm, a_tokens)
    bm.release(a)
    b = _fill(bm, b_tokens)
    bm.release(b)
    assert bm.lru_order() == [a[2], a[1], a[0], b[2], b[1], b[0]]
    assert bm.usage == 0.0 and bm.num_free == 6
    assert bm.allocate(2) is not None  # no never-used block left: evicts a[2], a[1]
    assert bm.evictions == 2
    assert bm.longest_hit(block_hashes(a_tokens, 16), 3) == [a[0]]
    assert bm.longest_hit(block_hashes(b_tokens, 16), 3) == b


def test_hits_are_reference_counted_and_reclaimed_from_lru():
    bm = BlockManager(16, 4)
    tokens = list(range(32))
    blocks = _fill(bm, tokens)
    bm.release(blocks)
    hit = bm.longest_hit(block_hashes(tokens, 16), 2)
    assert hit == blocks
    assert bm.can_allocate(2, hit) and not bm.can_allocate(3, hit)
    bm.acquire(hit)
    bm.acquire(hit)  # a second request shares them
    assert bm.num_active == 2 and bm.lru_order() == []
    bm.release(hit)
    assert bm.lru_order() == []  # still referenced once
    assert not bm.reset()  # refused while in use
    bm.release(hit)
    assert bm.reset() and bm.cached_blocks() == 0 and bm.num_free == 4


def test_allocation_fails_cleanly_when_full():
    bm = BlockManager(16, 2)
    assert bm.allocate(2) is not None
    assert bm.allocate(1) is None
    assert bm.usage == 1.0


def test_duplicate_block_stays_private():
    bm = BlockManager(16, 4)
    tokens = list(range(16))
    first = _fill(bm, tokens)
    second = _fill(bm, tokens)  # computed concurrently: not registered twice
    bm.release(second)
    assert bm.lru_order() == [] and bm.num_free == 3
    bm.release(first)
    assert bm.lru_order() == first


def test_cost_model_polynomials():
    cfg = EngineConfig()
    assert cost.prefill_ms(cfg, 0) == 0.0
    assert cost.prefill_ms(cfg, 1000) == 4.209989e-7 * 1e6 + 1.518344e-2 * 1000 + 16.50142
    assert cost.decode_ms(cfg, 0) == 5.74
    assert cost.decode_ms(cfg, cfg.capacity_tokens * 10) == max(1.0, -25.74 + 54.01 + 5.74)
    both = cost.step_ns(cfg, 1000, 3, 0)
    assert both == round((cost.prefill_ms(cfg, 1000) + 5.74) * 1e6)
    assert cost.step_ns(EngineConfig(speedup=2.0), 1000, 0, 0) == round(
        cost.prefill_ms(cfg, 1000) * 1e6 / 2
    )
    assert cost.step_ns(EngineConfig(zero_cost=True), 1000, 3, 0) == 0


def test_config_from_knobs_routes_faults_and_rejects_unknown():
    cfg = EngineConfig.from_knobs(block_size=32, error_rate=0.5, omit_usage=True)
    assert cfg.block_size == 32 and cfg.faults.error_rate == 0.5 and cfg.faults.omit_usage
    try:
        EngineConfig.from_knobs(blok_size=3)
    except ValueError as exc:
        assert "blok_size" in str(exc) and "block_size" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("unknown knob accepted")


def _i64(xs):
    return np.asarray(xs, dtype=np.int64)


@pytest.mark.parametrize("form", [_i64, list], ids=["arrays", "lists"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_held_prefix_and_reclaimable_hits(compiled, form):
    if compiled and not kvindex.COMPILED:
        pytest.skip("workbench.sim._kvcache is not built")
    bm = BlockManager(16, 8, compiled=compiled)
    tokens = list(range(64))
    hashes = block_hashes(tokens, 16)
    blocks = _fill(bm, tokens)
    bm.release(blocks)  # all four cached, unreferenced (evictable)
    h = form(hashes)
    # an earlier hit of two blocks; the hashes may run past it
    assert bm.held_prefix(form(blocks[:2]), h) == 2
    assert bm.held_prefix(form([]), h) == 0
    assert bm.allocate(4) is not None  # four never-used blocks: nothing evicted
    assert bm.held_prefix(form(blocks), h) == 4
    assert bm.allocate(2) is not None  # evicts blocks[3], blocks[2] (tail first)
    assert bm.held_prefix(form(blocks), h) == 2
    assert bm.held_prefix(form(blocks[1:]), h[1:]) == 1
    assert bm.held_prefix(form([blocks[1], blocks[0]]), h) == 0  # stops at the first miss
    # can_allocate (a list): hits without a reference leave the free pool when taken
    hit = blocks[:2]
    assert bm.num_free == 2
    assert bm.can_allocate(0, hit) and not bm.can_allocate(1, hit)
    bm.acquire(hit[:1])  # one of them referenced: taking the hit reclaims only the other
    assert bm.num_free == 1 and bm.can_allocate(0, hit) and not bm.can_allocate(1, hit)
    bm.acquire(hit[1:])
    assert bm.can_allocate(0, hit)


def test_compiled_held_and_idle_check_their_input():
    if not kvindex.COMPILED:
        pytest.skip("workbench.sim._kvcache is not built")
    bm = BlockManager(16, 4)
    with pytest.raises(IndexError, match="out of range"):
        bm.held_prefix(_i64([4]), _i64([1]))
    with pytest.raises(ValueError, match="fewer hashes than blocks"):
        bm.held_prefix(_i64([0, 1]), _i64([1]))
    with pytest.raises(ValueError, match="must be int64"):
        bm.held_prefix(np.asarray([0, 1], dtype=np.int32), _i64([1, 2]))
    with pytest.raises(ValueError, match="must be int64"):
        bm.held_prefix([0, 1], np.asarray([1.0, 2.0]))
    with pytest.raises(IndexError, match="out of range"):  # a list, converted as it goes
        bm.held_prefix([4], [1])
    with pytest.raises(IndexError, match="out of range"):  # 1 <= 4 free - 4 hit: counted
        bm.can_allocate(1, [0, 1, 2, -1])


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_moves_on_int64_arrays_equal_the_moves_on_lists(compiled):
    """The scheduler's block lists and hashes are ``array('q')`` (docs/virtual-time.md,
    "Block state as int64 arrays"): ``take`` is ``allocate`` as an array, and acquire,
    release and commit read arrays as they read lists."""
    if compiled and not kvindex.COMPILED:
        pytest.skip("workbench.sim._kvcache is not built")
    runs = []
    for form in (list, lambda xs: array("q", xs)):
        bm = BlockManager(16, 8, compiled=compiled)
        seen, last = [], []
        for r in range(9):  # fill, share a prefix, release, evict: the LRU turns over
            tokens = list(range(r % 3, r % 3 + 16 * (2 + r % 2)))
            hashes = block_hashes(tokens, 16)
            hit = bm.longest_hit(form(hashes), len(hashes))
            bm.acquire(form(hit))
            fresh = bm.take(len(hashes) - len(hit))
            assert fresh is not None and isinstance(fresh, array)
            blocks = hit + fresh.tolist()
            bm.commit(form(blocks), form(hashes), len(hit), len(blocks))
            seen.append((hit, fresh.tolist(), bm.num_free, bm.evictions, bm.lru_order()))
            bm.release(form(last))  # the round before: at most two rounds held
            last = blocks
        runs.append((seen, bm.allocate(2), sorted(bm.index().items())))
    assert runs[0] == runs[1]
    assert any(hit for hit, *_ in runs[0][0]) and runs[0][0][-1][3] > 0  # hits, evictions


def test_compiled_moves_refuse_arrays_that_are_not_int64():
    if not kvindex.COMPILED:
        pytest.skip("workbench.sim._kvcache is not built")
    bm = BlockManager(16, 4)
    for move in (bm.acquire, bm.release):
        with pytest.raises(ValueError, match="must be int64"):
            move(array("i", [0]))
        with pytest.raises(IndexError, match="out of range"):
            move(array("q", [4]))
    assert bm.num_free == 4 and bm.num_active == 0
