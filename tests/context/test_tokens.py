"""Synthetic tokens: deterministic, per-stream, in range, shared only when asked."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.context.tokens import DEFAULT_VOCAB_HI, DEFAULT_VOCAB_LO, TokenPool

_DUMP = (
    "from workbench.context.tokens import TokenPool; p = TokenPool(seed=3); "
    "print(p.fresh('session-1', 40), p.fresh('session-1', 5), p.shared_prefix('k', 7), "
    "p.block(42, 9), p.tail(6))"
)


def test_deterministic_across_processes():
    outs = [
        subprocess.run(
            [sys.executable, "-c", _DUMP],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(hs)},
        ).stdout
        for hs in (0, 12345)
    ]
    assert outs[0] == outs[1]
    p = TokenPool(seed=3)
    local = (
        p.fresh("session-1", 40),
        p.fresh("session-1", 5),
        p.shared_prefix("k", 7),
        p.block(42, 9),
        p.tail(6),
    )
    assert outs[0].strip() == " ".join(str(x) for x in local)


def test_cursor_continues_and_is_split_invariant():
    a, b = TokenPool(), TokenPool()
    first = a.fresh("s", 10)
    assert a.fresh("s", 10) != first  # the cursor moved on
    assert (
        b.fresh("s", 3) + b.fresh("s", 7) + b.fresh("s", 10)
        == first + TokenPool().fresh("s", 20)[10:]
    )
    assert a.position("s") == 20 and a.position("other") == 0


def test_streams_are_independent():
    p = TokenPool()
    s1, s2 = np.array(p.fresh("session-1", 5000)), np.array(p.fresh("session-2", 5000))
    assert not np.array_equal(s1[:16], s2[:16])
    # no more agreement than chance (1 / 30000 per position)
    assert np.mean(s1 == s2) < 0.002
    # the other stream's cursor is untouched
    assert p.fresh("session-1", 3) == TokenPool().fresh("session-1", 5003)[5000:]


def test_seed_changes_everything():
    assert TokenPool(seed=0).fresh("s", 32) != TokenPool(seed=1).fresh("s", 32)


@pytest.mark.parametrize("lo,hi", [(DEFAULT_VOCAB_LO, DEFAULT_VOCAB_HI), (5, 9), (0, 2**32)])
def test_range(lo, hi):
    toks = np.array(TokenPool(lo, hi).fresh("s", 20000))
    assert toks.min() >= lo and toks.max() < hi
    if hi - lo < 100:
        assert set(toks.tolist()) == set(range(lo, hi))  # every id is reachable


def test_default_range_fits_a_32k_vocab():
    assert 0 < DEFAULT_VOCAB_LO < DEFAULT_VOCAB_HI <= 32000


def test_bad_range_and_count():
    with pytest.raises(ValueError):
        TokenPool(10, 10)
    with pytest.raises(ValueError):
        TokenPool().fresh("s", -1)


def test_shared_prefix_same_key_same_tokens():
    a, b = TokenPool(), TokenPool()
    assert a.shared_prefix("anthropic/claude/proj", 100) == b.shared_prefix(
        "anthropic/claude/proj", 100
    )
    assert a.shared_prefix("k", 50) == a.shared_prefix("k", 100)[:50]  # no cursor
    assert a.shared_prefix("k", 50) != a.shared_prefix("other", 50)
    assert a.shared_prefix("k", 50) != a.fresh("k", 50)  # namespaces differ


def test_same_hash_id_same_block():
    a, b = TokenPool(), TokenPool()
    assert a.block(7, 512) == b.block(7, 512)
    assert a.block(7, 512) != a.block(8, 512)
    assert a.block(2**70 + 1, 16) == b.block(2**70 + 1, 16)  # Dynamo hashes > 64 bits
    assert len(a.block(7, 512)) == 512


def test_prompt_from_hash_ids_concatenates_and_cuts():
    p = TokenPool()
    prompt = p.prompt_from_hash_ids([3, 4, 5], 1100, 512)
    assert len(prompt) == 1100
    assert prompt == p.block(3, 512) + p.block(4, 512) + p.block(5, 512)[:76]
    # two requests sharing leading ids share leading tokens
    other = p.prompt_from_hash_ids([3, 4, 9], 1300, 512)
    assert other[:1024] == prompt[:1024] and other[1024:1100] != prompt[1024:]


def test_prompt_from_hash_ids_floor_rounded_needs_fill_stream():
    p = TokenPool()
    with pytest.raises(ValueError, match="fill_stream"):
        p.prompt_from_hash_ids([1, 2], 1100, 512)
    prompt = p.prompt_from_hash_ids([1, 2], 1100, 512, fill_stream="req-1")
    assert prompt[:1024] == p.block(1, 512) + p.block(2, 512)
    assert prompt[1024:] == TokenPool().fresh("req-1", 76)


def test_tail_never_equals_unit_streams():
    p = TokenPool()
    tail = p.tail(64)
    assert tail == TokenPool().tail(64)  # a probe sent twice must be identical
    assert p.tail(64, nonce="x") != tail
    for stream in ["", "t", "tail", "0", "session-1", "\x1ft\x1f"]:
        assert TokenPool().fresh(stream, 64) != tail
        assert TokenPool().shared_prefix(stream, 64) != tail
    assert p.block(0, 64) != tail


def test_returns_plain_python_ints():
    toks = TokenPool().fresh("big", 100_000)
    assert len(toks) == 100_000 and type(toks[0]) is int
    assert type(TokenPool().prompt_from_hash_ids([1], 10, 16)[0]) is int


def test_forget_drops_a_streams_cursor():
    pool = TokenPool(seed=3)
    first = pool.fresh("u1", 8)
    pool.fresh("u2", 4)
    pool.forget("u1")
    pool.forget("never-used")  # no error
    assert pool.position("u1") == 0 and pool.position("u2") == 4
    assert pool.fresh("u1", 8) == first  # a forgotten stream starts over, same tokens


def test_the_in_place_run_generator_equals_the_general_one():
    """``_generate_run`` (one turn, in place) must give exactly ``_generate``'s tokens,
    including positions past 2**32 (turn > 0) and odd vocab ranges."""
    from workbench.context.tokens import _generate, _generate_run

    rng = np.random.default_rng(7)
    for _ in range(500):
        seed, key = (int(v) for v in rng.integers(0, 2**32, size=2))
        start = int(rng.integers(0, 2**32 - 4096))
        if rng.random() < 0.3:
            start += int(rng.integers(1, 2**20)) << 32
        n = int(rng.integers(0, 4096))
        lo, span = int(rng.integers(0, 5000)), int(rng.integers(1, 2**31))
        positions = np.arange(start, start + n, dtype=np.uint64)
        want = _generate(np.uint64(seed), np.uint64(key), positions, lo, span)
        assert np.array_equal(_generate_run(seed, key, start, n, lo, span), want)


def test_parts_drawn_at_once_equal_parts_drawn_one_by_one():
    """``resolve_parts_array`` (every part in one vectorised pass: the record hashes of
    new hash-id blocks) gives exactly the concatenated ``resolve_array`` of each part:
    any source kind, starts past 2**32, parts crossing a turn, empty parts."""
    from workbench.context.hashing import chain_hashes
    from workbench.segments import BLOCK, PREFIX, UNIT

    rng = np.random.default_rng(11)
    for kw in ({}, {"salt": "run-7"}, {"vocab_lo": 5, "vocab_hi": 2**32 - 1, "seed": 3}):
        pool = TokenPool(**kw)
        for _ in range(100):
            parts = []
            for _ in range(int(rng.integers(2, 7))):
                start = int(rng.choice([0, rng.integers(0, 9000), 2**32 - int(rng.integers(1, 600)),
                                        (3 << 32) + int(rng.integers(0, 99))]))
                kind, packed = int(rng.choice([UNIT, PREFIX, BLOCK])), int(rng.integers(0, 2**63))
                parts.append((kind, packed * 2 + 1, start, int(rng.integers(0, 700))))
            want = np.concatenate([pool.resolve_array(*p) for p in parts])
            got = pool.resolve_parts_array(parts)
            assert got.dtype == want.dtype and np.array_equal(got, want), parts
            packed = pool.resolve_parts_array(parts, np.uint32)  # as record hashes pack ids
            assert packed.dtype == np.uint32 and np.array_equal(packed, want)
            assert chain_hashes(None, packed, 16) == chain_hashes(None, want, 16)
    with pytest.raises(ValueError, match="not a token pool's source"):
        TokenPool().resolve_parts_array([(UNIT, 1, 0, 3), (4, 1, 0, 3)])


def test_prompt_from_hash_ids_memo_keeps_tokens(monkeypatch):
    """Memoized hash-id keys (and a memo that starts over) give the same tokens as
    blocks drawn one by one by a fresh pool, salted or not, on any vocabulary range."""
    import workbench.context.tokens as tokens

    monkeypatch.setattr(tokens, "_BLOCK_KEYS_MAX", 3)  # start over every few ids
    for kw in ({}, {"salt": "run-7"}, {"vocab_lo": 5, "vocab_hi": 2**32 - 1, "seed": 3}):
        pool = TokenPool(**kw)
        for ids in ([1, 2, 3], [1, 2, 9, 2**70 + 1], [9, 1], [4, 5, 6, 7, 8]):
            got = pool.prompt_from_hash_ids(ids, 16 * len(ids) - 5, 16)
            want = [t for h in ids for t in TokenPool(**kw).block(h, 16)][: 16 * len(ids) - 5]
            assert got == want


def test_array_of_the_last_hash_id_prompt_hashes_the_same():
    from workbench.context.hashing import block_hashes

    pool = TokenPool()
    prompt = pool.prompt_from_hash_ids([4, 5, 6], 1500, 512)
    packed = pool.array_of(prompt)
    assert packed is not None and packed.tolist() == prompt
    assert block_hashes(packed, 64) == block_hashes(prompt, 64)
    assert pool.array_of(list(prompt)) is None  # only that very list
    filled = pool.prompt_from_hash_ids([4], 600, 512, fill_stream="u")  # tail from a stream
    assert pool.array_of(filled) is None and pool.array_of(prompt) is None


def test_token_lists_share_one_int_object_per_id():
    """Small vocabularies hand out shared int objects (no fresh ints per prompt); wide
    ones plain ints; the values are the same either way."""
    small, wide = TokenPool(), TokenPool(vocab_lo=5, vocab_hi=2**32 - 1)
    a = small.prompt_from_hash_ids([1, 2], 1024, 512)
    b = small.prompt_from_hash_ids([2, 1], 1024, 512)
    assert a[0] is b[512] and a[600] is b[88]  # the same objects, not just equal values
    assert small.fresh("s", 100) == TokenPool().fresh("s", 100)
    assert all(type(t) is int for t in wide.fresh("s", 100) + a)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=12), st.integers(0, 400), st.integers(1, 40),
       st.booleans())
def test_segments_from_hash_ids_are_normal_as_made(ids, input_len, bs, fill):
    """Its parts are taken as they are (``normal=True``): normalising them again changes
    nothing (repeated ids, a cut last block, a fill, none at all), and they resolve to
    ``prompt_from_hash_ids``'s tokens."""
    from workbench.segments import Segments

    pool = TokenPool(seed=5)
    stream = "fill" if fill else None
    try:
        want = pool.prompt_from_hash_ids(ids, input_len, bs, fill_stream=stream)
    except ValueError:
        with pytest.raises(ValueError):
            pool.segments_from_hash_ids(ids, input_len, bs, fill_stream=stream)
        return
    pool.forget("fill")
    seg = pool.segments_from_hash_ids(ids, input_len, bs, fill_stream=stream)
    assert seg == Segments(list(seg.parts)) and len(seg) == input_len
    assert seg.tokens(pool.resolve) == want
