"""Cache isolation between runs, against the embedded engine behind real HTTP.

Two runs back to back on one server: with the flush, the second run's cached
tokens are exactly the plan's (whole blocks); without it, the second run finds
the first run's blocks and the warm-cache warning fires; a per-run token salt
isolates the runs without a flush. ``flush_prefix_cache`` itself: the route that
fits the backend, what a server without the route answers, retries while busy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import workbench as wb
from workbench.backends.flush import flush_prefix_cache
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.records import RequestRecord, RunResult
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
BLOCK = 16


def cfg(url: str, **backend: Any) -> dict[str, Any]:
    return {
        "trace": SESSIONS,
        "context": "prefix-preserving",
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, "max_concurrency": 4},
        "backend": {"name": "vllm-tokens", "preflight": True, **backend},
        "target": url,
    }


async def two_runs(**backend: Any) -> tuple[RunResult, RunResult]:
    """The same trace twice on one server (as two backends would, one after the other)."""
    async with serve_sim(speedup=50.0, block_size=BLOCK, num_blocks=4096) as sim:
        async with asyncio.timeout(120):
            first = await run_async(cfg(sim.base_url, **backend))
            second = await run_async(cfg(sim.base_url, **backend))
    return first, second


def expected_cached(rounds: list[RequestRecord]) -> dict[str, int]:
    """Per request: what a cold cache gives — the carried context, floored to whole blocks,
    capped at what the previous request left (its last output token has no KV)."""
    want = {rounds[0].request_id: 0}
    for prev, cur in itertools.pairwise(rounds):
        cacheable = (prev.prompt_tokens or 0) + (prev.completion_tokens or 0) - 1
        n = min(cur.derived_prefix, cacheable, (cur.prompt_tokens or 0) - 1)
        want[cur.request_id] = max(n, 0) // BLOCK * BLOCK
    return want


def check_cold(result: RunResult) -> None:
    by_session: dict[str, list[RequestRecord]] = {}
    for r in result.records:
        assert r.status == "ok", (r.request_id, r.error)
        by_session.setdefault(r.session_id, []).append(r)
    for rounds in by_session.values():
        rounds.sort(key=lambda r: r.round_idx)
        want = expected_cached(rounds)
        assert {r.request_id: r.cached_tokens for r in rounds} == want


async def test_flush_on_every_round_gets_exactly_the_plan() -> None:
    first, second = await two_runs(flush_cache=True)
    for result in (first, second):
        flush = result.manifest.cache_flush
        assert flush["ok"] and flush["attempted"] and flush["status"] == 200
        assert flush["endpoint"] == "POST /reset_prefix_cache"
        check_cold(result)
        s = wb.summarize(result)
        assert not s["warm_cache"]["warm"] and s["warm_cache"]["warning"] is None
        assert s["warm_cache"]["checked_requests"] == len(result.records)
        assert s["cache_flush"]["ok"]


async def test_flush_off_no_salt_the_warm_cache_warning_fires(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = await two_runs(flush_cache=False)
    assert first.manifest.cache_flush == {
        "mode": False, "attempted": False, "ok": False, "endpoint": None, "status": None,
        "detail": "backend.flush_cache false", "tries": [],
    }  # fmt: skip
    assert not wb.summarize(first)["warm_cache"]["warm"]  # a fresh server: cold
    s = wb.summarize(second)
    warm = s["warm_cache"]
    assert warm["warm"] and warm["beyond_plan_requests"] >= len(
        {r.session_id for r in second.records})  # fmt: skip
    assert "warm cache" in warm["warning"] and "token_salt" in warm["warning"]
    assert s["actual_prefix_hit_rate"] > s["planned_prefix_hit_rate_measured"]
    # the report says so
    from workbench.report import tables

    assert "WARNING: warm cache" in tables.prefix_caption(s)
    # and the CLI prints it
    from workbench.commands.replay import print_cache_notes

    print_cache_notes(s)
    assert "WARNING: warm cache" in capsys.readouterr().err
    # the stored run, read from its records.parquet, says the same
    pytest.importorskip("pyarrow")
    from workbench.metrics import scan
    from workbench.metrics.files import save

    d = save(second, tmp_path / "second")
    assert scan.summarize(d)["warm_cache"] == warm


async def test_a_per_run_salt_isolates_runs_without_a_flush() -> None:
    first, second = await two_runs(flush_cache=False, token_salt="run")
    check_cold(first)
    check_cold(second)
    assert not wb.summarize(second)["warm_cache"]["warm"]


def test_salted_pools_share_no_tokens_and_no_salt_is_the_old_stream() -> None:
    plain, a, b = TokenPool(seed=1), TokenPool(seed=1, salt="run-a"), TokenPool(seed=1, salt="b")
    assert plain.fresh("s", 64) == TokenPool(seed=1, salt="").fresh("s", 64)
    xs, ys, zs = a.fresh("s", 64), b.fresh("s", 64), TokenPool(seed=1).fresh("s", 64)
    assert len({tuple(xs), tuple(ys), tuple(zs)}) == 3
    assert TokenPool(seed=1, salt="run-a").block(7, 16) == a.block(7, 16) != b.block(7, 16)


async def test_flush_picks_the_backend_route_on_the_embedded_engine() -> None:
    async with serve_sim(zero_cost=True) as sim:
        vllm = await flush_prefix_cache(sim.base_url, backend="vllm-tokens")
        sgl = await flush_prefix_cache(sim.base_url, backend="sglang-tokens")
    assert (vllm.ok, vllm.endpoint, vllm.status) == (True, "POST /reset_prefix_cache", 200)
    assert (sgl.ok, sgl.endpoint, sgl.status) == (True, "POST /flush_cache", 200)


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m"}]})


async def test_a_server_without_the_route_is_recorded_and_true_stops_the_run(loopback) -> None:
    # a real HTTP server that serves /v1/models and nothing else (vLLM without dev mode)
    url = await loopback([web.get("/v1/models", _models)])
    out = await flush_prefix_cache(url)
    assert out.attempted and not out.ok and out.endpoint is None
    assert [t["status"] for t in out.tries] == [404, 404]
    assert "VLLM_SERVER_DEV_MODE=1" in (out.detail or "")
    config = cfg(url, flush_cache=True, preflight=False)
    with pytest.raises(ConfigError, match=r"flush_cache true.*VLLM_SERVER_DEV_MODE=1"):
        await run_async(config)


async def test_a_busy_engine_is_retried_then_reported_refused() -> None:
    # a long output: once its first token is out, the request runs (holding blocks) for
    # far longer than the test; closing the response aborts it
    async with serve_sim() as sim, aiohttp.ClientSession() as s:
        body = {"model": "workbench-sim", "prompt": [5] * 64, "max_tokens": 100_000, "stream": True}
        resp = await s.post(sim.base_url + "/v1/completions", json=body)
        try:
            await resp.content.readline()  # the request is running: it holds blocks
            out = await flush_prefix_cache(sim.base_url, retries=1, retry_s=0.01)
        finally:
            resp.close()
    assert out.attempted and not out.ok and out.status == 409
    assert len(out.tries) == 2 and "hold cache blocks" in (out.detail or "")


def test_cli_flags_map_onto_the_backend() -> None:
    from workbench.cli import build_parser

    args = build_parser().parse_args(
        ["replay", "--trace", SESSIONS, "--no-flush-cache", "--token-salt", "run"]
    )
    from workbench.commands._axes import config_from_args

    c = config_from_args(args)
    assert (c.backend.flush_cache, c.backend.token_salt) == (False, "run")
    with pytest.raises(ConfigError, match=r"backend\.flush_cache"):
        RunConfig.from_dict({"backend": {"flush_cache": "yes"}})


def test_simulate_records_the_flush_and_honours_the_salt(tmp_path: Path) -> None:
    base = {"trace": SESSIONS, "context": "prefix-preserving", "target": "sim", "run_id": "x"}
    r = wb.simulate(base)
    assert r.manifest.cache_flush["ok"]
    salted = wb.simulate({**base, "backend": {"name": "openai", "token_salt": "s"}})
    assert [x.cached_tokens for x in salted.records] == [x.cached_tokens for x in r.records]
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "--trace", SESSIONS, "--no-flush-cache",
         "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout.split("\n}\n")[0] + "}")["requests"] > 0


async def test_a_sharded_run_flushes_once_and_salts_every_shard_alike() -> None:
    """executor.workers: the parent resets the cache before the shards start; each
    worker builds the run's salted pool from the same run id."""
    async with serve_sim(speedup=50.0, block_size=BLOCK, num_blocks=4096) as sim:
        base = cfg(sim.base_url, flush_cache=False, token_salt="run")
        base["executor"] = {"workers": 2}
        async with asyncio.timeout(180):
            first = await run_async(base)
            second = await run_async({**base, "backend": {**base["backend"], "flush_cache": True}})
    assert second.manifest.cache_flush["ok"] and not first.manifest.cache_flush["attempted"]
    check_cold(first)
    check_cold(second)


