"""Token counts of text datasets (``sharegpt``, ``aiperf-single-turn``, ``aiperf-multi-turn``):
the replay sends token shape, so a text's length must be counted in tokens.

Two counters (docs/trace-formats.md, "Text datasets: token counts"): a local Hugging Face
``tokenizer.json`` read with the ``tokenizers`` package (the ``text`` extra; never a
download), or, when none is given, the project's word count (``str.split``), an
approximation said in the workload's ``meta["reader"]`` and by ``workbench stats``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from workbench.errors import ConfigError
from workbench.traces._io import open_trace

#: what the default counter is, said wherever its counts are shown (never silently)
WORDS = ("words: whitespace-separated words (the project's word tokenizer), an approximation "
         "of a model's token count (a BPE tokenizer splits words and punctuation into more "
         "tokens); tokenizer=PATH/tokenizer.json counts exactly")


_BATCH = 256  # texts encoded at once


class TextCounter(Protocol):
    """Counts each text's tokens (no special tokens, no chat template)."""

    def counts(self, texts: Sequence[str]) -> list[int]: ...

    def describe(self) -> dict[str, Any]: ...


class WordCounter:
    """The default: ``len(text.split())``, as ``workbench.tokenizer.WordTokenizer`` encodes."""

    def counts(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def describe(self) -> dict[str, Any]:
        return {"token_count": WORDS}


class HFTokenizerCounter:
    """A Hugging Face ``tokenizer.json`` file read by ``tokenizers`` (a Rust library; one
    batch call counts many texts on every core)."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(
                "trace option tokenizer= needs the 'tokenizers' package: pip install "
                "'workbench-replay[text]' (or pip install tokenizers)") from None
        data = _tokenizer_bytes(path)
        try:
            self._tok = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception; UnicodeDecodeError too
            raise ConfigError(f"trace option tokenizer: {path} is not a Hugging Face "
                              f"tokenizer.json ({str(exc)[:200]})") from None
        self._path = path
        self._sha256 = hashlib.sha256(data).hexdigest()

    def counts(self, texts: Sequence[str]) -> list[int]:
        # a batch at a time: an Encoding holds ids, offsets and token strings, and all of a
        # dataset's at once took 7.4 GB for a 100 MB file (docs/trace-formats.md)
        out: list[int] = []
        for at in range(0, len(texts), _BATCH):
            batch = list(texts[at: at + _BATCH])
            out.extend(len(e) for e in self._tok.encode_batch(batch, add_special_tokens=False))
        return out

    def describe(self) -> dict[str, Any]:
        return {"token_count": "tokenizer.json (Hugging Face tokenizers), no special tokens, "
                               "no chat template",
                "tokenizer": str(self._path), "tokenizer_sha256": self._sha256}


def _tokenizer_bytes(path: Path) -> bytes:
    """The tokenizer file, opened as a trace is (regular, bounded): a ConfigError else."""
    from workbench.errors import TraceFormatError

    try:
        return open_trace(path, inflate=False)
    except TraceFormatError as exc:
        raise ConfigError(f"trace option tokenizer: {exc}") from None


def text_counter(tokenizer: Any) -> TextCounter:
    """The counter of a reader's ``tokenizer`` option: None → words, else a path to a
    ``tokenizer.json`` (a folder holding one is taken too)."""
    if tokenizer is None:
        return WordCounter()
    if not isinstance(tokenizer, str | Path) or not str(tokenizer).strip():
        raise ConfigError("trace option tokenizer must be the path of a Hugging Face "
                          f"tokenizer.json, got {tokenizer!r:.80}")
    path = Path(tokenizer).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    return HFTokenizerCounter(path)
