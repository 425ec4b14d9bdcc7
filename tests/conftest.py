"""Fixtures shared by the test files.

Public traces: ``public_data.public(name)`` at import time (parametrize, skip marks),
the ``public_file`` fixture inside a test; both prefer the copies bundled in
``workbench/data/`` and fall back to ``../shared/data`` next to the repository root,
skipping with the missing path when neither has the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from loopback import App, serve_app
from public_data import require

from workbench.sim.server import SimHandle, serve_sim

# the embedded engine 50x faster than its cost model: real HTTP and engine code, the
# same tokens and cache hits, a fraction of the wall time
FAST_ENGINE = {"speedup": 50.0}


# files whose tests take minutes (the published-table presets, the wheel in a fresh venv,
# a live sweep stopped at each stage): collected first, so that under ``--dist loadfile``
# each worker starts on one and they overlap the rest, instead of one of them running
# alone on one worker at the end of the suite (2 minutes a pass, Makefile XDIST)
FIRST = ("tests/sim/test_preset_measurements.py", "tests/test_package.py",
         "tests/cli/test_stop_every_command.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: k for k, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(FIRST)))


@pytest.fixture
def public_file() -> Callable[[str], Path]:
    """``public_file("tracelab/multi_session_example.csv")``: its path, or skip the test."""
    return require


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    """A fresh embedded engine (its own cache) on 127.0.0.1, at ``FAST_ENGINE`` speed."""
    async with serve_sim(**FAST_ENGINE) as handle:
        yield handle


@pytest.fixture
async def loopback() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """``url = await loopback(app)``: ``serve_app`` (tests/loopback.py) until the test ends."""
    async with contextlib.AsyncExitStack() as servers:

        async def start(app: App, **options: Any) -> str:
            return await servers.enter_async_context(serve_app(app, **options))

        yield start
