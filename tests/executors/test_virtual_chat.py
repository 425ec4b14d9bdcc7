"""``openai-chat`` in virtual time: the engine sees the prompt a live server would.

A live chat run sends text messages; the embedded server wraps them in its chat
template (``sim.wire.chat_prompt``: role and end-of-turn tokens), so the engine's prompt
and its prefix-cache blocks hold template tokens. The virtual sender builds the same
messages with the codec and the same template, so a run live (real HTTP) and in virtual
time gives every request the same prompt, cached and output token counts
(docs/virtual-time.md, "Chat in virtual time").
"""

from __future__ import annotations

import asyncio

import pytest

from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate

LIMIT = 90.0
SESSIONS = str(data_path("tracelab/multi_session_example.csv"))  # rounds reuse their prefix
MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def _cfg(trace: str, stream: bool, **backend: object) -> dict:
    return {
        "trace": {"path": trace, "max_items": 40},
        "arrival": {"mode": "saturated", "max_concurrency": 1, "tool_wait_scale": 0,
                    "output_len": "fixed:6"},
        "backend": {"name": "openai-chat", "stream": stream, "scrape_interval_s": None,
                    "options": backend},
    }  # fmt: skip


def _tokens(res) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((r.request_id, r.status, r.planned_prefix_tokens, r.planned_input_tokens,
                   r.sent_prompt_tokens, r.prompt_tokens, r.cached_tokens,
                   r.completion_tokens) for r in res.records)


@pytest.mark.parametrize(("trace", "stream", "options"), [
    (SESSIONS, True, {}),
    (SESSIONS, False, {}),
    (SESSIONS, True, {"initial_overhead_tokens": 3, "turn_overhead_tokens": 3}),
    (MOONCAKE, True, {}),
])
async def test_chat_live_and_virtual_give_the_same_token_counts(sim, trace, stream, options):
    """One at a time (so the cache state each request meets is the same in both), the
    same requests, template tokens and cache hits, live and virtual."""
    cfg = _cfg(trace, stream, **options)
    async with asyncio.timeout(LIMIT):
        live = await run_async({**cfg, "target": sim.base_url})
    virtual = simulate(cfg)
    assert all(r.status == "ok" for r in live.records), [r.error for r in live.records]
    assert _tokens(live) == _tokens(virtual)
    # the template is there: the engine counts more than the client sent; a first message
    # with the overhead option at the template's size (3: role, end, assistant) lands
    # on what was sent
    if options:
        assert any(r.prompt_tokens == r.sent_prompt_tokens for r in virtual.records)
    else:
        assert all(r.prompt_tokens > r.sent_prompt_tokens for r in virtual.records)
    if trace == SESSIONS:  # later rounds of a session hit their conversation's blocks
        assert sum(r.cached_tokens for r in virtual.records) > 0
