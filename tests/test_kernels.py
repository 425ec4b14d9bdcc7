"""The compiled kernels (``workbench/kernels.c``) give their Python twins' values exactly
(docs/virtual-time.md, "Compiled kernels", lists the pairs); ``WORKBENCH_COMPILED=0`` runs
the twins."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench.context.hashing as hashing_mod
import workbench.context.tokens as tokens_mod
import workbench.replay.rounds as rounds_mod
import workbench.segments as segments_mod
import workbench.sim.cost as cost_mod
import workbench.storage.rundir as rundir_mod
from workbench.context.tokens import TokenPool
from workbench.kernels import native
from workbench.segments import BLOCK, OUTPUT, PREFIX, UNIT, BlockKeyer, Segments, _mix
from workbench.sim.config import EngineConfig

M64 = (1 << 64) - 1


def test_the_kernels_are_built_here() -> None:
    # a dev install (make setup) and the wheel build them; the twins alone would pass the
    # rest of this file without comparing anything
    assert native is not None


# -- block keys ------------------------------------------------------------------------
parts = st.lists(
    st.tuples(st.sampled_from([UNIT, PREFIX, BLOCK, OUTPUT]), st.integers(0, 2**63),
              st.integers(0, 5000), st.integers(0, 700)),
    max_size=12,
)  # fmt: skip


def _keys(seg: Segments, bs: int, stops: list[int]) -> list[list[int]]:
    keyer = BlockKeyer(seg, bs)
    return [keyer.upto(stop) for stop in stops]


@settings(max_examples=300, deadline=None)
@given(parts, st.integers(1, 64), st.lists(st.integers(0, 9000), max_size=8))
def test_block_keys_equal_the_python_twin(ps, bs: int,
                                          stops: list[int]) -> None:  # fmt: skip
    seg = Segments(ps)
    stops = [*sorted(min(s, len(seg)) for s in stops), len(seg)]
    got = _keys(seg, bs, stops)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(segments_mod, "_native", None)
        want = _keys(seg, bs, stops)
    assert got == want
    assert [k for ks in got for k in ks] == seg.block_keys(bs)


def _unfinish(z: int) -> int:
    """The input of splitmix64's finaliser that gives ``z`` (each step inverted)."""
    def unxorshift(x: int, s: int) -> int:
        y = x
        for _ in range(64 // s + 1):
            y = x ^ (y >> s)
        return y & M64
    z = unxorshift(z, 31)
    z = z * pow(0x94D049BB133111EB, -1, 1 << 64) & M64
    z = unxorshift(z, 27)
    z = z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64) & M64
    return unxorshift(z, 30)


def test_a_key_that_would_be_minus_one_is_minus_two_in_both() -> None:
    pk = _unfinish(M64)  # end 0: the finaliser's input is the part key itself
    signed = pk - (1 << 64) if pk >> 63 else pk
    assert _mix(np.array([pk], dtype=np.uint64), np.array([0], dtype=np.uint64)) == [-2]
    assert segments_mod._mix_one(signed, 0) == -2
    assert native.block_keys([signed], [1], 0, 16) == [-2]
    assert native.block_keys([pk], [2], 0, 16)[0] == -2  # any int, taken modulo 2**64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**70), 2**70), max_size=6), st.integers(0, 9000),
       st.integers(1, 64), st.data())
def test_block_keys_bytes_are_block_keys_as_int64s(pks: list[int], e0: int, bs: int,
                                                   data: st.DataObject) -> None:  # fmt: skip
    counts = data.draw(st.lists(st.integers(0, 40), min_size=len(pks), max_size=len(pks)))
    got = array("q")
    got.frombytes(native.block_keys_bytes(pks, counts, e0, bs))
    assert got.tolist() == native.block_keys(pks, counts, e0, bs)


@pytest.mark.parametrize("fn", ["block_keys", "block_keys_bytes"])
def test_block_keys_refuse_bad_arguments(fn: str) -> None:
    keys = getattr(native, fn)
    with pytest.raises(ValueError, match="one count per part key"):
        keys([1, 2], [1], 0, 16)
    with pytest.raises(ValueError, match="counts must be >= 0"):
        keys([1], [-1], 0, 16)
    with pytest.raises(ValueError, match="block_size > 0"):
        keys([1], [1], 0, 0)
    with pytest.raises(TypeError):
        keys([1.5], [1], 0, 16)


