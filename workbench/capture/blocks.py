"""Prompt token ids → salted chained block digests → the file-local ``hash_ids`` of the
format (docs/capture.md, "Token ids and hash ids").
"""

from __future__ import annotations

import hashlib
import os
import secrets
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from workbench import safe_write as safe

#: tokens per hashed block: the captured format's ``block_size``
BLOCK_SIZE = 64
DIGEST_BYTES = 16
SALT_BYTES = 32


class Salt:
    """The capture's hashing key: random, in memory; ``write`` saves it (0600)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(SALT_BYTES)

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        fd = safe.open_fd(p, mode=0o600)  # created anew, never through a link
        with os.fdopen(fd, "w") as f:
            f.write(self.key.hex() + "\n")
        return p

    def digest(self, data: bytes, previous: bytes = b"") -> bytes:
        return hashlib.blake2b(previous + data, digest_size=DIGEST_BYTES, key=self.key).digest()


def block_digests(salt: Salt, ids: Sequence[int], prompt_tokens: int,
                  after: Sequence[bytes] = ()) -> Iterator[bytes]:
    """One digest per full block of a ``prompt_tokens``-token prompt (docs/capture.md);
    ``after``: the digests of the prompt's first blocks, known already (``ids`` are the
    ids that follow them)."""
    want = prompt_tokens // BLOCK_SIZE
    known = after[:want]
    yield from known
    want -= len(known)
    have = min(want, len(ids) // BLOCK_SIZE)
    got = 0
    for digest in chained_blocks(salt, ids[: have * BLOCK_SIZE], known[-1] if known else b""):
        got += 1
        yield digest
    for _ in range(want - got):
        yield secrets.token_bytes(DIGEST_BYTES)


def chained_blocks(salt: Salt, ids: Sequence[int], previous: bytes = b"") -> Iterator[bytes]:
    """The digests of the full blocks of ``ids``, chained after ``previous``; none when
    ``ids`` are not token ids (no block is claimed shared)."""
    have = len(ids) // BLOCK_SIZE
    try:
        packed = array("q", ids[: have * BLOCK_SIZE]).tobytes()
    except (TypeError, OverflowError):
        return
    step = BLOCK_SIZE * 8
    for i in range(have):
        previous = salt.digest(packed[i * step:(i + 1) * step], previous)
        yield previous


class LocalIds:
    """One file's numbering of block digests: 1, 2, 3… in first-seen order."""

    def __init__(self) -> None:
        self._table: dict[bytes, int] = {}

    def number(self, digests: Iterable[bytes]) -> list[int]:
        table = self._table
        out = []
        for d in digests:
            n = table.get(d)
            if n is None:
                n = table[d] = len(table) + 1
            out.append(n)
        return out
