"""Parity specs over a short contiguous window of the bundled Mooncake slice."""

from __future__ import annotations

import hashlib
from typing import Any

from workbench.data import path as data_path
from workbench.report.canonical import canonical_report, report_digest

MOON = data_path("mooncake/conversation_trace_head600.jsonl")
MOON_SHA = hashlib.sha256(MOON.read_bytes()).hexdigest()
ENGINE = {"block_size": 16, "num_blocks": 65536, "max_num_seqs": 256,
          "max_num_batched_tokens": 8192}
__all__ = ["ENGINE", "MOON", "MOON_SHA", "ONE", "canonical_report", "report_digest", "row",
           "spec_data"]
ONE = {"workers": 1, "router": "round-robin", "dp": 1, "tp": 1}


def spec_data(rows: list[dict[str, Any]], baseline: dict[str, Any] | None = None,
              candidate: dict[str, Any] | None = None, max_items: int = 120) -> dict[str, Any]:
    return {
        "parity": 1, "name": "moon-slice",
        "trace": {"path": str(MOON), "sha256": MOON_SHA},
        "window": {"offset": 100, "max_items": max_items, "rule": "contiguous"},
        "rows": rows,
        "baseline": baseline or {"engine": {}, "label": "base"},
        "candidate": candidate or {"engine": {}, "label": "cand"},
        "limits": {"timeout_s": 300, "memory_mb": 4096},
    }


def row(name: str, engine: dict[str, Any] | None = None, **topology: Any) -> dict[str, Any]:
    return {"name": name, "engine": {**ENGINE, **(engine or {})}, "topology": {**ONE, **topology}}


