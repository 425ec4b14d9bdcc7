"""A trace file written for a reader test, and the one ``TraceFormatError`` reading it
raises (tests/traces/): one way to write text or bytes, one check of what a user sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace


def write_trace(tmp_path: Path, text: str | bytes, name: str) -> Path:
    """``tmp_path / name`` holding ``text`` (bytes as they are: a binary or broken file)."""
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def trace_error(path: Path, fmt: str = "auto", **options: Any) -> TraceFormatError:
    """The error ``load_trace`` raises for ``path`` (``fmt``: a format, or ``auto``), after
    checking it names that file, as ``path:line: rule``."""
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, fmt, **options)
    assert exc.value.path == str(path)
    assert str(exc.value) == f"{path}:{exc.value.line}: {exc.value.rule}"
    return exc.value