@pytest.mark.parametrize("flush", [True, False])
async def test_chat_template_tokens_are_not_mistaken_for_a_warm_cache(flush: bool) -> None:
    """openai-chat: the server counts a template's tokens beyond the planned prompt, the
    same in every prompt; only what goes beyond those and the plan is a warm cache."""
    async with serve_sim(speedup=50.0, block_size=BLOCK, num_blocks=4096) as sim:
        c = cfg(sim.base_url, name="openai-chat", flush_cache=flush, preflight=False)
        c["context"] = "trace-reported"  # chat carries no output ids
        async with asyncio.timeout(120):
            first = await run_async(c)
            second = await run_async(c)
    assert any(r.prompt_tokens > r.planned_prefix_tokens + r.planned_input_tokens
               for r in second.records)  # fmt: skip
    assert not wb.summarize(first)["warm_cache"]["warm"]
    assert wb.summarize(second)["warm_cache"]["warm"] is (not flush)


def _rec(rid: str, unit: int, rnd: int, cached: int, t: int, **kw: Any) -> RequestRecord:
    kw.setdefault("cached_tokens_reported", True)
    return RequestRecord(
        run_id="r", request_id=rid, unit_ordinal=unit, session_id=f"s{unit}", round_idx=rnd,
        backend="openai", policy="prefix-preserving", planned_prefix_tokens=32 * rnd,
        planned_input_tokens=64, planned_output_tokens=1, dispatch_ns=t, end_ns=t + 5,
        token_times_ns=[t + 1], token_counts=[1], prompt_tokens=32 * rnd + 64,
        completion_tokens=1, cached_tokens=cached, **kw,
    )  # fmt: skip


