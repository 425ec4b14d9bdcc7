"""Replays against llama.cpp's ``llama-server`` (CPU, tiny random-weight Llama): counts only.

llama.cpp is the second real engine (after vLLM). What it must confirm about workbench:

* every ok request's ``prompt_tokens`` is the number of token ids sent (a token-id prompt
  gets no BOS added);
* ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``) is at *token*
  granularity and follows the slot rule: the common prefix of the new prompt and what
  the slot holds (the previous request's prompt plus its output but the last token),
  capped at ``prompt − 1`` (llama.cpp always evaluates at least one prompt token);
* ``/metrics``: ``Δllamacpp:prompt_tokens_cached_total`` equals Σ ``cached_tokens`` and
  ``Δllamacpp:prompt_tokens_total`` equals Σ (``prompt_tokens − cached_tokens``):
  llama.cpp's prompt counter *excludes* cached tokens (preflight probes included);
* ``/v1/completions`` streams text without output token ids, so the ``openai`` backend
  cannot carry the exact output into the next round: only ``trace-reported`` is exact.

The server runs with one slot (``-np 1``: the KV cache is per slot) and
``--cache-ram 0`` (no host-memory prompt cache), so "the previous request on the slot" is
the previous request it ran. A second server keeps the default ``--cache-ram`` (host
memory saves and restores prompts): three sessions in flight then still hit.

llama-server closes the connection after every streamed response although it advertises
keep-alive; workbench's transport sends a request lost on such a pooled connection once
more on a fresh one (flagged ``stale_connection_retry``). A request that still races
fails the test as ``KeepAliveRace``.

Set-up: ``scripts/llama_cpp.sh setup`` (cold: 7-12 min on 2 cores, mostly the C++ build;
kept under ``~/.cache/workbench/llama-cpp``). Without it these tests are skipped, unless
``WORKBENCH_REAL_ENGINE=1`` and ``WORKBENCH_LLAMA_CPP=1``, which run the set-up first and
turn every problem into a failure. Each test module run starts its own server (~1 s) on
127.0.0.1 and stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from workbench import data
from workbench.backends.base import BackendError
from workbench.backends.scrape import (
    LLAMACPP_CACHED,
    LLAMACPP_PROMPT,
    LLAMACPP_WITH_CACHED,
    parse_metrics,
)
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.records import RequestRecord, RunResult
from workbench.report.headline import run_headline
from workbench.traces.load import load_trace

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "llama_cpp.sh"
HOME = Path(os.environ.get("LLAMA_CPP_HOME") or Path.home() / ".cache/workbench/llama-cpp")
INSTANCE = "pytest-llama"
SETUP_TIMEOUT_S = 1800
START_TIMEOUT_S = 120
CTX = 8192
SESSION_TRACE = "tracelab/multi_session_example.csv"
OUTPUT_LEN = 8


def _set_up_present() -> bool:
    return (HOME / ".workbench-stamp").exists() and (HOME / "build/bin/llama-server").exists()


REQUIRED = (
    os.environ.get("WORKBENCH_REAL_ENGINE") == "1" and os.environ.get("WORKBENCH_LLAMA_CPP") == "1"
)
# The set-up (a ~7 min C++ build) runs inside the first test's fixture when required.
pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timeout(SETUP_TIMEOUT_S + 300 if REQUIRED and not _set_up_present() else 300),
]

# One random base per test session: prompts never repeat across sessions on a reused server.
SEED_BASE = random.SystemRandom().randrange(1, 1 << 30)
_seeds = iter(range(SEED_BASE, SEED_BASE + 1000))


@dataclass(frozen=True)
class LlamaServer:
    url: str
    model: str
    ctx: int


def _script(*args: str, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def get_metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        values, _ = parse_metrics(resp.read().decode())
    return values


def _ensure_set_up(env: dict[str, str]) -> None:
    if _set_up_present():
        return
    if not REQUIRED:
        pytest.skip(
            f"llama.cpp not built ({HOME} has no set-up): run `scripts/llama_cpp.sh setup` "
            "(~9 min on 2 cores, outside the repo), or set WORKBENCH_REAL_ENGINE=1 and "
            "WORKBENCH_LLAMA_CPP=1 to build and run"
        )
    done = _script("setup", timeout=SETUP_TIMEOUT_S, env=env)
    if done.returncode != 0:
        pytest.fail(f"scripts/llama_cpp.sh setup failed:\n{done.stderr[-3000:]}")


def _serve(instance: str, cache_ram: str) -> Iterator[LlamaServer]:
    """Start ``llama-server -np 1`` through the script (set up first if needed), then stop it.

    ``cache_ram``: ``--cache-ram`` MiB ("0": only the slot's own KV is reused; "": the
    server's default host-memory prompt cache).
    """
    env = {**os.environ, "LLAMA_CPP_NAME": instance, "LLAMA_CPP_CTX": str(CTX),
           "LLAMA_CPP_PARALLEL": "1", "LLAMA_CPP_CACHE_RAM": cache_ram}
    _ensure_set_up(env)
    started = _script("start", timeout=START_TIMEOUT_S, env=env)
    if started.returncode != 0:
        pytest.fail(f"scripts/llama_cpp.sh start failed:\n{started.stderr[-3000:]}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as resp:
            model = str(json.load(resp)["data"][0]["id"])
        yield LlamaServer(url=url, model=model, ctx=CTX)
    finally:
        _script("stop", timeout=60, env=env)


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaServer]:
    """One slot, no host-memory prompt cache: the slot rule is exact."""
    yield from _serve(INSTANCE, "0")


@pytest.fixture(scope="module")
def llama_server_ram() -> Iterator[LlamaServer]:
    """One slot with the server's default host-memory prompt cache (--cache-ram 8192)."""
    yield from _serve(INSTANCE + "-ram", "")


async def replay(server: LlamaServer, tmp_path: Any, **cfg: Any) -> tuple[RunResult, dict]:
    """One replay through ``run_async``; returns the result and the /metrics deltas."""
    config = {
        "target": server.url,
        "backend": {"name": "openai", "options": {"model": server.model}},
        "seed": next(_seeds),
        "out_dir": str(tmp_path),
        **cfg,
    }
    before = get_metrics(server.url)
    result = await run_async(config)
    after = get_metrics(server.url)
    names = (LLAMACPP_CACHED, LLAMACPP_PROMPT, LLAMACPP_WITH_CACHED)
    return result, {k: after[k] - before[k] for k in names}


def measured(result: RunResult) -> list[RequestRecord]:
    return [r for r in result.records if not r.warmup]


def preflight_probes(result: RunResult) -> list[dict]:
    pf = result.manifest.preflight or {}
    return [p for p in (pf.get("first"), pf.get("second")) if p and p.get("status") == "ok"]


class KeepAliveRace(Exception):
    """A request failed on a pooled connection llama-server had already closed."""


#: what workbench's transport reports for a request written to a pooled connection the
#: server closed right after the previous streamed response (aiohttp: the write fails, or
#: the server is gone before the response head); nothing of the request reached the server.
STALE_SIGNATURES = ("server disconnected mid-stream", "Can not write request body")


def stale(error: str | None) -> bool:
    return any(sig in (error or "") for sig in STALE_SIGNATURES)


async def replay_or_race(server: LlamaServer, tmp_path: Any, **cfg: Any) -> tuple[RunResult, dict]:
    try:
        return await replay(server, tmp_path, **cfg)
    except BackendError as exc:  # the preflight's second probe goes out right after the first
        if stale(str(exc)):
            raise KeepAliveRace(str(exc)) from exc
        raise


def test_server_closes_the_connection_after_a_stream(llama_server: LlamaServer) -> None:
    """The server-side fact behind KEEP_ALIVE_XFAIL, on a bare socket (deterministic)."""
    port = int(llama_server.url.rsplit(":", 1)[1])
    body = json.dumps({"prompt": [1000, 1001, 1002], "max_tokens": 2, "stream": True}).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        buf = b""
        for _ in range(1000):  # bounded: a few reads carry the whole response
            if buf.endswith(b"\r\n0\r\n\r\n"):
                break
            chunk = sock.recv(65536)
            assert chunk, f"closed before the end of the stream: {buf[-200:]!r}"
            buf += chunk
        headers = buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        assert "transfer-encoding: chunked" in headers
        assert "keep-alive: timeout=" in headers  # advertised ...
        assert "connection: close" not in headers
        assert b"data: [DONE]" in buf
        sock.settimeout(5)
        assert sock.recv(1) == b""  # ... but the server closes right after the last chunk


SESSION_ARRIVAL = {"max_concurrency": 1, "output_len": f"fixed:{OUTPUT_LEN}", "tool_wait_scale": 0}


def check_replay(result: RunResult, delta: dict) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """Invariants of every session replay against llama.cpp; returns (all, raced) records.

    Raced records (lost to the keep-alive close) are allowed; their sessions stop there.
    """
    assert result.manifest.status in ("completed", "partial"), result.manifest.stop_reason
    recs = measured(result)
    raced = [r for r in recs if r.status == "error" and stale(r.error)]
    assert all(r.http_status is None and not r.token_counts for r in raced)
    bad = [(r.request_id, r.status, r.error) for r in recs if r.status != "ok" and r not in raced]
    # after a raced round its session stops (stop_session_on_error): later rounds are skipped
    assert all(s == "skipped" for _, s, _ in bad) if raced else not bad, bad
    workload = load_trace(str(data.path(SESSION_TRACE)))
    assert len(recs) == workload.n_rounds or raced
    ok = [r for r in recs if r.status == "ok"]
    for r in ok:
        assert r.prompt_tokens == r.sent_prompt_tokens, (r.request_id, r.prompt_tokens)
        assert r.sent_prompt_tokens == r.planned_prefix_tokens + r.planned_input_tokens
        assert r.completion_tokens == OUTPUT_LEN, r.request_id
        assert r.finish_reason == "length", r.request_id
        assert r.cached_tokens_reported, r.request_id  # present even when 0
        # text-only stream: each non-empty text chunk is one token event, ids unknown;
        # a token that decodes to no text (a control token) is no event
        assert 0 < sum(r.token_counts) <= OUTPUT_LEN, r.request_id
        assert r.server_request_id and r.server_request_id.startswith("chatcmpl-")
        assert r.request_id not in r.server_request_id  # x-request-id is not adopted
    probes = preflight_probes(result)
    assert len(probes) == 2, result.manifest.preflight
    first, second = probes
    assert first["cached_tokens"] == 0 and first["cached_tokens_reported"]
    assert second["cached_tokens"] == second["prompt_tokens"] - 1  # a repeat: all but one
    # the server's counters moved by exactly what the records say (probes included);
    # llamacpp:prompt_tokens_total counts only the tokens it evaluated
    cached = sum(r.cached_tokens or 0 for r in ok) + sum(p["cached_tokens"] for p in probes)
    prompt = sum(r.prompt_tokens or 0 for r in ok) + sum(p["prompt_tokens"] for p in probes)
    assert delta[LLAMACPP_CACHED] == cached, (delta, cached)
    assert delta[LLAMACPP_WITH_CACHED] == prompt, (delta, prompt)
    assert delta[LLAMACPP_PROMPT] == prompt - cached, (delta, prompt, cached)
    # the scraper kept the llamacpp: series (and the derived sum) in the run's timeline
    rows = [row for row in result.metrics_timeline if "error" not in row]
    assert rows and all(LLAMACPP_WITH_CACHED in row for row in rows)
    return recs, raced


def follows(prev: RequestRecord | None, cur: RequestRecord) -> bool:
    """``cur`` is the next round of ``prev``'s session."""
    return prev is not None and (prev.session_id, prev.round_idx + 1) == (
        cur.session_id, cur.round_idx
    )


def slot_order(recs: list[RequestRecord]) -> list[RequestRecord]:
    """The ok records in the order the one slot ran them: by first token.

    Not by dispatch: requests sent together (three sessions' first rounds) can reach the
    server's task queue in any order.
    """
    return sorted((r for r in recs if r.status == "ok"), key=lambda r: r.token_times_ns[0])


async def test_session_trace_trace_reported(llama_server: LlamaServer, tmp_path: Any) -> None:
    result, delta = await replay_or_race(
        llama_server, tmp_path,
        trace={"path": str(data.path(SESSION_TRACE))},
        context={"policy": "trace-reported", "max_model_len": llama_server.ctx},
        arrival=SESSION_ARRIVAL,
    )
    recs, raced = check_replay(result, delta)
    # -np 1, --cache-ram 0, one request at a time: the slot holds the last ok request's
    # prompt + output (but its last token). A failed request never reached the slot.
    slot: RequestRecord | None = None
    later = 0
    for cur in slot_order(recs):
        if follows(slot, cur):
            # cur = slot's prompt[:derived] + fresh ids; the output the slot also holds is
            # never in cur (the openai backend cannot carry unknown ids), so the match ends
            # at derived; llama.cpp always evaluates at least the last prompt token
            want = min(cur.derived_prefix, (cur.prompt_tokens or 0) - 1)
            later += 1
        else:
            want = 0  # another session's tokens (or the preflight probe's)
        assert cur.cached_tokens == want, (cur.request_id, cur.cached_tokens, want)
        slot = cur
    assert later > 0
    if raced:
        raise KeepAliveRace(f"{len(raced)} request(s): {raced[0].request_id}: {raced[0].error}")


async def test_interleaved_sessions_and_the_host_memory_cache(
    llama_server: LlamaServer, llama_server_ram: LlamaServer, tmp_path: Any
) -> None:
    """Three sessions in flight on one slot: only --cache-ram brings a session's prefix back.

    Without the host-memory prompt cache the slot holds whichever request ran last (another
    session's), so interleaved rounds hit nothing; with it (the server's default), the
    slot's prompt is saved when a dissimilar request takes the slot, and the best-matching
    saved prompt is restored: every later round gets its whole derived prefix.
    """
    arrival = {**SESSION_ARRIVAL, "mode": "saturated", "max_concurrency": 3}
    results = {}
    for name, server in (("slot", llama_server), ("ram", llama_server_ram)):
        result, delta = await replay_or_race(
            server, tmp_path / name,
            trace={"path": str(data.path(SESSION_TRACE))},
            context={"policy": "trace-reported", "max_model_len": server.ctx},
            arrival=arrival,
        )
        results[name] = check_replay(result, delta)
    raced = results["slot"][1] + results["ram"][1]
    by_id = {name: {r.request_id: r for r in recs} for name, (recs, _) in results.items()}
    later = 0
    for rid, cur in by_id["ram"].items():
        if cur.status != "ok" or cur.round_idx == 0:
            continue
        assert cur.cached_tokens == min(cur.derived_prefix, (cur.prompt_tokens or 0) - 1), rid
        later += 1
    assert later > 0
    # on the slot-only server the sessions did interleave (the slot rule), and so hit less
    slot: RequestRecord | None = None
    for cur in slot_order(results["slot"][0]):
        want = min(cur.derived_prefix, (cur.prompt_tokens or 0) - 1) if follows(slot, cur) else 0
        assert cur.cached_tokens == want, (cur.request_id, cur.cached_tokens, want)
        slot = cur
    hits = {name: sum(r.cached_tokens or 0 for r in recs) for name, (recs, _) in results.items()}
    assert hits["slot"] < hits["ram"] or raced, hits
    if raced:
        raise KeepAliveRace(f"{len(raced)} request(s): {raced[0].request_id}: {raced[0].error}")


async def test_prefix_preserving_fails_the_round_without_output_ids(
    llama_server: LlamaServer, tmp_path: Any
) -> None:
    """``/v1/completions`` on llama.cpp returns no output ids, so ``prefix-preserving``
    cannot carry the conversation: docs/context-policy.md says such a round fails rather than
    continue
    from a context that lacks the model's output. The config accepts the policy (the
    ``openai`` codec returns ids on vLLM); the run finds out on the first round, records
    it with the cause, and each session stops there (``stop_session_on_error``).
    """
    result, _ = await replay_or_race(
        llama_server, tmp_path,
        trace={"path": str(data.path(SESSION_TRACE))},
        context={"policy": "prefix-preserving", "max_model_len": llama_server.ctx},
        arrival=SESSION_ARRIVAL,
        backend={"name": "openai", "options": {"model": llama_server.model}, "preflight": False},
    )
    recs = measured(result)
    raced = [r for r in recs if r.status == "error" and stale(r.error)]
    if raced:
        raise KeepAliveRace(f"{len(raced)} request(s): {raced[0].request_id}: {raced[0].error}")
    assert recs and all(r.round_idx == 0 for r in recs)
    for r in recs:
        assert r.status == "error" and "no output token ids" in (r.error or ""), r.error
        assert r.prompt_tokens == r.planned_prefix_tokens + r.planned_input_tokens


async def test_prompts_longer_than_the_context(llama_server: LlamaServer, tmp_path: Any) -> None:
    """A round longer than the slot's context (``/v1/models``' ``meta.n_ctx``) is found before
    any request is sent, counted and named with what to do; sent anyway (no preflight),
    llama.cpp refuses it with HTTP 400, the record keeps its reason and the headline says
    how many failed and why beside the survivors' latency."""
    csv = tmp_path / "too_long.csv"
    csv.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
        "0,0,0,0,256,8,0\n"
        f"1,0,0,0,{llama_server.ctx + 100},8,0\n"
    )
    cfg = {"trace": {"path": str(csv)}, "arrival": SESSION_ARRIVAL}
    before = get_metrics(llama_server.url)
    with pytest.raises(ConfigError) as refused:
        await replay(llama_server, tmp_path, **cfg)
    assert get_metrics(llama_server.url)[LLAMACPP_PROMPT] == before[LLAMACPP_PROMPT]  # none sent
    said = str(refused.value)
    assert f"the server's context is {llama_server.ctx} tokens" in said and "meta.n_ctx" in said
    assert "1 of 2 planned requests (in 1 of 2 units)" in said, said
    assert f"the longest {llama_server.ctx + 108}" in said, said

    result, _ = await replay(
        llama_server, tmp_path, **cfg,
        backend={"name": "openai", "options": {"model": llama_server.model}, "preflight": False},
    )
    recs = measured(result)
    if any(r.status == "error" and stale(r.error) for r in recs):
        raise KeepAliveRace("a request raced the server's close")
    long = max(recs, key=lambda r: r.planned_input_tokens)
    assert (long.status, long.http_status) == ("error", 400)
    assert "exceeds the available context size" in (long.error or ""), long.error
    line = run_headline(summarize(result), result.manifest)
    assert "1/2 ok · 1 failed: HTTP 400 ×1 (request (" in line, line
    assert "exceeds the available context size (8192 tokens)" in line, line


