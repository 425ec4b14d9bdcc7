"""``run`` / ``run_async``: one replay from a ``RunConfig`` to a saved ``RunResult``, played
by the executor ``executor.kind`` names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# the executors register their kinds on import (executors.kinds)
import workbench.executors.local
import workbench.executors.processes
import workbench.executors.ray  # noqa: F401  (Ray itself is imported when a run uses it)
from workbench.config import RunConfig
from workbench.executors.kinds import EXECUTORS
from workbench.records import RunResult, Workload
from workbench.replay.loops import run_anywhere
from workbench.replay.prepare import coerce_config, dry_run_result, prepare
from workbench.replay.session import Executor, ReplaySession

Progress = Callable[[int, int], None]
Phase = Callable[[str], None]


async def run_async(
    cfg: RunConfig | dict[str, Any],
    *,
    progress: Progress | None = None,
    stop: asyncio.Event | None = None,
    workload: Workload | None = None,
    phase: Phase | None = None,
    on_cancelled: Callable[[RunResult], None] | None = None,
    announced: bool = False,
    max_error_rate: float | None = None,
) -> RunResult:
    """Replay ``cfg`` and return its result (saved under ``cfg.out_dir/<run_id>`` if set);
    ``on_cancelled``: told the saved result of a run stopped from outside, before the
    interrupt (or cancellation) goes on; ``announced``: the caller has said how long the
    run takes (``prepare``); ``max_error_rate``: the threshold the run is judged by,
    recorded in its manifest (``RunManifest.max_error_rate``)."""
    run = prepare(cfg, workload, announced=announced)
    if run.cfg.dry_run:
        return dry_run_result(run)
    manifest = run.manifest()
    manifest.max_error_rate = max_error_rate
    session = ReplaySession(run.cfg, run.plan, run.run_id, manifest, executor_for(run.cfg),
                            progress=progress, phase=phase)
    session.on_cancelled = on_cancelled
    return await session.run(stop)


def executor_for(cfg: RunConfig) -> Executor:
    """The executor ``cfg.executor`` names (``local`` with workers: ``processes``)."""
    kind = cfg.executor.kind
    if kind == "local" and cfg.executor.workers > 1:
        kind = "processes"
    return EXECUTORS.get(kind)(cfg)


def run(cfg: RunConfig | dict[str, Any], *, progress: Progress | None = None) -> RunResult:
    """Synchronous ``run_async``, also from a notebook cell (docs/notebooks.md)."""
    cfg = coerce_config(cfg)
    return run_anywhere(run_async(cfg, progress=progress), cfg.executor.uvloop)
