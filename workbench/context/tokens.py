"""Deterministic synthetic prompt tokens, as ids or as parts (``workbench.segments``).

The workbench replays a workload's token *shape*, not its text: prompts are synthetic
ids sent as token-id prompts. The rules (no accidental sharing, determinism, the salt,
the id range) and the generator: docs/context-policy.md, "Synthetic tokens".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from workbench.context.hashing import FNV32_PRIME, chain_hashes, fnv1a_32
from workbench.kernels import native as _kernels
from workbench.segments import BLOCK, PREFIX, UNIT, Part, Segments

DEFAULT_VOCAB_LO = 1000
DEFAULT_VOCAB_HI = 31000

_M32 = np.uint64(0xFFFFFFFF)
_P = np.uint64(FNV32_PRIME)
_P32 = np.uint32(FNV32_PRIME)
_S30, _S27, _S31, _S32 = (np.uint64(s) for s in (30, 27, 31, 32))
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)

# Stream namespaces: a unit stream can never be named like the tail or a block.
_NS_UNIT, _NS_PREFIX, _NS_BLOCK, _NS_TAIL = "u", "p", "b", "t"


@lru_cache(maxsize=256)
def _ident_head(seed: int, salt: str, namespace: str) -> tuple[bytes, int]:
    """A stream id's part before its name (UTF-8), and the FNV-1a state after it."""
    head = f"{seed}\x1f{salt}\x1f{namespace}\x1f" if salt else f"{seed}\x1f{namespace}\x1f"
    return head.encode(), fnv1a_32(head)


def _stream_keys_once(seed: int, salt: str, namespace: str, name: str) -> tuple[int, int]:
    """``(fnv_seed, finalizer_key)`` of one stream (no salt: the unsalted key): the FNV-1a
    of the stream id continued over its name from the head's state (a new hash id's
    keys, per id of a Mooncake row, hash only its digits); the compiled ``stream_keys``
    where the kernels run (a unit's stream, once a round)."""
    head, state = _ident_head(seed, salt, namespace)
    if _kernels is not None:
        packed: int = _kernels.stream_keys(head, state, (name,))[0]
        return packed & _LOW32, packed >> 32
    key = int.from_bytes(hashlib.blake2b(head + name.encode(), digest_size=4).digest(), "little")
    return fnv1a_32(name, state), key


_stream_keys = lru_cache(maxsize=65536)(_stream_keys_once)  # hash-id blocks, shared prefixes


def _generate(
    seeds: np.ndarray | np.uint64,
    keys: np.ndarray | np.uint64,
    positions: np.ndarray,
    lo: int,
    span: int,
) -> np.ndarray:
    """Tokens (int64) for stream seeds, stream keys and stream positions (uint64, broadcast)."""
    turn = positions >> _S32
    pos = positions & _M32
    x = ((((seeds ^ turn) * _P) & _M32) ^ pos) * _P & _M32
    return _finish_in_place((keys << _S32) | x, lo, span).astype(np.int64)  # fast .tolist()


_LOW32 = 0xFFFFFFFF
_M64_INT = (1 << 64) - 1
_BLOCK_KEYS_MAX = 1 << 21  # memoized hash-id keys per pool (~200 MB at most), then start over


def _generate_run(seed: int, key: int, start: int, n: int, lo: int, span: int) -> np.ndarray:
    """``_generate`` for positions ``start .. start+n-1`` of one turn (``start >> 32``
    the same for all): the turn's part is folded into one scalar and every step
    runs in place on one array, a third faster for a prompt of a few hundred tokens."""
    a = ((seed ^ (start >> 32)) * FNV32_PRIME) & _LOW32
    z = np.arange(start & _LOW32, (start & _LOW32) + n, dtype=np.uint64)
    z ^= np.uint64(a)
    z *= _P
    z &= _M32
    z |= np.uint64(key << 32)
    return _finish_in_place(z, lo, span).astype(np.int64)


