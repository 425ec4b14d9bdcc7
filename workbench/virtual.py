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
from workbench.context.tokens import run_pool
from workbench.plan import Plan, build_plan
from workbench.records import RequestRecord, RunResult, Workload
from workbench.replay import base_manifest, coerce_config, load_workload, new_run_id
from workbench.runner import Runner
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine

# The canonical report's one closed exclusion list (docs/measurement-rules.md): every
# other field of the manifest, the summary, each record, each lifecycle row and each
# timeline sample is in. Paths are dotted; "records[]." applies to every record.
CANONICAL_EXCLUDED: dict[str, str] = {
    "manifest.run_id": "wall clock: a UTC stamp plus a random suffix",
    "manifest.started_at": "wall clock",
    "manifest.finished_at": "wall clock",
    "manifest.host": "host name and platform",
    "manifest.versions.python": "the host's interpreter",
    "manifest.versions.aiohttp": "the host's installed library",
    "manifest.versions.pandas": "the host's installed library",
    "manifest.versions.numpy": "the host's installed library",
    "manifest.config.run_id": "the run's name (a folder name)",
    "manifest.config.out_dir": "path: the output folder",
    "manifest.config.trace.path": "path: where the trace is (its content is in: trace.sha256)",
    "manifest.trace.path": "path: where the trace is",
    "manifest.run_dir": "path: the run directory",
    "manifest.records_kept": "storage: whether records are held in memory (out_dir decides)",
    "manifest.records_kept_reason": "storage: why (names the out_dir case)",
    "manifest.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client_bottleneck": "wall clock: derived from summary.client",
    "records[].run_id": "the same as manifest.run_id",
    "lifecycle[].run_id": "the same as manifest.run_id",
}


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
        ereq = self.engine.submit(req.request_id, req.prompt_ids, req.max_tokens)
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
        manifest["cache_flush"] = _flush(engine, cfg.backend.flush_cache)
        stats_before = engine.stats()
        runner = Runner(
            cfg, plan, run_id=run_id, codec=make_codec(cfg.backend.name, **cfg.backend.options),
            sender=EngineSender(engine, clock), clock=clock,
            pool=run_pool(cfg.seed, cfg.backend.token_salt, run_id),
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


def _flush(engine: Engine, mode: bool | str) -> dict[str, Any]:
    """``backend.flush_cache`` in virtual time: the engine core's own reset (it is fresh,
    so this only records, like a live run's manifest, what was done)."""
    if mode is False:
        return {"mode": False, "attempted": False, "ok": False, "endpoint": None,
                "status": None, "detail": "backend.flush_cache false", "tries": []}  # fmt: skip
    ok = engine.reset_prefix_cache()
    return {"mode": mode, "attempted": True, "ok": ok, "endpoint": "engine.reset_prefix_cache()",
            "status": None, "detail": None if ok else "engine busy", "tries": []}  # fmt: skip


def _engine_sample(t_ns: int, stats: dict[str, Any]) -> dict[str, Any]:
    """An engine counter snapshot under the vLLM metric names the scraper uses."""
    return {
        "t_ns": t_ns,
        "vllm:prefix_cache_queries_total": stats.get("prefix_cache_queries_tokens", 0),
        "vllm:prefix_cache_hits_total": stats.get("prefix_cache_hits_tokens", 0),
        "vllm:num_preemptions_total": stats.get("preemptions", 0),
    }


def _drop(doc: dict[str, Any], dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        nxt = doc.get(key)
        if not isinstance(nxt, dict):
            return
        doc = nxt
    doc.pop(leaf, None)


def _excluded(section: str) -> list[str]:
    prefix = section + "."
    return [k[len(prefix) :] for k in CANONICAL_EXCLUDED if k.startswith(prefix)]


def canonical_report(result: RunResult, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Manifest, summary, every record, lifecycle row and timeline sample, less exactly
    ``CANONICAL_EXCLUDED``: the same trace content and engine config give the same
    report whatever the output folder, the trace's path, the host and the time."""
    import copy

    from workbench.metrics import summarize
    from workbench.metrics.frame import as_records

    doc: dict[str, Any] = {
        "manifest": copy.deepcopy(result.manifest),
        "summary": summarize(result, slo),
        "records": [r.to_dict() for r in as_records(result)],
        "lifecycle": [dict(row) for row in _lifecycle(result)],
        "metrics_timeline": [dict(row) for row in result.metrics_timeline],
    }
    for section in ("manifest", "summary"):
        for dotted in _excluded(section):
            _drop(doc[section], dotted)
    for section in ("records", "lifecycle"):
        for dotted in _excluded(section + "[]"):
            for row in doc[section]:
                _drop(row, dotted)
    return doc


def _lifecycle(result: RunResult) -> list[dict[str, Any]]:
    if result.lifecycle or not result.records_on_disk:
        return result.lifecycle
    from workbench.report.store import LIFECYCLE, read_jsonl

    return read_jsonl(Path(result.run_dir or "") / LIFECYCLE)


def report_digest(report: dict[str, Any]) -> str:
    blob = orjson.dumps(report, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.sha256(blob).hexdigest()
