"""The two HTTP clients (``executor.http``) give the same records against the embedded engine.

One replay per client, each against its own fresh engine, one request at a time
(so the engine's cache sees the same order): every record field that is not a
time must be equal — status, HTTP status, error, token events and their id
counts, prompt/completion/cached tokens, finish reason, echoed prompt tokens (of a
disconnect's error, the words before the client's own detail) —
and the times must be ordered the same way (dispatch < first token <= last <= end).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from workbench.backends.transport import HTTP_CLIENTS
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.records import RequestRecord
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
FIELDS = (
    "request_id", "status", "http_status", "error", "token_counts", "sent_prompt_tokens",
    "prompt_tokens", "completion_tokens", "cached_tokens", "cached_tokens_reported",
    "finish_reason", "echoed_prompt_tokens",
)  # fmt: skip


async def _records(http: str, backend: str, knobs: dict[str, Any]) -> list[RequestRecord]:
    # parity is of fields, not times: the engine need not pace like a GPU
    async with serve_sim(speedup=1000.0, seed=1, **knobs) as sim:
        cfg = RunConfig.from_dict({
            "trace": SESSIONS,
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, "max_concurrency": 1,
                        "stop_session_on_error": False},
            "backend": {"name": backend, "preflight": False, "scrape_interval_s": None},
            "target": sim.base_url,
            "executor": {"http": http},
        })  # fmt: skip
        async with asyncio.timeout(60):
            result = await run_async(cfg)
    return sorted(result.records, key=lambda r: r.request_id)


def _view(rec: RequestRecord) -> dict[str, Any]:
    view = {f: getattr(rec, f) for f in FIELDS}
    err = rec.error
    if err and "disconnected mid-stream" in err:  # the detail after ": " is each client's own
        view["error"] = err.split(": ")[0]
    return view


@pytest.mark.parametrize(
    ("backend", "knobs"),
    [
        ("openai", {}),
        ("vllm-tokens", {}),
        ("sglang-tokens", {}),
        ("openai-chat", {}),
        ("openai", {"error_rate": 0.5}),
        ("openai", {"disconnect_after_tokens": 5}),
        ("openai", {"omit_usage": True}),
        ("sglang-tokens", {"sglang_prompt_echo": 4}),
    ],
    ids=["openai", "vllm-tokens", "sglang-tokens", "openai-chat", "http-500", "disconnect",
         "no-usage", "sglang-echo"],
)
async def test_both_clients_make_the_same_records(backend: str, knobs: dict[str, Any]):
    runs = {http: await _records(http, backend, knobs) for http in HTTP_CLIENTS}
    base, other = (runs[h] for h in HTTP_CLIENTS)
    assert base, "the replay made no records"
    assert [_view(r) for r in base] == [_view(r) for r in other]
    for rec in (*base, *other):
        assert rec.dispatch_ns is not None and rec.end_ns is not None
        if rec.token_times_ns:
            assert rec.dispatch_ns < rec.token_times_ns[0] <= rec.token_times_ns[-1] <= rec.end_ns
    if knobs:  # the fault did show (the comparison is not of two empty successes)
        assert any(r.status == "error" or r.echoed_prompt_tokens or not r.cached_tokens_reported
                   for r in base)  # fmt: skip


def test_executor_http_names_a_client():
    from workbench.backends.transport import TransportOptions
    from workbench.errors import ConfigError

    assert RunConfig.from_dict({}).executor.http == "httptools"
    cfg = RunConfig.from_dict({"executor": {"http": "aiohttp"}})
    assert TransportOptions.of_run(cfg, "http://x").http == "aiohttp"
    with pytest.raises(ConfigError, match=r"executor\.http 'curl' is unknown; valid: httptools"):
        RunConfig.from_dict({"executor": {"http": "curl"}})