@settings(max_examples=300, deadline=None)
@given(parts.filter(lambda ps: Segments(ps).parts), st.integers(1, 64), st.data())
def test_walk_equals_the_python_twin(ps, bs: int, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    seg = Segments(ps)
    n = len(seg)
    # a first walk, then resumed from where each one stopped (as ``BlockKeyer`` does)
    stops = sorted(data.draw(st.lists(st.integers(bs, max(bs, n)), min_size=1, max_size=5)))
    state = (0, 0, segments_mod._ROOT, bs)
    for stop in stops:
        last = stop - stop % bs
        outs = []
        for walk in (native.walk, segments_mod._twin_walk):
            pkeys: list[int] = []
            counts: list[int] = []
            if last > n:
                with pytest.raises(IndexError):
                    walk(seg.parts, *state, last, bs, pkeys, counts)
                outs.append(None)
                continue
            outs.append((walk(seg.parts, *state, last, bs, pkeys, counts), pkeys, counts))
        assert outs[0] == outs[1]
        if outs[0] is None:
            return
        state = outs[0][0][:4]  # stopped inside a part or at its end: resumed there


def test_walk_refuses_bad_arguments() -> None:
    ps = ((UNIT, 7, 0, 40),)
    with pytest.raises(ValueError, match="block_size > 0"):
        native.walk(ps, 0, 0, 1, 16, 32, 0, [], [])
    with pytest.raises(IndexError, match="past the last part"):
        native.walk(ps, 0, 0, 1, 16, 48, 16, [], [])
    with pytest.raises(TypeError, match="a part is a tuple"):
        native.walk(((UNIT, 7, 0),), 0, 0, 1, 16, 32, 16, [], [])
    with pytest.raises(TypeError):
        native.walk([(UNIT, 7, 0, 40)], 0, 0, 1, 16, 32, 16, [], [])


# -- record hashes of a prompt as parts: whole hash-id blocks and the memo around them ---
_bparts = st.lists(
    st.tuples(st.sampled_from([UNIT, BLOCK, BLOCK, OUTPUT]), st.integers(0, 6),
              st.sampled_from([0, 0, 0, 3, 2**64 + 5]), st.sampled_from([16, 16, 16, 5, 21, 40])),
    max_size=14,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_bparts, st.sampled_from([8, 16]), st.integers(-1, 8), st.data())
def test_whole_parts_and_the_memo_equal_the_python_twins(ps, bs: int, known: int,
                                                         data: st.DataObject) -> None:  # fmt: skip
    seg = Segments(ps)
    n = len(seg)
    whole = native.whole_parts(seg.parts, n, bs, BLOCK)
    assert whole == rounds_mod._Twins.whole_parts(seg.parts, n, bs, BLOCK)
    # a memo of some of the part keys (the hash ids), right or wrong about prev and length
    entries = data.draw(st.dictionaries(
        st.integers(0, 6), st.tuples(st.one_of(st.none(), st.integers(0, 9)),
                                     st.sampled_from([16, 5, 8]), st.integers(0, 9)),
        max_size=7))  # fmt: skip
    start = max(0, min(known, len(whole)))
    prev = data.draw(st.one_of(st.none(), st.integers(0, 9))) if start else None
    results = []
    for k in (native, rounds_mod._Twins):
        memo = dict(entries)
        out = list(range(100, 100 + start))
        j = k.memo_prefix(whole, start, memo, prev, out)
        out += [200 + i for i in range(len(whole) - len(out))]  # the chain's new hashes
        k.memo_store(whole, out, j, memo)
        results.append((j, out, memo))
    assert results[0] == results[1]


@pytest.mark.parametrize("k", [native, rounds_mod._Twins], ids=["kernel", "twin"])
def test_the_memo_gives_the_chain_it_holds_and_takes_the_new_blocks(k) -> None:  # type: ignore[no-untyped-def]
    whole = [(BLOCK, 1, 0, 16), (BLOCK, 2, 0, 16), (BLOCK, 3, 0, 16), None]
    memo = {1: (None, 16, 11), 2: (11, 16, 12), 3: (99, 16, 13)}  # 3 chained on another prev
    out: list[int] = []
    assert k.memo_prefix(whole, 0, memo, None, out) == 2
    assert out == [11, 12]
    out += [23, 24]
    k.memo_store(whole, out, 2, memo)
    assert memo == {1: (None, 16, 11), 2: (11, 16, 12), 3: (12, 16, 23)}


def test_the_memo_kernels_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="block_size > 0"):
        native.whole_parts(((BLOCK, 1, 0, 16),), 16, 0, BLOCK)
    with pytest.raises(TypeError, match="a part is a tuple"):
        native.whole_parts(((BLOCK, 1, 0),), 16, 16, BLOCK)
    with pytest.raises(TypeError, match="a memo entry is"):
        native.memo_prefix([(BLOCK, 1, 0, 16)], 0, {1: (None, 16)}, None, [])
    with pytest.raises(ValueError, match="one hash per block"):
        native.memo_store([(BLOCK, 1, 0, 16)], [], 0, {})
    with pytest.raises(TypeError):
        native.memo_store(((BLOCK, 1, 0, 16),), [5], 0, {})


