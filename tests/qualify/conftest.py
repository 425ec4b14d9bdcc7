"""The spec writer fixture (specs: parity_specs.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def write_spec(tmp_path: Path):
    def write(data: dict[str, Any], name: str = "spec.json") -> Path:
        p = tmp_path / name
        p.write_text(json.dumps(data))
        return p

    return write
