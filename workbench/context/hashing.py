"""Stable hashes: 32-bit FNV-1a for stream seeds, chained block sequence hashes for prompts
(docs/context-policy.md, "Block hashes"). Never Python's ``hash()``: these end up in
records and are compared across processes and machines.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence

import numpy as np

from workbench.kernels import native as _kernels

FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF
_ROOT = b"\x00" * 8  # the "previous hash" of the first block


def fnv1a_32(data: str | bytes, state: int = FNV32_OFFSET) -> int:
    """32-bit FNV-1a of ``data`` (a ``str`` as UTF-8); ``state`` continues a hash:
    ``fnv1a_32(b, fnv1a_32(a)) == fnv1a_32(a + b)``. Stream ids are short: a plain loop."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    h = state
    for byte in raw:
        h = ((h ^ byte) * FNV32_PRIME) & _MASK32
    return h


def _chain(prev: bytes, block: bytes) -> bytes:
    """One chained 64-bit block hash: blake2b over the previous digest + the block bytes."""
    return hashlib.blake2b(prev + block, digest_size=8).digest()


#: ``array("I")`` packs little-endian uint32 here in a C loop (docs/design-notes.md)
_ARRAY_U32 = array("I").itemsize == 4 and sys.byteorder == "little"
_U32 = np.dtype("<u4")


def _u32_bytes(token_ids: Sequence[int] | np.ndarray) -> bytes:
    """Token ids as little-endian uint32 bytes; ``ValueError`` outside ``[0, 2**32)``."""
    if _ARRAY_U32 and not isinstance(token_ids, np.ndarray):
        try:
            return array("I", token_ids).tobytes()
        except OverflowError:
            raise ValueError("token ids must be in [0, 2**32)") from None
        except TypeError:
            pass  # not plain ints (floats, numpy scalars of odd kinds): the numpy path decides
    if isinstance(token_ids, np.ndarray) and token_ids.dtype == _U32:
        return token_ids.tobytes()  # in range by its type (a token pool's draw)
    arr = np.asarray(token_ids, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > _MASK32):
        raise ValueError("token ids must be in [0, 2**32)")
    return arr.astype("<u4").tobytes()


def block_hashes(
    token_ids: Sequence[int] | np.ndarray, block_size: int, *, known: Sequence[int] = ()
) -> list[int]:
    """Chained 64-bit hashes of ``token_ids`` (each in ``uint32``) cut into ``block_size``
    blocks, a trailing partial block included: ``ceil(len / block_size)`` of them.

    ``known``: hashes of leading *full* blocks the caller guarantees unchanged (a
    session's carried prefix); only the blocks after them are hashed, so a growing
    conversation costs O(new tokens) per round.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    k = len(known)
    if k and k * block_size > len(token_ids):
        raise ValueError(f"{k} known full blocks exceed {len(token_ids)} tokens")
    tail = token_ids[k * block_size :] if k else token_ids
    return [*known, *chain_hashes(int(known[-1]) if k else None, tail, block_size)]


def chain_hashes(
    prev: int | None, token_ids: Sequence[int] | np.ndarray, block_size: int
) -> list[int]:
    """``block_hashes``'s chain continued: the hashes of ``token_ids`` cut into
    ``block_size`` blocks, the first chained to hash ``prev`` (None: the first block
    of a prompt). ``block_hashes(a + b, bs) == block_hashes(a, bs) + chain_hashes(
    block_hashes(a, bs)[-1], b, bs)`` when ``a`` is whole blocks."""
    raw = _u32_bytes(token_ids)
    step = 4 * block_size
    if _kernels is not None:  # the same blake2b chain in one C call (workbench/kernels.c)
        hashes: list[int] = _kernels.chain(prev, raw, step)
        return hashes
    digests: list[bytes] = []
    p = _ROOT if prev is None else int(prev).to_bytes(8, "little")
    for start in range(0, len(raw), step):
        p = _chain(p, raw[start : start + step])
        digests.append(p)
    return [int.from_bytes(d, "little") for d in digests]


__all__ = ["FNV32_OFFSET", "FNV32_PRIME", "block_hashes", "chain_hashes", "fnv1a_32"]
