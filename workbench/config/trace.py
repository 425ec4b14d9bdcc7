"""Axis 1 of a run config: which trace file, read how, and how much of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceSpec:
    """Axis 1: which file, read how, and how much of it (``max_items`` units from unit
    ``offset``, file order: a contiguous window; ``workbench.traces.graph.window``)."""

    path: str = ""
    format: str = "auto"
    max_items: int | None = None
    offset: int = 0
    options: dict[str, Any] = field(default_factory=dict)