def test_api_key_reaches_metrics_and_stays_out_of_the_run(tmp_path: Any) -> None:
    """``llama-server --api-key`` guards ``/metrics`` as well as the completions: with the
    key in the environment (``backend.api_key_env``) the scrape and the counters work, and
    the key is in no file of the run; without it the preflight stops the run on the 401."""
    key = f"sk-wb-{random.SystemRandom().randrange(1 << 60):x}"
    env = {**os.environ, "LLAMA_CPP_NAME": INSTANCE + "-key", "LLAMA_CPP_CTX": str(CTX),
           "LLAMA_CPP_PARALLEL": "1", "LLAMA_CPP_CACHE_RAM": "0"}
    _ensure_set_up(env)
    started = _script("start", "--", "--api-key", key, timeout=START_TIMEOUT_S, env=env)
    if started.returncode != 0:
        pytest.fail(f"scripts/llama_cpp.sh start failed:\n{started.stderr[-3000:]}")
    url = started.stdout.strip().splitlines()[-1]
    cfg = {"target": url, "trace": {"path": str(data.path(SESSION_TRACE))},
           "context": {"max_model_len": CTX}, "arrival": SESSION_ARRIVAL,
           "out_dir": str(tmp_path), "backend": {"name": "openai", "options": {
               "model": "tiny-llama"}, "api_key_env": "WB_TEST_LLAMA_KEY"}}
    try:
        os.environ.pop("WB_TEST_LLAMA_KEY", None)
        with pytest.raises(BackendError, match=r"HTTP 401.*no key was sent: \$WB_TEST_LLAMA_KEY"):
            asyncio.run(run_async({**cfg, "seed": next(_seeds)}))
        os.environ["WB_TEST_LLAMA_KEY"] = key
        result = asyncio.run(run_async({**cfg, "seed": next(_seeds)}))
    finally:
        os.environ.pop("WB_TEST_LLAMA_KEY", None)
        _script("stop", timeout=60, env=env)
    assert result.metrics_timeline, "no /metrics row"
    assert not [row["error"] for row in result.metrics_timeline if "error" in row]
    assert any(LLAMACPP_CACHED in row for row in result.metrics_timeline)
    assert all(r.status == "ok" or stale(r.error) for r in measured(result))
    for f in Path(result.run_dir or "").rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


