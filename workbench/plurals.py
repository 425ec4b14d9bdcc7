"""A noun in the number its count takes (``"1 line"``, ``"2 lines"``), for every layer's
messages: config and trace errors, storage notes, reports (base layer: imports nothing)."""

from __future__ import annotations

from typing import Any


def noun(n: Any, word: str, plural: str | None = None) -> str:
    """``word`` for a count of exactly 1, else its plural (``plural``: when not
    ``word + "s"``); a count that is not a number (or a bool) takes the plural."""
    one = n == 1 and not isinstance(n, bool)
    return word if one else (plural or f"{word}s")


def counted(n: Any, word: str, plural: str | None = None) -> str:
    """``"1 round"``, ``"3 rounds"``, ``"0 rounds"``: a count with its noun in the number
    it takes; a count that is not a number is printed as it is (``"? rounds"``)."""
    return f"{n} {noun(n, word, plural)}"
