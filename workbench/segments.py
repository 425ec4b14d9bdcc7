"""Token sequences described by where their tokens come from, not by the tokens.

A ``Segments`` is a list of parts ``(kind, key, start, n)``: tokens ``start .. start+n-1``
of source ``(kind, key)``, in normal form, so block keys are equal exactly when the
prefixes' tokens are (docs/virtual-time.md, "Prompts as segments"). Keys are Python
``hash`` of int tuples (not salted: the same in every process) and a splitmix finaliser,
never ``-1`` (``sim.kvcache.NO_HASH``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from workbench.kernels import native as _native

#: source kinds (ints, so part tuples hash the same in every process)
UNIT, PREFIX, BLOCK, OUTPUT = 1, 2, 3, 4

Part = tuple[int, int, int, int]  # (kind, key, start, n)
Resolver = Callable[[int, int, int, int], list[int]]  # (kind, key, start, n) -> token ids

_ROOT = 0x5E65_3E47
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _normal(parts: Iterator[Part] | list[Part] | tuple[Part, ...]) -> list[Part]:
    out: list[Part] = []
    for p in parts:
        if p[3] <= 0:
            continue
        if out:
            k, key, start, n = out[-1]
            if k == p[0] and key == p[1] and start + n == p[2]:
                out[-1] = (k, key, start, n + p[3])
                continue
        out.append(p)
    return out


class Segments:
    """An immutable token sequence as parts; ``len`` is its token count."""

    __slots__ = ("_len", "parts")

    def __init__(self, parts: list[Part] | tuple[Part, ...] = (), *, normal: bool = False) -> None:
        self.parts: tuple[Part, ...] = tuple(parts if normal else _normal(parts))
        self._len = sum(p[3] for p in self.parts)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"Segments({len(self.parts)} parts, {self._len} tokens)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Segments) and self.parts == other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __add__(self, other: Segments) -> Segments:
        if not isinstance(other, Segments):
            return NotImplemented
        a, b = self.parts, other.parts
        if not a or not b:
            return self if other._len == 0 else other
        k, key, start, n = a[-1]
        f = b[0]
        if k == f[0] and key == f[1] and start + n == f[2]:  # only the seam can merge:
            parts = (*a[:-1], (k, key, start, n + f[3]), *b[1:])  # both sides are normal
        else:
            parts = a + b
        out = Segments.__new__(Segments)
        out.parts, out._len = parts, self._len + other._len
        return out

    def head(self, n: int) -> Segments:
        """The first ``n`` tokens (all of them if ``n`` is larger)."""
        if n >= self._len:
            return self
        out: list[Part] = []
        left = n
        for k, key, start, m in self.parts:
            if left <= 0:
                break
            out.append((k, key, start, min(m, left)))
            left -= m
        return Segments(out, normal=True)

    def common_prefix(self, other: Segments) -> int:
        """How many leading tokens the two sequences share (by description)."""
        n = 0
        for a, b in zip(self.parts, other.parts, strict=False):
            if a == b:
                n += a[3]
                continue
            if a[:3] == b[:3]:
                n += min(a[3], b[3])
            break
        return n

    def tokens(self, resolve: Resolver, start: int = 0, stop: int | None = None) -> list[int]:
        """Token ids ``start .. stop-1`` (default: all), each part through ``resolve``."""
        out: list[int] = []
        for part in self.slices(start, stop):
            out += resolve(*part)
        return out

    def slices(self, start: int = 0, stop: int | None = None) -> Iterator[Part]:
        """The parts of tokens ``start .. stop-1``, cut to that range."""
        stop = self._len if stop is None else min(stop, self._len)
        off = 0
        for k, key, s, m in self.parts:
            lo, hi = max(start, off), min(stop, off + m)
            if lo < hi:
                yield (k, key, s + lo - off, hi - lo)
            off += m
            if off >= stop:
                break

    def block_keys(self, block_size: int, first: int = 0, stop: int | None = None) -> list[int]:
        """Prefix keys of the full blocks ``first ..`` of the first ``stop`` tokens
        (default: all): key ``i`` stands for tokens ``0 .. (i+1)·block_size - 1``."""
        keyer = BlockKeyer(self, block_size)
        keys = keyer.upto(self._len if stop is None else min(stop, self._len))
        return keys[first:]


class BlockKeyer:
    """``Segments.block_keys`` in order, resumable: ``upto(n)`` returns the keys of the
    full blocks of the first ``n`` tokens not returned yet (a decode costs per block)."""

    __slots__ = ("_bs", "_e", "_i", "_n", "_off", "_parts", "_pk", "_run", "_top")

    def __init__(self, seg: Segments, block_size: int) -> None:
        self._parts, self._bs, self._n = seg.parts, block_size, len(seg)
        self._i = self._off = 0
        self._run = _ROOT
        self._e = block_size  # the end of the next block to key
        # the part key of the part holding that block end and the part's end, when the
        # last call stopped inside it (else ``_top`` is 0): a decode's next blocks
        self._pk = self._top = 0

    def upto(self, stop: int) -> list[int]:
        walk = self._walk(stop)
        if walk is None:
            return []
        pkeys, counts, e0 = walk
        if _native is not None:
            return _native.block_keys(pkeys, counts, e0, self._bs)
        return _twin_keys(pkeys, counts, e0, self._bs)

    def extend(self, out: array, stop: int) -> None:
        """``out.extend(self.upto(stop))`` for an ``array('q')``, with no Python int a key
        when compiled (docs/virtual-time.md, "Compiled kernels")."""
        walk = self._walk(stop)
        if walk is None:
            return
        pkeys, counts, e0 = walk
        if _native is not None:
            out.frombytes(_native.block_keys_bytes(pkeys, counts, e0, self._bs))
        else:
            out.extend(_twin_keys(pkeys, counts, e0, self._bs))

    def _walk(self, stop: int) -> tuple[Sequence[int], Sequence[int], int] | None:
        """Move past the full blocks of the first ``stop`` tokens not keyed yet: their
        part keys, the count of blocks under each and the first one's end (None: none).

        A first walk over all of a sequence's parts is remembered (``_WALKED``); a first
        walk of a sequence whose parts but its last two are such a sequence (a session's
        next round: the last round's prompt and output, then the new input and this
        round's output) starts after them, with their part keys and counts, instead of
        walking them again (docs/virtual-time.md, "Prompts as segments")."""
        bs = self._bs
        last = stop - stop % bs
        e = e0 = self._e
        if e > last:
            return None
        if last <= self._top:  # every new block ends inside the part the last call did
            self._e = last + bs
            return (self._pk,), ((last - e) // bs + 1,), e
        parts = self._parts
        i, off, run = self._i, self._off, self._run
        pkeys: list[int] = []
        counts: list[int] = []
        first = not i and e == bs
        if first and len(parts) > 2:  # the walk of parts[:-2], found by its last part
            n = self._n - parts[-1][3] - parts[-2][3]
            done = _WALKED.pop((len(parts) - 2, parts[-3], n, bs), None)
            # (every block it keyed is asked; the whole parts compared: exact)
            if done is not None and done[4] - bs <= last and done[0] == parts[:-2]:
                i, off, run, e = done[1:5]
                pkeys, counts = list(done[5]), list(done[6])
        walk = _twin_walk if _native is None else _native.walk
        i, off, run, e, pk, top = walk(parts, i, off, run, e, last, bs, pkeys, counts)
        self._pk, self._top = pk, top
        self._i, self._off, self._run, self._e = i, off, run, e
        if first and stop >= self._n and parts[0][0] != BLOCK:
            # walked whole from the start: a next round's prefix (its state is at a part
            # boundary: no block ends past ``stop``); not a hash-id row's (its next
            # prompt is hash-id blocks again, never this one carried)
            if len(_WALKED) >= _WALKED_MAX:
                _WALKED.clear()
            _WALKED[len(parts), parts[-1], self._n, bs] = (parts, i, off, run, e,
                                                           tuple(pkeys), tuple(counts))
        return pkeys, counts, e0


#: whole first walks by (part count, last part, token count, block size): the parts, the
#: state after the last block (part index, offset, running key, next block end) and the
#: walk's part keys and counts, each taken at most once (``BlockKeyer._walk``, which
#: compares the whole parts); a session's round is in flight meanwhile, so this holds
#: about the active sessions, cleared whole past the bound
_WALKED: dict[tuple[int, Part, int, int], tuple[tuple[Part, ...], int, int, int, int,
                                                tuple[int, ...], tuple[int, ...]]] = {}
_WALKED_MAX = 1 << 12


def _twin_walk(parts: tuple[Part, ...], i: int, off: int, run: int, e: int, last: int,
               bs: int, pkeys: list[int], counts: list[int]
               ) -> tuple[int, int, int, int, int, int]:  # fmt: skip
    """The Python twin of ``kernels.walk``: from part ``i`` (at token ``off``, running key
    ``run``) move the next block end ``e`` past every full block ending by ``last``,
    appending each part's key and block count; the new ``(i, off, run, e)`` and the key and
    end of the part it stopped inside (``top`` 0: it stopped at a part boundary)."""
    while e <= last:
        k, key, s, m = parts[i]
        top = off + m
        if e <= top:
            c = (min(top, last) - e) // bs + 1
            pk = hash((run, k, key, s))
            pkeys.append(pk)
            counts.append(c)
            e += c * bs
            if e <= top:  # stopped inside this part
                return i, off, run, e, pk, top
        run = hash((run, k, key, s, m))
        off = top
        i += 1
    return i, off, run, e, 0, 0


def _twin_keys(pkeys: Sequence[int], counts: Sequence[int], e0: int, bs: int) -> list[int]:
    """The Python twin of ``kernels.block_keys``: the keys of ``counts[i]`` blocks under
    part key ``pkeys[i]``, the first ending at ``e0``."""
    n = sum(counts)
    if n < 8:
        out: list[int] = []
        end = e0
        for pk, c in zip(pkeys, counts, strict=True):
            for _ in range(c):
                out.append(_mix_one(pk, end))
                end += bs
        return out
    ends = np.arange(e0, e0 + n * bs, bs, dtype=np.uint64)
    pk_arr = np.array([pk & _M64 for pk in pkeys], dtype=np.uint64)
    return _mix(np.repeat(pk_arr, counts), ends)


_M64 = (1 << 64) - 1


def _mix(part_keys: np.ndarray, ends: np.ndarray) -> list[int]:
    """splitmix64 of ``part_key + end·φ`` per block end, as int64 (never -1)."""
    z = ends * _GOLD
    z += part_keys
    z ^= z >> _S30
    z *= _MIX1
    z ^= z >> _S27
    z *= _MIX2
    z ^= z >> _S31
    v = z.view(np.int64)
    v[v == -1] = -2
    out: list[int] = v.tolist()
    return out


def _mix_one(part_key: int, end: int) -> int:
    """``_mix`` of one block, in Python ints (a decode's one new block)."""
    z = ((part_key & _M64) + end * 0x9E3779B97F4A7C15) & _M64
    z ^= z >> 30
    z = z * 0xBF58476D1CE4E5B9 & _M64
    z ^= z >> 27
    z = z * 0x94D049BB133111EB & _M64
    z ^= z >> 31
    v = z - (1 << 64) if z >> 63 else z
    return -2 if v == -1 else v


__all__ = ["BLOCK", "OUTPUT", "PREFIX", "UNIT", "BlockKeyer", "Part", "Resolver", "Segments"]
