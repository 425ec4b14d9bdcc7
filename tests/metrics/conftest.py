"""Fixtures of the metrics tests."""

from __future__ import annotations

import pytest

from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.records import RunResult

#: TraceLab's bundled example (several sessions of rounds with tool waits)
TRACE = str(data_path("tracelab/multi_session_example.csv"))


@pytest.fixture(scope="session")
def tracelab_run() -> RunResult:
    """TraceLab's example simulated in virtual time (prefix-preserving, a 512-block cache):
    the run whose records a test edits copies of. Shared: never change it in place."""
    return simulate({"trace": TRACE, "context": "prefix-preserving",
                     "target": {"url": "sim", "engine": {"num_blocks": 512}}})