async def test_chat_prompts_are_counted_by_the_servers_tokenizer(
    llama_server: LlamaServer, tmp_path: Any
) -> None:
    """``openai-chat`` sends text made from the planned ids; llama.cpp's tokenizer (the tiny
    model's made-up vocabulary) reads it as many more tokens than sent. The records keep the
    server's count, and the headline says it beside the latency of those longer prompts."""
    csv = tmp_path / "chat.csv"
    csv.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
        "0,0,0,0,64,4,0\n0,0,1,68,32,4,0\n"
    )
    result, _ = await replay(
        llama_server, tmp_path, trace={"path": str(csv)}, arrival=SESSION_ARRIVAL,
        context={"max_model_len": llama_server.ctx},
        backend={"name": "openai-chat", "options": {"model": llama_server.model},
                 "preflight": False},
    )
    recs = [r for r in measured(result) if r.status == "ok"]
    if len(recs) < 2 and any(stale(r.error) for r in measured(result)):
        raise KeepAliveRace("a request raced the server's close")
    assert len(recs) == 2
    for r in recs:
        assert (r.prompt_tokens or 0) > 2 * (r.sent_prompt_tokens or 0), r
    s = summarize(result)
    sent, counted = sum(r.sent_prompt_tokens or 0 for r in recs), sum(
        r.prompt_tokens or 0 for r in recs)
    assert (s["prompt_counted"]["sent_tokens"], s["prompt_counted"]["server_tokens"]) == (
        sent, counted)
    line = run_headline(s, result.manifest)
    assert f"2/2 ok · the server counted {counted} prompt tokens for the {sent} sent" in line
