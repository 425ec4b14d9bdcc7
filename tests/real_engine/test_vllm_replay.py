"""Replays against a real vLLM (CPU, tiny random-weight Llama): counts, never timings.

What a real engine must confirm about workbench's measurements:

* every ok request's ``prompt_tokens`` is the planned prefix + input (the
  shortfall, if any, is sent as extra fresh input, so the total stays the plan);
* ``cached_tokens`` is what vLLM's block cache can give: the shared prefix,
  capped at what the earlier request left in the cache and at ``prompt − 1``,
  rounded down to whole blocks; it is reported (present) even when 0;
* the server's ``vllm:prefix_cache_hits_total`` / ``queries_total`` deltas over
  a run equal the sums of ``cached_tokens`` / ``prompt_tokens`` in the records
  (preflight probes included);
* the ``x-request-id`` sent is the id the server reports back;
* the block size workbench detects is the server's.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from workbench import data
from workbench.backends.scrape import detect_block_size
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.records import RequestRecord, RunResult
from workbench.report.headline import run_headline
from workbench.traces.load import load_trace

from .conftest import VLLMServer, get_metrics

pytestmark = pytest.mark.real_engine

SESSION_TRACE = "tracelab/multi_session_example.csv"
MOONCAKE_TRACE = "mooncake/conversation_trace_head600.jsonl"
MOONCAKE_ROWS = 20
BACKENDS = ("openai", "vllm-tokens")
POLICIES = ("trace-reported", "prefix-preserving")
SERVER_ID_PREFIX = {"openai": "cmpl-", "vllm-tokens": "generate-tokens-"}
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"

# One random base per test session: a server reused across sessions (WORKBENCH_VLLM_URL)
# must not see the same synthetic prompts twice, or first rounds would hit the cache.
SEED_BASE = random.SystemRandom().randrange(1, 1 << 30)
_seeds = iter(range(SEED_BASE, SEED_BASE + 1000))


def floor_to(n: int, block: int) -> int:
    return max(0, n) // block * block


async def replay(server: VLLMServer, tmp_path: Any, stream: bool = True,
                 preflight: bool | None = None, **cfg: Any) -> tuple[RunResult, dict]:
    """One replay through ``run_async``; returns the result and the /metrics deltas."""
    config = {
        "target": server.url,
        "backend": {"name": cfg.pop("backend"), "options": {"model": server.model},
                    "stream": stream, "preflight": preflight},
        "seed": next(_seeds),
        "out_dir": str(tmp_path),
        **cfg,
    }
    before = get_metrics(server.url)
    result = await run_async(config)
    after = get_metrics(server.url)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (HITS, QUERIES)}
    return result, delta


def measured(result: RunResult) -> list[RequestRecord]:
    return [r for r in result.records if not r.warmup]


def preflight_probes(result: RunResult) -> list[dict]:
    pf = result.manifest.preflight or {}
    return [p for p in (pf.get("first"), pf.get("second")) if p and p.get("status") == "ok"]


def check_common(result: RunResult, delta: dict, server: VLLMServer, backend: str,
                 stream: bool = True) -> None:
    """The invariants every replay against vLLM must satisfy (context-guard skips allowed).

    ``stream=False`` (docs/wire-protocols.md, "Non-streaming"): one answer, no token
    events, TTFT = E2E; the cached count is reported in every answer, 0 included."""
    every = measured(result)
    # context-guard skips make a run "partial" (docs/trace-bounds.md), and nothing else may
    skipped = sum(r.status == "skipped" for r in every)
    status = result.manifest.status
    assert status == ("partial" if skipped else "completed"), result.manifest.stop_reason
    if skipped:
        done = result.manifest.completion
        assert (done["skipped_rounds"], done["not_sent_rounds"]) == (skipped, 0), done
    bad = [
        (r.request_id, r.status, r.error)
        for r in every
        if r.status != "ok" and not (r.status == "skipped" and "context guard" in (r.error or ""))
    ]
    assert not bad, bad
    recs = [r for r in every if r.status == "ok"]
    assert recs, "no ok records"
    for r in recs:
        planned = r.planned_prefix_tokens + r.planned_input_tokens
        assert r.sent_prompt_tokens == planned, r.request_id
        assert r.prompt_tokens == planned, (r.request_id, r.prompt_tokens, planned)
        assert r.derived_prefix + r.planned_input_tokens + r.prefix_shortfall_tokens == planned
        assert r.completion_tokens == r.planned_output_tokens, r.request_id
        assert r.finish_reason == "length", r.request_id
        if not stream:
            assert not r.token_counts and r.first_token_ns == r.end_ns, r.request_id
            assert r.cached_tokens_reported, (r.request_id, r.cached_tokens)
            assert r.cached_tokens is not None and r.cached_tokens % server.block_size == 0
            continue
        assert sum(r.token_counts) == r.completion_tokens, r.request_id
        # vLLM 0.32 reports prompt_tokens_details.cached_tokens even when it is 0
        assert r.cached_tokens_reported, r.request_id
        assert r.cached_tokens is not None and r.cached_tokens % server.block_size == 0
        # the x-request-id header is adopted: the server's id is ours with its prefix
        assert r.server_request_id == SERVER_ID_PREFIX[backend] + r.request_id
        if backend == "openai" and server.started_here:  # --enable-per-request-metrics
            assert "time_to_first_token_ms" in r.extra.get("server_metrics", {}), r.request_id
    probes = preflight_probes(result)
    assert len(probes) == 2, result.manifest.preflight
    assert result.manifest.preflight["cached_tokens"] > 0
    # the server's counters moved by exactly what the records say (probes included)
    hits = sum(r.cached_tokens or 0 for r in recs) + sum(p["cached_tokens"] for p in probes)
    queries = sum(r.prompt_tokens or 0 for r in recs) + sum(p["prompt_tokens"] for p in probes)
    assert delta[HITS] == hits, (delta, hits)
    assert delta[QUERIES] == queries, (delta, queries)


async def test_block_size_detected(vllm_server: VLLMServer) -> None:
    assert vllm_server.block_size % 32 == 0  # the CPU attention backend's rule
    assert await detect_block_size(vllm_server.url) == vllm_server.block_size


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_session_trace(vllm_server: VLLMServer, tmp_path: Any, backend: str, policy: str):
    result, delta = await replay(
        vllm_server, tmp_path, backend=backend,
        trace={"path": str(data.path(SESSION_TRACE))},
        context={"policy": policy, "max_model_len": vllm_server.max_model_len},
    )
    check_common(result, delta, vllm_server, backend)
    check_session_hits(result, vllm_server)


async def test_session_trace_non_streaming(vllm_server: VLLMServer, tmp_path: Any) -> None:
    """``backend.stream: false`` against the real server: the same prompts, the same
    cache hits, one answer each (TTFT = E2E), the summary saying so."""
    result, delta = await replay(
        vllm_server, tmp_path, stream=False, backend="openai",
        trace={"path": str(data.path(SESSION_TRACE))},
        context={"policy": "trace-reported", "max_model_len": vllm_server.max_model_len},
    )
    check_common(result, delta, vllm_server, "openai", stream=False)
    check_session_hits(result, vllm_server)
    assert summarize(result)["response_mode"]["stream"] is False


def check_session_hits(result: RunResult, vllm_server: VLLMServer) -> None:
    """The session trace's cache hits: each later round gets what its predecessor left."""
    recs = measured(result)
    workload = load_trace(str(data.path(SESSION_TRACE)))
    assert len(recs) == workload.n_rounds
    # block size: detected from vllm:cache_config_info, equal to the server's
    assert result.manifest.block_size == vllm_server.block_size
    bs = vllm_server.block_size
    by_session: dict[str, list[RequestRecord]] = {}
    for r in recs:
        by_session.setdefault(r.session_id, []).append(r)
    later = 0
    for rounds in by_session.values():
        rounds.sort(key=lambda r: r.round_idx)
        assert not rounds[0].cached_tokens, rounds[0].request_id  # nothing shared yet
        for prev, cur in itertools.pairwise(rounds):
            # The KV of the previous request's last output token was never computed, so
            # its prompt + output − 1 tokens are what the cache can hold of that context.
            cacheable = (prev.prompt_tokens or 0) + (prev.completion_tokens or 0) - 1
            want = floor_to(min(cur.derived_prefix, cacheable, (cur.prompt_tokens or 0) - 1), bs)
            assert (cur.cached_tokens or 0) == want, (cur.request_id, cur.cached_tokens, want)
            # never a hit the plan did not claim
            assert (cur.cached_tokens or 0) <= cur.planned_prefix_tokens
            later += 1
    assert later == workload.n_rounds - len(workload.units)


