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
from workbench.plan import Plan, build_plan
from workbench.records import RequestRecord, RunResult, Workload
from workbench.replay import base_manifest, coerce_config, load_workload, new_run_id
from workbench.runner import Runner
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine

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
        try:
            ereq = self.engine.submit(req.request_id, req.prompt_ids, req.max_tokens)
        except ValueError as exc:  # what the HTTP server answers with a 400 (sim/server.py)
            rec.end_ns = self.clock.now_ns()
            rec.http_status = 400
            rec.status, rec.error = "error", f"HTTP 400: {exc}"
            return None
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
    if engine is None:
        engine = EngineConfig.from_knobs(**cfg.target.engine)
    elif isinstance(engine, dict):
        engine = EngineConfig.from_knobs(**engine)
    run_id = cfg.run_id or new_run_id(cfg)
    manifest = base_manifest(cfg, workload, plan, run_id)
    manifest["mode"] = "virtual"
    manifest["engine"] = dataclasses.asdict(engine)
    result = _run_virtual_anywhere(_simulate(cfg, plan, engine, run_id, manifest))
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
    cfg: RunConfig, plan: Plan, engine_cfg: EngineConfig, run_id: str, manifest: dict[str, Any]
) -> RunResult:
    clock = VirtualClock()
    engine = Engine(engine_cfg, clock)
    records: list[RequestRecord] = []
    lifecycle: list[dict[str, Any]] = []
    await engine.start()
    try:
        stats_before = engine.stats()
        runner = Runner(
            cfg, plan, run_id=run_id, codec=make_codec(cfg.backend.name, **cfg.backend.options),
            sender=EngineSender(engine, clock), clock=clock, pool=TokenPool(seed=cfg.seed),
            sink=records.append, lifecycle_sink=lifecycle.append,
            block_size=plan.block_size or engine_cfg.block_size,
        )
        t0 = clock.now_ns()
        await runner.execute()
        stats_after = engine.stats()
    finally:
        await engine.stop()
    a = cfg.arrival
    measured = [r for r in records if not r.warmup]
    manifest["completion"] = plan.completion(
        len(measured), sum(r.status == "skipped" for r in measured),
        looped=a.mode == "closed-loop" and a.duration_s is not None)
    manifest["status"] = manifest["completion"]["status"]
    manifest["virtual_duration_s"] = (clock.now_ns() - t0) / 1e9
    manifest["peak_active_units"] = runner.gate.peak_active
    if runner.warmup_report is not None:
        manifest["warmup"] = runner.warmup_report
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
