"""Fixtures shared by the test files.

Public traces: ``public_data.public(name)`` at import time (parametrize, skip marks),
the ``public_file`` fixture inside a test; both prefer the copies bundled in
``workbench/data/`` and fall back to ``../shared/data`` next to the repository root,
skipping with the missing path when neither has the file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from public_data import require

from workbench.sim.server import SimHandle, serve_sim

# the embedded engine 50x faster than its cost model: real HTTP and engine code, the
# same tokens and cache hits, a fraction of the wall time
FAST_ENGINE = {"speedup": 50.0}


@pytest.fixture
def public_file() -> Callable[[str], Path]:
    """``public_file("tracelab/multi_session_example.csv")``: its path, or skip the test."""
    return require


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    """A fresh embedded engine (its own cache) on 127.0.0.1, at ``FAST_ENGINE`` speed."""
    async with serve_sim(**FAST_ENGINE) as handle:
        yield handle
