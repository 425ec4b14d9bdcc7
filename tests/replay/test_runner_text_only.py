"""prefix-preserving against a text-only server: the round fails, naming the cause.

The rule: docs/context-policy.md.
"""

import asyncio

import orjson
from aiohttp import web
from loopback import serve_app

from workbench.data import path as data_path
from workbench.executors.dispatch import run_async


async def _text_only(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for _ in range(body["max_tokens"]):
        chunk = {"choices": [{"index": 0, "text": " w", "finish_reason": None}]}
        await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"],
             "prompt_tokens_details": {"cached_tokens": 0}}
    await resp.write(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _replay(policy):
    async with asyncio.timeout(30), serve_app([web.post("/v1/completions", _text_only)]) as url:
        return await run_async({
            "trace": str(data_path("tracelab/multi_session_example.csv")),
            "context": policy,
            "arrival": {"mode": "saturated", "tool_wait_scale": 0, "output_len": "fixed:3"},
            "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
            "target": url,
        })


async def test_prefix_preserving_fails_rounds_without_output_ids():
    result = await _replay("prefix-preserving")
    assert result.records and all(r.round_idx == 0 for r in result.records)
    for r in result.records:
        assert r.status == "error" and "no output token ids" in r.error


async def test_trace_reported_carries_on_and_logs_the_shortfall():
    result = await _replay("trace-reported")
    assert all(r.status == "ok" for r in result.records)
    later = [r for r in result.records if r.round_idx > 0 and r.planned_prefix_tokens]
    assert later and any(r.prefix_shortfall_tokens > 0 for r in later)
    assert all(r.derived_prefix + r.prefix_shortfall_tokens == r.planned_prefix_tokens
               for r in later)