def test_warm_check_skips_warmed_units_and_repeated_passes(tmp_path: Path) -> None:
    from workbench.metrics.frame import to_frame
    from workbench.metrics.isolation import warm_cache

    records = [
        _rec("warmup:a0", 0, 0, 0, 1, warmup=True),
        _rec("a0", 0, 0, 64, 10),  # primed by its warm-up on purpose: not checked
        _rec("b0", 1, 0, 0, 11),
        _rec("b1", 1, 1, 32, 20),  # = the plan
        _rec("b0~1", 1, 0, 64, 30),  # a second closed-loop pass: not first-seen
        _rec("c0", 2, 0, 48, 12),  # beyond the plan: the cache knew it
        _rec("d0", 3, 0, 0, 13, cached_tokens_reported=False),  # unreported: not checked
    ]
    got = warm_cache(to_frame(records))
    assert (got["checked_requests"], got["beyond_plan_requests"]) == (3, 1)
    assert got["excess_cached_tokens"] == 48 and got["warm"]
    pytest.importorskip("pyarrow")
    from workbench.metrics import scan
    from workbench.metrics.files import save

    d = save(RunResult("r", records), tmp_path / "run")
    assert scan.summarize(d)["warm_cache"] == got


def test_warm_check_breaks_a_dispatch_tie_by_request_id(tmp_path: Path) -> None:
    """Two passes of one (unit, round) dispatched at the same instant: the first seen is
    the lower request id, whatever the file order, in memory and from Parquet alike."""
    pytest.importorskip("pyarrow")
    from workbench.metrics import scan
    from workbench.metrics.files import save
    from workbench.metrics.isolation import warm_cache

    for beyond, records in ((1, [_rec("b~1", 1, 0, 0, 20), _rec("a", 1, 0, 48, 20)]),
                            (0, [_rec("b~1", 1, 0, 48, 20), _rec("a", 1, 0, 0, 20)])):  # fmt: skip
        got = warm_cache(records)
        assert (got["checked_requests"], got["beyond_plan_requests"]) == (1, beyond)
        d = save(RunResult("r", records), tmp_path / f"run{beyond}")
        assert scan.summarize(d)["warm_cache"] == got
