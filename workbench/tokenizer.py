"""A deterministic word-level tokenizer built in code: one made-up word an id, so
``encode(decode(ids)) == ids`` and N words are N tokens.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Sequence

VOCAB_SIZE = 32_000
SPECIALS = ("<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
            "<|end|>")
FIRST_ORDINARY = len(SPECIALS)
NUM_ORDINARY = VOCAB_SIZE - FIRST_ORDINARY
_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _ONSETS for v in _VOWELS]  # 70


def _word(index: int) -> str:
    """Ordinary word ``index`` (0-based): little-endian syllables, 1–3 of them."""
    n = len(_SYLLABLES)
    parts = [_SYLLABLES[index % n]]
    index //= n
    while index:
        index -= 1
        parts.append(_SYLLABLES[index % n])
        index //= n
    return "".join(parts)


class WordTokenizer:
    """id ↔ word over a fixed vocabulary of ``VOCAB_SIZE`` ids."""

    def __init__(self) -> None:
        self._words = list(SPECIALS) + [_word(i) for i in range(NUM_ORDINARY)]
        self._ids = {w: i for i, w in enumerate(self._words)}
        if len(self._ids) != VOCAB_SIZE:  # pragma: no cover - construction invariant
            raise RuntimeError("tokenizer vocabulary has duplicate words")

    def token_id(self, word: str) -> int:
        tid = self._ids.get(word)
        if tid is not None:
            return tid
        return FIRST_ORDINARY + zlib.crc32(word.encode()) % NUM_ORDINARY

    def encode(self, text: str) -> list[int]:
        return [self.token_id(w) for w in text.split()]

    def decode(self, ids: Iterable[int]) -> str:
        words = self._words
        return " ".join(words[i] if 0 <= i < VOCAB_SIZE else "<unk>" for i in ids)

    def decode_delta(self, ids: Sequence[int]) -> str:
        """Text of a streamed delta: each word with a leading space, so deltas concatenate."""
        return " " + self.decode(ids) if ids else ""


@functools.cache
def get_tokenizer() -> WordTokenizer:
    """The shared tokenizer (built once, ~30 ms)."""
    return WordTokenizer()


def output_token(base: int, position: int) -> int:
    """Deterministic ordinary output id for a request (``base``) at ``position``."""
    x = (base + position * 0x9E3779B1) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return FIRST_ORDINARY + x % NUM_ORDINARY


def request_base(request_id: str, seed: int) -> int:
    """Seed of a request's output ids: stable across processes (crc32, not ``hash``)."""
    return zlib.crc32(f"{seed}:{request_id}".encode())


def output_tokens(base: int, count: int, start: int = 0) -> list[int]:
    """``[output_token(base, i) for i in range(start, start + count)]``, vectorised for
    long outputs (the engine draws a request's whole output up front)."""
    if count < 64:
        return [output_token(base, i) for i in range(start, start + count)]
    import numpy as np  # lazy: importing the engine stays light

    pos = np.arange(start, start + count, dtype=np.uint64)
    x = (pos * np.uint64(0x9E3779B1) + np.uint64(base)) & np.uint64(0xFFFFFFFF)
    x = ((x ^ (x >> np.uint64(15))) * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(12)
    out: list[int] = (x % np.uint64(NUM_ORDINARY) + np.uint64(FIRST_ORDINARY)).tolist()
    return out
