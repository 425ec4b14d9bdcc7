"""Shared, strict file reading for the readers: every problem becomes a TraceFormatError."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError, TraceFormatError


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, 0, f"cannot read file: {exc.strerror}") from None
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise TraceFormatError(path, line, "binary data (NUL byte): not a text trace")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceFormatError(path, line, "not UTF-8 text") from None
    if not text.strip():
        raise TraceFormatError(path, 0, "file is empty")
    return text


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` for each non-blank line; each line must be a JSON object."""
    # split on "\n" only: JSON strings may hold raw U+2028/U+0085, which splitlines() breaks on
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(path, lineno, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise TraceFormatError(path, lineno, "each line must be a JSON object")
        yield lineno, obj


def read_csv(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and ``(line_number, row)`` pairs; checks required columns and row widths."""
    text = read_text(path).removeprefix("\ufeff")  # spreadsheet exports start with a BOM
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except (StopIteration, csv.Error) as exc:
        raise TraceFormatError(path, 1, f"cannot read CSV header ({exc})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceFormatError(path, 1, f"missing column(s): {', '.join(missing)}")
    if len(set(header)) != len(header):
        raise TraceFormatError(path, 1, "duplicate column names in header")
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for fields in reader:
            lineno = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if len(fields) != len(header):
                raise TraceFormatError(
                    path, lineno, f"expected {len(header)} fields, found {len(fields)}"
                )
            rows.append((lineno, dict(zip(header, fields, strict=True))))
    except csv.Error as exc:
        raise TraceFormatError(path, reader.line_num, f"malformed CSV ({exc})") from None
    if not rows:
        raise TraceFormatError(path, 2, "no data rows")
    return header, rows


def as_int(path: Path, line: int, name: str, value: Any, *, minimum: int | None = 0) -> int:
    """An integer field (``12`` or ``12.0``); rejects NaN, fractions, bools, below-minimum."""
    if isinstance(value, bool):
        raise TraceFormatError(path, line, f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        i = value  # exact, however large
    else:
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise TraceFormatError(
                path, line, f"{name} must be an integer, got {value!r}"
            ) from None
        if not math.isfinite(f) or f != int(f):
            raise TraceFormatError(path, line, f"{name} must be an integer, got {value!r}")
        i = int(f)
    if minimum is not None and i < minimum:
        raise TraceFormatError(path, line, f"{name} must be >= {minimum}, got {value!r}")
    return i


def as_float(
    path: Path, line: int, name: str, value: Any, *, minimum: float | None = 0.0
) -> float:
    """A finite number field; rejects NaN/inf, bools and values below ``minimum``."""
    if isinstance(value, bool):
        raise TraceFormatError(path, line, f"{name} must be a number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TraceFormatError(path, line, f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise TraceFormatError(path, line, f"{name} must be finite, got {value!r}")
    if minimum is not None and f < minimum:
        raise TraceFormatError(path, line, f"{name} must be >= {minimum}, got {value!r}")
    return f


def check_options(fmt: str, unknown: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    """Reject reader options this format does not take (a silent ignore hides typos).

    Every reader refuses the same way: one ``ConfigError`` naming the format, the
    unknown option(s) and the valid ones.
    """
    if unknown:
        names = ", ".join(sorted(unknown))
        raise ConfigError(
            f"{fmt} reader got unknown option(s) {names}; valid: {', '.join(valid) or 'none'}"
        )
