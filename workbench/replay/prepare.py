"""Before a replay sends anything: the checked config, the workload, the run id, the manifest.

Every executor (in-process, worker processes, Ray, virtual time) starts a run from these,
so a config error or a bad trace surfaces before any request.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import platform
import sys
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from workbench import __version__, redact
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.records import RunManifest, RunResult, Workload
from workbench.replay.plan import LONG_RUN_MS, Plan, RunFloor, build_plan, run_floor
from workbench.signals import run_with_sigterm
from workbench.storage.rundir import process_identity
from workbench.traces.load import source_sha256
from workbench.workloads.standard import load_source

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A run before anything is sent: its checked config, workload, plan and run id."""

    cfg: RunConfig
    workload: Workload
    plan: Plan
    run_id: str
    floor: RunFloor | None = None  # the least the run takes (replay.plan.run_floor)

    def manifest(self, engine: dict[str, Any] | None = None,
                 cluster: dict[str, Any] | None = None) -> RunManifest:
        """The run's first manifest; a virtual run's with the engine (and cluster) it
        runs on (``engine_target.EngineTarget.manifest_facts``)."""
        m = base_manifest(self.cfg, self.workload, self.plan, self.run_id)
        if engine is not None:
            m.mode, m.engine, m.cluster = "virtual", engine, cluster
        return m


def prepare(cfg: RunConfig | dict[str, Any], workload: Workload | None = None, *,
            virtual: bool = False, announced: bool = False) -> Prepared:
    """The one prologue of every run: config and workload checked, plan, run id; warns of
    a release span past a day or waits past ``LONG_RUN_MS`` (unless ``announced``: the
    caller said both, as a sweep does once for all its points and a plan once for all
    its probes). Every error surfaces here."""
    cfg = coerce_config(cfg)
    if workload is None:
        workload = load_workload(cfg)  # checked against the config as it is loaded
    else:
        cfg.check_workload(workload)
    plan = build_plan(cfg, workload)
    if (warning := plan.arrival()["arrival_span_warning"]) and not announced:
        log.warning("%s", warning)
    floor = run_floor(plan, cfg.arrival)
    if floor is not None and floor.floor_ms > LONG_RUN_MS and not announced:
        log.warning("%s", floor.sentence(virtual))
    return Prepared(cfg, workload, plan, cfg.run_id or new_run_id(cfg), floor)


def coerce_config(cfg: RunConfig | dict[str, Any]) -> RunConfig:
    """A checked ``RunConfig`` (a dict is parsed; a hand-built one is checked too), with an
    ``out_dir`` that can hold the run: every config error surfaces before any request."""
    if isinstance(cfg, RunConfig):
        cfg.check()
    else:
        cfg = RunConfig.from_dict(cfg)  # checked as it is built
    cfg.check_out_dir()
    return cfg


def load_workload(cfg: RunConfig) -> Workload:
    if not cfg.trace.path:
        raise ConfigError("trace.path is empty: say which trace file to replay")
    # a file, or a synthetic: description drawn (docs/trace-formats.md)
    windowed = cfg.trace.max_items is not None or cfg.trace.offset
    if "window" in cfg.trace.options:  # load_source's own parameter: no reader takes it
        raise ConfigError("trace option 'window' is no reader option: trace.offset and "
                          "trace.max_items give the window", field="trace.options")
    workload = load_source(cfg.trace.path, cfg.trace.format, **cfg.trace.options,
                           window=(cfg.trace.offset, cfg.trace.max_items) if windowed else None)
    cfg.check_workload(workload)
    return workload


def new_run_id(cfg: RunConfig) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{cfg.backend.name}-{uuid.uuid4().hex[:6]}"


def trace_sha256(workload: Workload) -> str | None:
    """The trace file's sha256; a synthetic workload's is its description's."""
    if "generator" in workload.meta:
        return hashlib.sha256(workload.source.encode()).hexdigest()
    return source_sha256(workload.source, workload.fmt) if workload.source else None


def base_manifest(cfg: RunConfig, workload: Workload, plan: Plan, run_id: str) -> RunManifest:
    """Everything needed to know what ran: config, trace identity, versions, host."""
    from importlib.metadata import version  # aiohttp's and pandas' without importing them

    import numpy

    cfg.register_secrets()  # before anything of the run is written or printed
    config = cfg.to_dict()
    config["target"]["url"] = redact.safe_url(cfg.target.url)  # never a password or key
    config["backend"]["metrics_urls"] = [redact.safe_url(u) for u in cfg.backend.metrics_urls]
    config = redact.obj(config)  # literal header values, credential body fields
    return RunManifest(
        run_id=run_id,
        label=cfg.label,
        config=config,
        trace={
            "path": workload.source,
            "format": workload.fmt,
            "sha256": trace_sha256(workload),
            "units": len(workload.units),
            "rounds": workload.n_rounds,
            # a synthetic's generator (kind, parameters, seed, arrival), the window, the
            # reader's options as applied (weka's timing ...)
            **{k: workload.meta[k] for k in ("generator", "window", "reader")
               if k in workload.meta},
        },
        policy=plan.policy,
        plan=plan.totals(),
        ideal_prefix_hit_rate=plan.ideal_prefix_hit_rate,
        versions={
            "workbench": __version__,
            "python": sys.version.split()[0],
            "aiohttp": version("aiohttp"),
            "pandas": version("pandas"),
            "numpy": numpy.__version__,
        },
        # pid and its start time: tells a dead process's "running" manifest (running_note)
        host={**process_identity(), "platform": platform.platform()},
        started_at=dt.datetime.now(dt.UTC).isoformat(),
        status="running",
    )


def dry_run_result(run: Prepared) -> RunResult:
    """What ``--dry-run`` shows: the manifest of the run not made, its plan's totals with
    the least the run takes (``wait_floor_s``) and why."""
    manifest = run.manifest()
    manifest.status = "dry_run"
    if run.floor is not None:
        manifest.plan = {**manifest.plan, "wait_floor_s": round(run.floor.floor_ms / 1000, 3),
                         "wait_floor_why": run.floor.why}
    return RunResult(run.run_id, [], manifest=manifest)


def run_on_fast_loop(coro: Coroutine[Any, Any, T], use_uvloop: bool = True) -> T:
    """``asyncio.run(coro)``, on uvloop when installed and wanted (no global policy change);
    SIGTERM stops it as SIGINT does (``workbench.signals``)."""
    with asyncio.Runner(loop_factory=uvloop_factory(use_uvloop)) as runner:
        return run_with_sigterm(runner, coro)


def uvloop_factory(wanted: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when ``wanted`` and installed; None: asyncio's."""
    if wanted:
        try:
            import uvloop
        except ImportError:
            return None
        return uvloop.new_event_loop
    return None
