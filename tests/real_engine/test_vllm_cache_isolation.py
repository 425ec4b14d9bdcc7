"""Cache isolation between runs on a real vLLM (CPU, tiny random-weight Llama).

Two different runs back to back on one server (the same trace and seed through
two backends, as a user comparing backends would): with ``flush_cache`` on, the
second run finds a cold cache, so every round's cached tokens are exactly the
plan's carried context rounded down to whole blocks; with it off and no salt, the
second run is served the first run's blocks and the warm-cache warning fires; a
per-run ``token_salt`` isolates the runs without a flush. The session server is
started by ``scripts/vllm_cpu.sh`` with ``VLLM_SERVER_DEV_MODE=1`` (its default),
so ``POST /reset_prefix_cache`` is served.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from workbench import data
from workbench.backends.flush import flush_prefix_cache
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.records import RequestRecord, RunResult

from .conftest import VLLMServer
from .test_vllm_replay import SESSION_TRACE, floor_to, measured

pytestmark = pytest.mark.real_engine

_seeds = itertools.count(7_000_000 + __import__("random").SystemRandom().randrange(1 << 20))


async def runs(server: VLLMServer, tmp_path: Any, **backend: Any) -> list[RunResult]:
    seed = next(_seeds)
    got = []
    for name in ("openai", "vllm-tokens"):
        cfg: dict[str, Any] = {
            "target": server.url, "seed": seed, "out_dir": str(tmp_path),
            "backend": {"name": name, "options": {"model": server.model},
                        "scrape_interval_s": 0.1, **backend},
            "trace": {"path": str(data.path(SESSION_TRACE))},
            "context": {"policy": "prefix-preserving", "max_model_len": server.max_model_len},
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, "max_concurrency": 4},
        }  # fmt: skip
        got.append(await run_async(cfg))
    return got


def cached_vs_plan(result: RunResult, block: int) -> list[tuple[str, int | None, int]]:
    """(request, cached, the plan rounded down to the block) for every ok round."""
    by_session: dict[str, list[RequestRecord]] = {}
    for r in measured(result):
        assert r.status == "ok", (r.request_id, r.error)
        by_session.setdefault(r.session_id, []).append(r)
    rows = []
    for rounds in by_session.values():
        rounds.sort(key=lambda r: r.round_idx)
        rows.append((rounds[0].request_id, rounds[0].cached_tokens, 0))
        for prev, cur in itertools.pairwise(rounds):
            # the previous request's last output token has no KV: prompt + output − 1
            cacheable = (prev.prompt_tokens or 0) + (prev.completion_tokens or 0) - 1
            want = floor_to(min(cur.derived_prefix, cacheable, (cur.prompt_tokens or 0) - 1), block)
            rows.append((cur.request_id, cur.cached_tokens, want))
    return rows


async def test_flush_on_every_round_is_the_plan_rounded_down(
    vllm_server: VLLMServer, tmp_path: Any
) -> None:
    probe = await flush_prefix_cache(vllm_server.url)
    if not probe.ok and not vllm_server.started_here:
        pytest.skip(f"external server cannot reset its cache: {probe.detail}")
    assert probe.ok, probe
    for result in await runs(vllm_server, tmp_path, flush_cache=True):
        flush = result.manifest.cache_flush
        assert (flush["ok"], flush["endpoint"], flush["status"]) == (
            True, "POST /reset_prefix_cache", 200)  # fmt: skip
        rows = cached_vs_plan(result, vllm_server.block_size)
        assert [c for _, c, _ in rows] == [w for _, _, w in rows], rows
        s = summarize(result)
        assert not s["warm_cache"]["warm"], s["warm_cache"]
        assert s["cache_unreported_requests"] == 0
        # the server's own evidence, from its /metrics timeline (vLLM names)
        server = s["server"]
        assert server["engine"] == "vllm" and server["samples"] >= 2, server
        assert server["preemptions"] == 0  # a 1 GiB cache: nothing to preempt
        # the gauges were found under vLLM's names; their peaks depend on a scrape landing
        # while requests run (exact values: tests/metrics/test_server_evidence.py, embedded engine)
        assert server["peak_running_requests"] is not None, server
        assert server["peak_kv_cache_usage"] is not None, server


async def test_flush_off_no_salt_the_warm_cache_warning_fires(
    vllm_server: VLLMServer, tmp_path: Any
) -> None:
    first, second = await runs(vllm_server, tmp_path, flush_cache=False)
    assert first.manifest.cache_flush["attempted"] is False
    assert not summarize(first)["warm_cache"]["warm"]  # a seed no earlier run used
    s = summarize(second)
    assert s["warm_cache"]["warm"], s["warm_cache"]
    assert "warm cache" in s["warm_cache"]["warning"]
    assert s["actual_prefix_hit_rate"] > s["planned_prefix_hit_rate_measured"]


async def test_a_per_run_salt_isolates_without_a_flush(
    vllm_server: VLLMServer, tmp_path: Any
) -> None:
    for result in await runs(vllm_server, tmp_path, flush_cache=False, token_salt="run"):
        rows = cached_vs_plan(result, vllm_server.block_size)
        assert [c for _, c, _ in rows] == [w for _, _, w in rows], rows
        assert not summarize(result)["warm_cache"]["warm"]
