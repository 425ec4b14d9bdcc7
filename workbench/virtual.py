"""``simulate``: replay a workload through the embedded engine core in virtual time.

Same plan, same runner, same arrival and admission semantics as a live replay
(sessions closed-loop with tool waits); only the clock (``VirtualClock``) and the
sender (straight into the engine, no HTTP) differ. Same input and seed ⇒ the same
virtual timestamps, so ``canonical_report`` has a stable sha256 digest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson

from workbench.backends.base import Codec, WireRequest, make_codec
from workbench.clock import Clock, VirtualClock, run_virtual
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool
from workbench.errors import ConfigError
from workbench.plan import Plan, build_plan
from workbench.records import RequestRecord, RunResult, Workload
from workbench.replay import base_manifest, coerce_config, load_workload, new_run_id
from workbench.runner import Runner
from workbench.sim.cluster import Cluster, ClusterConfig, split_knobs
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine
from workbench.sim.wire import placement_extra

# Fields that depend on the host or the wall clock, left out of the canonical report.
WALL_FIELDS = ("started_at", "finished_at", "host", "versions", "run_id", "run_dir")


class EngineSender:
    """The runner's sender for virtual time: submits to the engine core directly."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    async def send(self, codec: Codec, req: WireRequest, rec: RequestRecord) -> list[int] | None:
        """Submit, wait once for the end (no wakeup per step), then copy the engine's
        per-token emission times: each step emits one token per request, so each
        token is one stream event, as the HTTP server would send it."""
        rec.dispatch_ns = self.clock.now_ns()
        rec.sent_prompt_tokens = len(req.prompt_ids)
        ereq = self._submit(req, rec)
        try:
            await ereq.wait()
        except asyncio.CancelledError:
            ereq.abort()
            rec.status = "cancelled"
            raise
        times = ereq.token_ns
        ids = ereq.output_ids
        rec.token_times_ns = times
        rec.token_counts = [1] * len(times)
        rec.first_token_ns = times[0] if times else None
        rec.last_token_ns = times[-1] if times else None
        rec.end_ns = self.clock.now_ns()
        rec.http_status = 200
        rec.finish_reason = ereq.finish_reason
        rec.prompt_tokens = ereq.prompt_tokens
        rec.completion_tokens = len(ids)
        rec.cached_tokens = ereq.cached_tokens
        rec.cached_tokens_reported = True
        if ereq.finish_reason not in (None, "length", "stop"):
            rec.status, rec.error = "error", f"engine finished with {ereq.finish_reason}"
        return ids


    def _submit(self, req: WireRequest, rec: RequestRecord) -> Any:
        return self.engine.submit(req.request_id, req.prompt_ids, req.max_tokens)


class ClusterSender(EngineSender):
    """``EngineSender`` for a simulated cluster: the router places each request by
    its session, and the record names the serving worker (as the HTTP header does)."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock

    def _submit(self, req: WireRequest, rec: RequestRecord) -> Any:
        where, ereq = self.cluster.submit(
            req.request_id, req.prompt_ids, req.max_tokens, session=req.session_id
        )
        rec.extra.update(placement_extra(where.headers()))
        return ereq


def simulate(
    cfg: RunConfig | dict[str, Any],
    *,
    engine: EngineConfig | dict[str, Any] | None = None,
    workload: Workload | None = None,
) -> RunResult:
    """Replay ``cfg`` in virtual time against an ``EngineConfig`` (default: ``cfg.target.engine``).

    No sockets, no sleeping: a one-hour trace takes seconds. The result has the
    same records a live replay produces, on virtual nanoseconds.
    """
    cfg = coerce_config(cfg)
    workload = workload if workload is not None else load_workload(cfg)
    cfg.check_workload(workload)
    plan = build_plan(cfg, workload)
    cluster = None
    if engine is None or isinstance(engine, dict):
        try:  # before anything runs: a bad knob names itself
            knobs, cluster = split_knobs(cfg.target.engine if engine is None else engine)
            engine = EngineConfig.from_knobs(**knobs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"target.engine: {exc}") from None
    run_id = cfg.run_id or new_run_id(cfg)
    manifest = base_manifest(cfg, workload, plan, run_id)
    manifest["mode"] = "virtual"
    manifest["engine"] = dataclasses.asdict(engine)
    if cluster is not None:
        manifest["cluster"] = cluster.to_dict()
    result = _run_virtual_anywhere(_simulate(cfg, plan, engine, run_id, manifest, cluster))
    if cfg.out_dir:
        from workbench.report.store import save

        result.run_dir = str(save(result, Path(cfg.out_dir) / run_id))
    return result


def _run_virtual_anywhere(coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    """``run_virtual``, also from inside a running loop (a notebook cell): then the
    virtual loop runs in a worker thread and this call waits for it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_virtual(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="simulate") as pool:
        return pool.submit(run_virtual, coro).result()