# -- decode span ends ------------------------------------------------------------------
CONFIGS = [
    EngineConfig(),
    EngineConfig(speedup=1.7, decode_seq_ms=0.013, num_blocks=512),
    EngineConfig(decode_coeffs=(3.25, -1.1, 0.7), decode_floor_ms=2.5, block_size=32,
                 num_blocks=100),
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CONFIGS), st.integers(0, 300), st.integers(0, 4_000_000),
       st.integers(1, 300), st.integers(0, 10**15))
def test_decode_span_ends_equal_the_python_twin(cfg: EngineConfig, seqs: int, kv0: int, k: int,
                                                end: int) -> None:  # fmt: skip
    got = cost_mod.decode_span_ends(cfg, seqs, kv0, k, end)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cost_mod, "_kernels", None)
        want = cost_mod.decode_span_ends(cfg, seqs, kv0, k, end)
    assert got == want
    assert len(got) == k and got[0] == end


@settings(max_examples=500, deadline=None)
@given(st.floats(-50, 50), st.floats(-50, 50), st.floats(-50, 50), st.floats(0, 5),
       st.integers(1, 10**9), st.floats(0, 20), st.floats(0.01, 100), st.integers(0, 10**9),
       st.integers(0, 10**6), st.integers(2, 40))
def test_decode_ends_round_as_python_does(a, b, c, s, cap, floor, sp, kv0, dkv, k) -> None:
    ends, t = [0], 0
    for i in range(1, k):  # decode_steps_ns's loop, as written there
        u = min(1.0, (kv0 + i * dkv) / cap)
        t += round(max(floor, a * u * u + b * u + c + s) * 1e6 / sp)
        ends.append(t)
    assert native.decode_ends(0, k, kv0, dkv, a, b, c, s, cap, floor, sp) == ends


def test_decode_ends_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k >= 1"):
        native.decode_ends(0, 0, 0, 1, 1.0, 1.0, 1.0, 0.0, 10.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="speedup > 0"):
        native.decode_ends(0, 3, 0, 1, 1.0, 1.0, 1.0, 0.0, 10.0, 1.0, 0.0)


# -- hash-id tokens --------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, M64), min_size=1, max_size=6), st.integers(1, 600),
       st.data(), st.sampled_from([np.uint32, np.int64]),
       st.sampled_from([(0, 32000), (5, 151936), (0, 2**32), (2**31 + 5, 2**32)]))
def test_heads_equal_the_numpy_twin(packed: list[int],
                                    width: int, data, dtype, vocab) -> None:  # fmt: skip
    n = data.draw(st.integers(0, len(packed) * width))
    pool = TokenPool(seed=7, vocab_lo=vocab[0], vocab_hi=vocab[1])
    got = pool.heads_array(packed, width, n, dtype)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tokens_mod, "_kernels", None)
        want = pool.heads_array(packed, width, n, dtype)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_heads_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n exceeds"):
        native.heads([1], 4, 5, 0, 100, np.empty(5, np.uint32))
    with pytest.raises(ValueError, match="out must hold n"):
        native.heads([1], 4, 4, 0, 100, np.empty(3, np.uint32))
    with pytest.raises(ValueError, match="span <= 2"):
        native.heads([1], 4, 4, 0, 2**32 + 1, np.empty(4, np.int64))
    with pytest.raises(TypeError):  # read-only memory
        native.heads([1], 4, 4, 0, 100, bytes(16))


