"""The one check of a reader's refusal the trace tests share: ``load_trace`` raises one
``TraceFormatError`` printed as ``path:line: rule`` (docs/trace-formats.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace


def trace_error(path: Path, **options: object) -> tuple[int, str]:
    """``(line, rule)`` of the error loading ``path`` with ``options``."""
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, **options)
    assert str(exc.value) == f"{path}:{exc.value.line}: {exc.value.rule}"
    return exc.value.line, exc.value.rule