async def _simulate(
    cfg: RunConfig, plan: Plan, engine_cfg: EngineConfig, run_id: str, manifest: dict[str, Any],
    cluster_cfg: ClusterConfig | None = None,
) -> RunResult:  # fmt: skip
    clock = VirtualClock()
    engine: Engine | Cluster
    sender: EngineSender
    if cluster_cfg is None:
        engine = Engine(engine_cfg, clock)
        sender = EngineSender(engine, clock)
    else:
        engine = Cluster(engine_cfg, cluster_cfg, clock)
        sender = ClusterSender(engine, clock)
    records: list[RequestRecord] = []
    lifecycle: list[dict[str, Any]] = []
    await engine.start()
    try:
        stats_before = engine.stats()
        runner = Runner(
            cfg, plan, run_id=run_id, codec=make_codec(cfg.backend.name, **cfg.backend.options),
            sender=sender, clock=clock, pool=TokenPool(seed=cfg.seed),
            sink=records.append, lifecycle_sink=lifecycle.append,
            block_size=plan.block_size or engine_cfg.block_size,
        )
        t0 = clock.now_ns()
        await runner.execute()
        stats_after = engine.stats()
    finally:
        await engine.stop()
    manifest["status"] = "completed"
    manifest["virtual_duration_s"] = (clock.now_ns() - t0) / 1e9
    manifest["peak_active_units"] = runner.gate.peak_active
    timeline = [_engine_sample(t0, stats_before), _engine_sample(clock.now_ns(), stats_after)]
    return RunResult(run_id, records, manifest=manifest, lifecycle=lifecycle,
                     metrics_timeline=timeline)


def _engine_sample(t_ns: int, stats: dict[str, Any]) -> dict[str, Any]:
    """An engine counter snapshot under the vLLM metric names the scraper uses."""
    return {
        "t_ns": t_ns,
        "vllm:prefix_cache_queries_total": stats.get("prefix_cache_queries_tokens", 0),
        "vllm:prefix_cache_hits_total": stats.get("prefix_cache_hits_tokens", 0),
        "vllm:num_preemptions_total": stats.get("preemptions", 0),
    }


def canonical_report(result: RunResult, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Summary + per-request timings, without wall-clock or host fields (digest-stable)."""
    from workbench.metrics import summarize

    manifest = {k: v for k, v in result.manifest.items() if k not in WALL_FIELDS}
    manifest.get("config", {}).pop("run_id", None)
    requests = [
        [r.request_id, r.status, r.dispatch_ns, r.first_token_ns, r.end_ns,
         r.prompt_tokens, r.cached_tokens, r.completion_tokens]
        for r in result.records
    ]
    return {"manifest": manifest, "summary": summarize(result, slo), "requests": requests}


def report_digest(report: dict[str, Any]) -> str:
    blob = orjson.dumps(report, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.sha256(blob).hexdigest()