# -- record hashes (blake2b chains) and stream keys -------------------------------------
def _blake_chain(prev: int | None, data: bytes, step: int) -> list[int]:
    """The chain as written with hashlib: the reference of ``chain`` and ``chain_hashes``."""
    p = b"\x00" * 8 if prev is None else prev.to_bytes(8, "little")
    out = []
    for at in range(0, len(data), step):
        p = hashlib.blake2b(p + data[at : at + step], digest_size=8).digest()
        out.append(int.from_bytes(p, "little"))
    return out


# every input length around blake2b's 128-byte blocks (prev's 8 bytes come first)
@pytest.mark.parametrize("n", [*range(0, 270), 1016, 1024, 1032, 2040, 2048, 2056, 4096])
def test_chain_is_hashlibs_blake2b_at_every_block_edge(n: int) -> None:
    data = bytes((i * 131 + n) % 256 for i in range(n))
    for step in (1, 120, 128, 136, 2048):
        for prev in (None, 0, M64, 0x0123456789ABCDEF):
            assert native.chain(prev, data, step) == _blake_chain(prev, data, step)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(0, M64)), st.lists(st.integers(0, 2**32 - 1),
       max_size=700), st.integers(1, 80))  # fmt: skip
def test_chain_hashes_equal_the_python_twin(prev: int | None, ids: list[int], bs: int) -> None:
    got = hashing_mod.chain_hashes(prev, ids, bs)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hashing_mod, "_kernels", None)
        want = hashing_mod.chain_hashes(prev, ids, bs)
    assert got == want == _blake_chain(prev, np.array(ids, "<u4").tobytes(), 4 * bs)


def test_chain_refuses_what_the_twin_refuses() -> None:
    for prev in (-1, 2**64):  # int.to_bytes(8, "little") overflows in the twin
        with pytest.raises(OverflowError):
            native.chain(prev, b"abcd", 4)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(hashing_mod, "_kernels", None)
            with pytest.raises(OverflowError):
                hashing_mod.chain_hashes(prev, [1], 1)
    with pytest.raises(ValueError, match="step must be > 0"):
        native.chain(None, b"abcd", 0)
    with pytest.raises(ValueError, match="n exceeds"):
        native.chain_heads(None, [1], 4, 5, 0, 100)
    with pytest.raises(ValueError, match="span <= 2"):
        native.chain_heads(None, [1], 4, 4, 0, 2**32 + 1)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(0, M64)),
       st.lists(st.integers(0, M64), min_size=1, max_size=6), st.integers(1, 600), st.data(),
       st.sampled_from([(0, 32000), (5, 151936), (0, 2**32), (2**31 + 5, 2**32)]))
def test_chain_heads_equal_the_twin(prev: int | None, packed: list[int], width: int,
                                    data: st.DataObject, vocab: tuple[int, int]) -> None:
    n = data.draw(st.integers(0, len(packed) * width))
    pool = TokenPool(seed=3, vocab_lo=vocab[0], vocab_hi=vocab[1])
    got = pool.chain_heads(prev, packed, width, n)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tokens_mod, "_kernels", None)
        m.setattr(hashing_mod, "_kernels", None)
        want = pool.chain_heads(prev, packed, width, n)
    tokens = pool.heads_array(packed, width, n, np.uint32)
    assert got == want == _blake_chain(prev, tokens.tobytes(), 4 * width)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), st.sampled_from(["", "run-7", "é\x1f"]),
       st.lists(st.integers(-(2**70), 2**70), max_size=40))
def test_hash_id_keys_equal_the_python_twin(seed: int, salt: str, ids: list[int]) -> None:
    got = TokenPool(seed=seed, salt=salt)._hash_id_keys(ids)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tokens_mod, "_kernels", None)
        want = TokenPool(seed=seed, salt=salt)._hash_id_keys(ids)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tokens_mod, "_kernels", None)
        keys = [tokens_mod._stream_keys_once(seed, salt, "b", str(h)) for h in ids]
    assert got == want == [key << 32 | fnv for fnv, key in keys]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), st.sampled_from(["", "run-7", "é\x1f"]),
       st.sampled_from(["u", "p", "b", "t"]), st.text(max_size=40))
