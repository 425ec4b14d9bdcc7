"""Faults end as records with errors while the run goes on (embedded engine switches).

Every test runs once per HTTP client (``executor.http``)."""

import asyncio
from pathlib import Path

import pytest

from workbench.backends.transport import HTTP_CLIENTS
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
CLIENT = {"http": HTTP_CLIENTS[0]}


@pytest.fixture(autouse=True, params=HTTP_CLIENTS)
def http_client(request):
    CLIENT["http"] = request.param
    yield request.param
    CLIENT["http"] = HTTP_CLIENTS[0]


async def _replay(knobs, backend="openai", **arrival):
    async with serve_sim(speedup=50.0, **knobs) as sim:
        cfg = RunConfig.from_dict({
            "trace": SESSIONS,
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, **arrival},
            "backend": {"name": backend, "preflight": False},
            "target": sim.base_url,
            "executor": {"http": CLIENT["http"]},
        })
        async with asyncio.timeout(60):
            return await run_async(cfg)


def _planned_rounds():
    return len(Path(SESSIONS).read_text().splitlines()) - 1


async def test_http_500_is_recorded_and_the_run_goes_on():
    result = await _replay({"error_rate": 0.5, "seed": 3}, stop_session_on_error=False)
    statuses = [r.status for r in result.records]
    assert len(statuses) == _planned_rounds()
    assert "error" in statuses and "ok" in statuses
    failed = next(r for r in result.records if r.status == "error")
    assert failed.http_status == 500 and failed.error


async def test_stop_session_on_error_ends_only_that_session():
    result = await _replay({"error_rate": 1.0})
    # every session stops after its first failed round
    assert len(result.records) == len({r.session_id for r in result.records})
    assert all(d["reason"] == "error" for d in result.lifecycle)


async def test_disconnect_mid_stream_keeps_partial_tokens():
    result = await _replay({"disconnect_after_tokens": 5})
    rec = result.records[0]
    assert rec.status == "error"
    assert 0 < sum(rec.token_counts) <= 5


async def test_stall_hits_the_stream_idle_timeout():
    result = await _replay({"stall_after_tokens": 2, "stall_s": 5.0},
                           stream_idle_timeout_s=0.3, max_concurrency=1)
    assert result.records[0].status == "error"
    assert "idle" in result.records[0].error.lower()


async def test_missing_usage_is_flagged():
    result = await _replay({"omit_usage": True})
    for rec in result.records:
        assert not rec.cached_tokens_reported


async def test_cumulative_sglang_stream_fails_naming_the_flag():
    result = await _replay({"sglang_cumulative": True}, backend="sglang-tokens")
    errors = [r.error for r in result.records if r.status == "error"]
    assert errors and all("stream-output" in e for e in errors)


async def test_prompt_echo_is_trimmed_and_counted():
    result = await _replay({"sglang_prompt_echo": 4}, backend="sglang-tokens")
    assert all(r.status == "ok" for r in result.records), result.records[0].error
    assert all(r.echoed_prompt_tokens == 4 for r in result.records)
    assert all(r.completion_tokens == r.planned_output_tokens for r in result.records)


@pytest.mark.parametrize("backend", ["openai", "vllm-tokens", "sglang-tokens"])
async def test_metrics_timeline_is_scraped(backend):
    result = await _replay({}, backend=backend)
    assert result.metrics_timeline