def _finish_in_place(z: np.ndarray, lo: int, span: int) -> np.ndarray:
    """``_generate``'s keyed finalizer and range reduction on ``key << 32 | x``, in place."""
    z ^= z >> _S30
    z *= _MIX1
    z ^= z >> _S27
    z *= _MIX2
    z ^= z >> _S31
    z >>= _S32
    z *= np.uint64(span)
    z >>= _S32
    z += np.uint64(lo)
    return z


def _head_grid(packed: Sequence[int], width: int) -> np.ndarray:
    """``(len(packed), width)`` uint64: row i is ``key << 32 | x`` of tokens ``0 ..
    width-1`` of source ``packed[i]`` (``key << 32 | fnv``), for ``_finish_in_place``:
    positions of turn 0 all, one broadcast row of them instead of an index per token."""
    kf = np.array(packed, dtype=np.uint64)
    x = np.bitwise_xor.outer(
        ((kf & _M32) * _P).astype(np.uint32), np.arange(width, dtype=np.uint32)
    )
    x *= _P32  # mod 2**32 by its type
    z = x.astype(np.uint64)
    z |= (kf >> _S32 << _S32)[:, None]
    return z


_KERNEL_DTYPES = (np.dtype(np.uint32), np.dtype(np.int64))  # what ``_kernels.heads`` writes
_POOL_MAX = 1 << 17  # vocabularies up to this share one set of int objects
_pools: dict[int, np.ndarray] = {}


def _as_list(tokens: np.ndarray, vocab_hi: int) -> list[int]:
    """``tokens.tolist()``, with every id one shared ``int`` object per value when the
    vocabulary is small: no 10k fresh ints per prompt, and lists the cyclic GC and the
    engine's hashing read from a few cache-resident objects (docs/virtual-time.md,
    "What a virtual replay costs")."""
    if vocab_hi > _POOL_MAX:
        out: list[int] = tokens.tolist()
        return out
    pool = _pools.get(vocab_hi)
    if pool is None:
        pool = _pools[vocab_hi] = np.array(list(range(vocab_hi)), dtype=object)
    shared: list[int] = pool[tokens].tolist()
    return shared