def test_stream_keys_equal_the_python_twin(seed: int, salt: str, ns: str, name: str) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tokens_mod, "_kernels", None)
        try:
            want = tokens_mod._stream_keys_once(seed, salt, ns, name)
        except UnicodeEncodeError:  # a lone surrogate
            want = None
    if want is None:  # refused alike
        with pytest.raises(UnicodeEncodeError):
            tokens_mod._stream_keys_once(seed, salt, ns, name)
    else:
        assert tokens_mod._stream_keys_once(seed, salt, ns, name) == want


def test_hash_id_keys_over_the_memo_bound_start_it_over(monkeypatch) -> None:
    pool = TokenPool(seed=1)
    monkeypatch.setattr(tokens_mod, "_BLOCK_KEYS_MAX", 4)
    first = pool._hash_id_keys([1, 2, 3])
    assert pool._hash_id_keys([3, 4, 5, 4]) == [*first[2:], *pool._new_block_keys([4, 5, 4])]
    assert sorted(pool._block_keys) == [3, 4, 5]  # cleared, then this call's ids
    assert pool._hash_id_keys([1, 2, 3]) == first


def test_compiled_0_runs_the_twins_everywhere() -> None:
    code = ("from workbench import kernels; from workbench.sim import kvindex; "
            "print(kernels.native is None, kvindex.COMPILED)")  # fmt: skip
    env = {**os.environ, "WORKBENCH_COMPILED": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    assert out.split() == ["True", "False"]


# -- JSON lines read back: when orjson's result is kept ----------------------------------
def _typed(x):  # type: ignore[no-untyped-def]
    """A value with every leaf's type: equal only if the two parses agree in kind too."""
    if isinstance(x, dict):
        return {k: _typed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_typed(v) for v in x]
    return (type(x).__name__, x)


_big = st.one_of(st.integers(-(2**64), 2**64), st.integers(-(2**80), 2**80),
                 st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64]))
_leaf = st.one_of(_big, st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                  st.none(), st.text(alphabet='0123456789"\\-.eE ab\u00e9', max_size=30))
_doc = st.recursive(_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(alphabet='0123456789"\\a', max_size=25),
                                                kids, max_size=5)), max_leaves=25)
_raw_number = st.builds(lambda m, f, e: f"{m}.{f}e{e}", st.integers(-(10**30), 10**30),
                        st.integers(0, 10**25), st.integers(-30, 30))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_doc.map(json.dumps), _raw_number), min_size=1, max_size=6),
       st.sampled_from([",", ", ", " ,\t"]))
def test_loads_line_keeps_orjsons_result_exactly_when_its_twin_does(parts, sep) -> None:  # type: ignore[no-untyped-def]
    line = ("[" + sep.join(parts) + "]").encode()
    got = rundir_mod.loads_line(line)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rundir_mod, "_kernels", None)
        want = rundir_mod.loads_line(line)
    assert _typed(got) == _typed(want) == _typed(json.loads(line))


def test_json_ints_fit_reads_the_edges_of_orjsons_range() -> None:
    fit = native.json_ints_fit
    assert fit(b'[18446744073709551615,-9223372036854775808,1234567890123456789]')
    assert not fit(b'[18446744073709551616]') and not fit(b'{"a":[-9223372036854775809]}')
    assert not fit(b'99999999999999999999') and not fit(b'-10000000000000000000')
    assert fit(b'["123456789012345678901234", 1.23456789012345678901234e5, 1e999999]')
    assert fit(b'{"k\\"18446744073709551616": "\\\\", "x": 0}')  # escapes: still a string
    assert not fit(b'{"k\\\\": 18446744073709551616}')  # an escaped backslash ends it


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=False), st.just(float("inf"))), max_size=80),
       st.floats(allow_nan=False))
def test_due_equals_the_python_twin(times: list[float], now: float) -> None:
    """A cluster's board read (``sim.cluster._due``): the workers with an event due."""
    from workbench.sim.cluster import _twin_due

    if native is None:
        pytest.skip("the kernels are not built")
    assert native.due(times, now) == _twin_due(times, now)


def test_due_refuses_bad_arguments() -> None:
    if native is None:
        pytest.skip("the kernels are not built")
    with pytest.raises(TypeError):
        native.due((1.0, 2.0), 1.0)  # a list only
    with pytest.raises(TypeError):
        native.due([1.0, "x"], 1.0)