def shared_tokens(a: tuple[int, ...], la: int, b: tuple[int, ...], lb: int, block: int) -> int:
    """Tokens two hash-id prompts share (equal ids ⇒ equal blocks; a cut block is a prefix)."""
    n = 0
    for k in range(min(len(a), -(-la // block), len(b), -(-lb // block))):
        if a[k] != b[k]:
            break
        sa, sb = min(block, la - k * block), min(block, lb - k * block)
        n += min(sa, sb)
        if sa != sb:
            break
    return n


@pytest.mark.parametrize("backend", BACKENDS)
async def test_mooncake_slice(vllm_server: VLLMServer, tmp_path: Any, backend: str) -> None:
    path = str(data.path(MOONCAKE_TRACE))
    result, delta = await replay(
        vllm_server, tmp_path, backend=backend,
        trace={"path": path, "max_items": MOONCAKE_ROWS},
        # one request at a time: which earlier prompt is in the cache is then exact
        arrival={"mode": "saturated", "max_concurrency": 1, "output_len": "fixed:8"},
        # half of these rows are longer than the tiny server's context: the guard skips them
        context={"max_model_len": vllm_server.max_model_len},
    )
    check_common(result, delta, vllm_server, backend)
    every = measured(result)
    assert len(every) == MOONCAKE_ROWS
    workload = load_trace(path).head(MOONCAKE_ROWS)
    fits = {r.request_id for r in workload.rounds() if r.prompt_len + 8 < vllm_server.max_model_len}
    assert {r.request_id for r in every if r.status == "ok"} == fits
    assert len(fits) >= MOONCAKE_ROWS // 4
    recs = [r for r in every if r.status == "ok"]
    hblock = workload.block_size
    assert hblock and result.manifest.block_size == hblock  # prompts are built in trace blocks
    rounds = {r.request_id: r for r in workload.rounds()}
    bs = vllm_server.block_size
    done: list[tuple[tuple[int, ...], int]] = []
    total_hits = 0
    for rec in sorted(recs, key=lambda r: r.dispatch_ns or 0):
        rnd = rounds[rec.request_id]
        ids, n = tuple(rnd.hash_ids or ()), rnd.prompt_len
        shared = max((shared_tokens(ids, n, a, la, hblock) for a, la in done), default=0)
        want = floor_to(min(shared, n - 1), bs)
        assert rec.cached_tokens == want, (rec.request_id, rec.cached_tokens, want, shared)
        total_hits += want
        done.append((ids, n))
    assert total_hits > 0  # the slice does share prefixes


@pytest.mark.parametrize("backend", BACKENDS)
async def test_context_guard_catches_silent_clamp(
    vllm_server: VLLMServer, tmp_path: Any, backend: str
) -> None:
    """prompt + max_tokens > max_model_len: the guard skips the round before vLLM clamps it.

    Without the guard vLLM clamps ``max_tokens`` to ``max_model_len − prompt``: on
    ``/inference/v1/generate`` silently (HTTP 200, 8 of 32 tokens, "length"), on
    ``/v1/completions`` it then rejects workbench's ``min_tokens`` (HTTP 400).
    """
    limit = vllm_server.max_model_len
    first_in, first_out, out = 256, 8, 32
    # round 1's prompt fits (limit − 8 tokens) but prompt + 32 output tokens does not
    grow = limit - 8 - (first_in + first_out)
    csv = tmp_path / "overflow.csv"
    csv.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
        f"0,0,0,0,{first_in},{first_out},0\n"
        f"0,0,1,{first_in + first_out},{grow},{out},0\n"
    )
    common = {"backend": backend, "trace": {"path": str(csv)}}
    guarded, _ = await replay(
        vllm_server, tmp_path, context={"max_model_len": limit}, **dict(common)
    )
    g0, g1 = sorted(measured(guarded), key=lambda r: r.round_idx)
    assert g0.status == "ok"
    assert g1.status == "skipped" and "context guard" in (g1.error or ""), g1.error
    assert g1.http_status is None  # never sent

    # without the guard the preflight finds the round that cannot fit, before any request
    before = get_metrics(vllm_server.url)
    with pytest.raises(ConfigError) as refused:
        await replay(vllm_server, tmp_path, **dict(common))
    assert get_metrics(vllm_server.url)[QUERIES] == before[QUERIES]  # nothing was sent
    said = str(refused.value)
    assert f"the server's context is {limit} tokens" in said and "max_model_len" in said
    assert "1 of 2 planned requests (in 1 of 1 units)" in said, said
    assert f"the longest {limit - 8 + out}" in said and f"--max-model-len {limit}" in said

    # sent anyway (no preflight): what vLLM does with it
    unguarded, _ = await replay(vllm_server, tmp_path, preflight=False, **dict(common))
    u0, u1 = sorted(measured(unguarded), key=lambda r: r.round_idx)
    assert u0.status == "ok"
    assert u1.sent_prompt_tokens == limit - 8
    if backend == "vllm-tokens":  # silently clamped; the transport flags it
        assert (u1.status, u1.http_status, u1.finish_reason) == ("ok", 200, "length")
        assert u1.completion_tokens == limit - u1.sent_prompt_tokens == 8
        assert u1.extra["output_clamped"] == {"planned": out, "generated": 8}
        line = run_headline(summarize(unguarded), unguarded.manifest)
        assert ("2/2 ok · 1 of 2 ok ended short of max_tokens: 8 of 32 tokens (finish "
                "length)") in line, line
    else:  # clamped to 8, then our min_tokens=32 is rejected; the error says why
        assert (u1.status, u1.http_status) == ("error", 400)
        assert "min_tokens" in (u1.error or "") and "context.max_model_len" in (u1.error or "")
        # the headline says how many failed and why, not only the survivors' latency
        line = run_headline(summarize(unguarded), unguarded.manifest)
        assert "1/2 ok · 1 failed: HTTP 400 ×1 (min_tokens must be less than" in line, line