class TokenPool:
    """Synthetic token source for one run, one cursor per unit stream; not thread-safe
    (one event loop). Pools with the same ``(vocab_lo, vocab_hi, seed, salt)`` agree."""

    def __init__(
        self,
        vocab_lo: int = DEFAULT_VOCAB_LO,
        vocab_hi: int = DEFAULT_VOCAB_HI,
        seed: int = 0,
        salt: str = "",
    ) -> None:
        if not 0 <= vocab_lo < vocab_hi <= 2**32:
            raise ValueError(f"need 0 <= vocab_lo < vocab_hi <= 2**32, got {vocab_lo}, {vocab_hi}")
        self.vocab_lo = vocab_lo
        self.vocab_hi = vocab_hi
        self.seed = seed
        self.salt = salt
        self._cursors: dict[str, int] = {}
        self._block_keys: dict[int, int] = {}  # hash id -> its stream's key << 32 | fnv seed
        self._last: tuple[list[int], np.ndarray] | None = None  # see array_of

    def _packed(self, namespace: str, name: str) -> int:
        """A stream's ``key << 32 | fnv``, as a part carries it (memoized but for a unit's
        own stream, looked up once per round: caching those only filled the cache)."""
        keys = _stream_keys_once if namespace == _NS_UNIT else _stream_keys
        fnv, key = keys(self.seed, self.salt, namespace, name)
        return key << 32 | fnv

    def _draw(self, packed: int, start: int, n: int) -> np.ndarray:
        """Tokens ``start .. start+n-1`` of the stream ``packed`` (int64)."""
        if n < 0:
            raise ValueError(f"token count must be >= 0, got {n}")
        fnv, key = packed & _LOW32, packed >> 32
        span = self.vocab_hi - self.vocab_lo
        if (start & _LOW32) + n <= 1 << 32:  # one turn: the usual case, done in place
            return _generate_run(fnv, key, start, n, self.vocab_lo, span)
        positions = np.arange(start, start + n, dtype=np.uint64)
        return _generate(np.uint64(fnv), np.uint64(key), positions, self.vocab_lo, span)

    def fresh(self, stream: str, n: int) -> list[int]:
        """The next ``n`` tokens of unit stream ``stream``; advances its cursor (streams
        never share content; successive calls continue where the last one stopped)."""
        return self.resolve(*self.fresh_part(stream, n))

    def forget(self, stream: str) -> None:
        """Drop ``stream``'s cursor (its unit has ended; a run of 100k units otherwise
        kept 100k cursors). A later ``fresh`` on it would start over at token 0."""
        self._cursors.pop(stream, None)

    def position(self, stream: str) -> int:
        """How many tokens ``fresh`` has handed out for ``stream`` so far."""
        return self._cursors.get(stream, 0)

    def shared_prefix(self, key: str, n: int) -> list[int]:
        """The first ``n`` tokens of shared-prefix ``key`` (a system prompt sessions really
        share, keyed ``(provider, model, project)`` as one string): equal keys, equal
        tokens; every call starts at token 0, so a longer call extends a shorter one."""
        return self.resolve(*self.prefix_part(key, n))

    def block(self, hash_id: int, block_size: int) -> list[int]:
        """One synthetic block for a hash id of any size: same id, same tokens."""
        return self.resolve(BLOCK, self._hash_id_keys([hash_id])[0], 0, block_size)

    def prompt_from_hash_ids(
        self,
        hash_ids: Sequence[int],
        input_len: int,
        block_size: int,
        *,
        fill_stream: str | None = None,
    ) -> list[int]:
        """A prompt of exactly ``input_len`` tokens: the blocks of ``hash_ids``, the last
        cut to length; a tail the ids do not cover (floor-rounded traces) comes from
        ``fresh(fill_stream, ...)`` (``_hash_id_cover``)."""
        n_blocks, covered, missing = _hash_id_cover(hash_ids, input_len, block_size, fill_stream)
        flat = self.heads_array(self._hash_id_keys(hash_ids[:n_blocks]), block_size, covered)
        out: list[int] = _as_list(flat, self.vocab_hi)
        self._last = (out, flat)
        if missing:
            out.extend(self.fresh(fill_stream or "", missing))
        return out

    def array_of(self, prompt: list[int]) -> np.ndarray | None:
        """The int64 array of ``prompt`` if it is the list the last
        ``prompt_from_hash_ids`` call returned (unchanged in length), else None: a
        caller that packs the prompt's ids again (record block hashes) skips
        converting 10k Python ints back."""
        last = self._last
        if last is not None and last[0] is prompt and len(prompt) == len(last[1]):
            return last[1]
        return None

    def _hash_id_keys(self, hash_ids: Sequence[int]) -> list[int]:
        """The packed stream keys (``key << 32 | fnv``) of hash ids' blocks, memoized in a
        plain dict (``lru_cache``'s four-argument key cost more than the tokens); the ids
        not in it computed together (``_new_block_keys``)."""
        memo = self._block_keys
        try:
            return [memo[h] for h in hash_ids]
        except KeyError:
            pass
        new = [h for h in dict.fromkeys(hash_ids) if h not in memo]
        if len(memo) + len(new) > _BLOCK_KEYS_MAX:
            memo.clear()
            new = list(dict.fromkeys(hash_ids))
        memo.update(zip(new, self._new_block_keys(new), strict=True))
        return [memo[h] for h in hash_ids]

    def _new_block_keys(self, hash_ids: Sequence[int]) -> list[int]:
        """``_packed(_NS_BLOCK, str(h))`` of each hash id: one call of the compiled
        ``stream_keys`` (workbench/kernels.c), or ``_stream_keys_once`` per id."""
        if _kernels is not None:
            head, state = _ident_head(self.seed, self.salt, _NS_BLOCK)
            keys: list[int] = _kernels.stream_keys(head, state, hash_ids)
            return keys
        out = []
        for h in hash_ids:
            fnv, key = _stream_keys_once(self.seed, self.salt, _NS_BLOCK, str(h))
            out.append(key << 32 | fnv)
        return out

    def chain_heads(self, prev: int | None, packed: Sequence[int], width: int, n: int
                    ) -> list[int]:
        """``chain_hashes(prev, heads_array(packed, width, n, np.uint32), width)``: the
        record hashes of whole hash-id blocks, in one compiled call that never builds the
        token array (``_kernels.chain_heads``) where the kernels run."""
        if _kernels is not None:
            hashes: list[int] = _kernels.chain_heads(
                prev, packed, width, n, self.vocab_lo, self.vocab_hi - self.vocab_lo
            )
            return hashes
        return chain_hashes(prev, self.heads_array(packed, width, n, np.uint32), width)

    def heads_array(
        self, packed: Sequence[int], width: int, n: int, dtype: type = np.int64
    ) -> np.ndarray:
        """The first ``n`` of the tokens ``0 .. width-1`` of each source ``packed[i]``
        (``key << 32 | fnv``, as in a part) concatenated, as ``dtype`` (``np.uint32``: as
        record hashing packs them): hash-id blocks, the last one cut, generated as one
        grid in place (``_generate_run``'s steps on a 2-D array)."""
        span = self.vocab_hi - self.vocab_lo
        if _kernels is not None and np.dtype(dtype) in _KERNEL_DTYPES:
            out: np.ndarray = np.empty(n, dtype)
            _kernels.heads(packed, width, n, self.vocab_lo, span, out)
            return out
        z = _finish_in_place(_head_grid(packed, width), self.vocab_lo, span)
        return z.ravel()[:n].astype(dtype)

    # -- the same tokens as parts (workbench.segments): no token materialised ----------
    def fresh_part(self, stream: str, n: int) -> Part:
        """``fresh(stream, n)`` as a part: advances the cursor, generates nothing."""
        if n < 0:
            raise ValueError(f"token count must be >= 0, got {n}")
        start = self._cursors.get(stream, 0)
        self._cursors[stream] = start + n
        return (UNIT, self._packed(_NS_UNIT, stream), start, n)

    def prefix_part(self, key: str, n: int) -> Part:
        """``shared_prefix(key, n)`` as a part."""
        return (PREFIX, self._packed(_NS_PREFIX, key), 0, n)

    def segments_from_hash_ids(
        self, hash_ids: Sequence[int], input_len: int, block_size: int,
        *, fill_stream: str | None = None,
    ) -> Segments:  # fmt: skip
        """``prompt_from_hash_ids`` as ``Segments`` (same tokens once resolved, same errors):
        one part per hash id, the last one cut, then the unhashed fill if any. The parts
        are normal as made (none empty; two blocks never join: each starts at its token
        0; the fill is another kind), so ``Segments`` takes them as they are."""
        n_blocks, covered, missing = _hash_id_cover(hash_ids, input_len, block_size, fill_stream)
        keys = self._hash_id_keys(hash_ids[:n_blocks])
        parts: list[Part] = [(BLOCK, k, 0, block_size) for k in keys]
        if parts:  # only the last block can be cut
            parts[-1] = (BLOCK, parts[-1][1], 0, covered - (n_blocks - 1) * block_size)
        if missing:
            parts.append(self.fresh_part(fill_stream or "", missing))
        return Segments(parts, normal=True)

    def resolve(self, kind: int, packed: int, start: int, n: int) -> list[int]:
        """The token ids of a part of this pool's sources (``Segments.tokens``)."""
        return _as_list(self.resolve_array(kind, packed, start, n), self.vocab_hi)

    def resolve_array(self, kind: int, packed: int, start: int, n: int) -> np.ndarray:
        """``resolve`` as an int64 array (for hashing: no Python int per token)."""
        if kind not in (UNIT, PREFIX, BLOCK):
            raise ValueError(f"part kind {kind} is not a token pool's source")
        return self._draw(packed, start, n)

    def resolve_parts_array(self, parts: Sequence[Part], dtype: type = np.int64) -> np.ndarray:
        """``resolve_array`` of each part, concatenated, in one vectorised pass: the
        record hashes of a Mooncake row's new hash-id blocks draw them at once, not
        one small array per block (docs/virtual-time.md, "Record hashes"). ``dtype``
        ``np.uint32`` gives the ids as record hashing packs them (no range check)."""
        for kind, *_ in parts:
            if kind not in (UNIT, PREFIX, BLOCK):
                raise ValueError(f"part kind {kind} is not a token pool's source")
        span = self.vocab_hi - self.vocab_lo
        if any((p[2] & _LOW32) + p[3] > 1 << 32 for p in parts):  # a part crosses a turn
            counts = np.array([p[3] for p in parts], dtype=np.int64)
            which = np.repeat(np.arange(len(parts)), counts)
            packed = np.array([p[1] for p in parts], dtype=np.uint64)
            first = np.cumsum(counts) - counts
            positions = np.arange(int(counts.sum()), dtype=np.uint64)
            positions += (np.array([p[2] for p in parts], dtype=np.uint64)
                          - first.astype(np.uint64))[which]  # fmt: skip
            out = _generate((packed & _M32)[which], (packed >> _S32)[which], positions,
                            self.vocab_lo, span)
            return out.astype(dtype)
        # ``_generate_run`` of every part on one array: each part's turn folded into one
        # scalar, every step in place
        sizes = [p[3] for p in parts]
        z = np.arange(sum(sizes), dtype=np.uint64)
        start = 0
        shift: list[int] = []
        for (_, _, s, _), n in zip(parts, sizes, strict=True):
            shift.append(((s & _LOW32) - start) & _M64_INT)  # position in part → in source
            start += n
        z += np.repeat(np.array(shift, dtype=np.uint64), sizes)
        z ^= np.repeat(np.array([((p[1] & _LOW32 ^ p[2] >> 32) * FNV32_PRIME) & _LOW32
                                 for p in parts], dtype=np.uint64), sizes)  # fmt: skip
        z *= _P
        z &= _M32
        z |= np.repeat(np.array([p[1] >> 32 << 32 for p in parts], dtype=np.uint64), sizes)
        return _finish_in_place(z, self.vocab_lo, span).astype(dtype)

    def tail(self, n: int, *, nonce: str = "") -> list[int]:
        """``n`` tokens from a reserved stream no unit, prefix or block uses, for the
        prefix-cache preflight probe: the same ``(n, nonce)`` gives the same tokens (sent
        twice, the second must hit); another ``nonce``, a prompt the server has not seen."""
        return _as_list(self._draw(self._packed(_NS_TAIL, nonce), 0, n), self.vocab_hi)


def run_pool(seed: int, token_salt: str | None, run_id: str) -> TokenPool:
    """The token pool of run ``run_id`` (every process of a sharded run builds the same):
    ``backend.token_salt`` none, ``"run"`` (the run id is the salt), or the salt itself."""
    salt = run_id if token_salt == "run" else token_salt or ""
    return TokenPool(seed=seed, salt=salt)


__all__ = ["DEFAULT_VOCAB_HI", "DEFAULT_VOCAB_LO", "TokenPool", "run_pool"]


def _hash_id_cover(hash_ids: Sequence[int], input_len: int, block_size: int,
                   fill_stream: str | None) -> tuple[int, int, int]:
    """A prompt from hash ids, as ids or as parts: ``(blocks used, tokens they cover,
    tokens of unhashed tail)``; a tail without a ``fill_stream`` is an error, not a
    silently short prompt."""
    if input_len < 0 or block_size <= 0:
        raise ValueError(f"bad input_len={input_len} / block_size={block_size}")
    n_blocks = min(len(hash_ids), -(-input_len // block_size))
    covered = min(n_blocks * block_size, input_len)
    if input_len > covered and fill_stream is None:
        raise ValueError(f"{len(hash_ids)} hash ids of {block_size} tokens cover {covered} < "
                         f"input_len {input_len}; pass fill_stream= for the unhashed tail")
    return n_blocks, covered, input_len - covered
