"""The embedded engine over loopback: wire shapes (docs/wire-protocols.md), cache, metrics."""

import asyncio
import contextlib
import logging

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workbench.errors import ConfigError
from workbench.sim.server import serve_sim

TIMEOUT = 20
USAGE_KEYS = {"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"}


async def sse(session, url, body, headers=None):
    """POST and parse an SSE stream: (list of JSON chunks, saw [DONE])."""
    chunks, done = [], False
    async with session.post(url, json=body, headers=headers or {}) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.strip()
            if not line:
                continue
            assert line.startswith(b"data: ")
            if line == b"data: [DONE]":
                done = True
            else:
                assert not done
                chunks.append(orjson.loads(line[6:]))
    return chunks, done


@contextlib.asynccontextmanager
async def engine(**knobs):
    """``(sim, session)``: the embedded engine on loopback (``zero_cost`` unless the knobs
    say otherwise) and a client session, the whole test within ``TIMEOUT``."""
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(**{"zero_cost": True, **knobs}) as sim,
        aiohttp.ClientSession() as session,
    ):
        yield sim, session


async def post_json(session, url, body, headers=None):
    async with session.post(url, json=body, headers=headers or {}) as resp:
        return resp.status, await resp.json()


def completions_body(prompt, n, **extra):
    return {"model": "workbench-sim", "prompt": prompt, "max_tokens": n, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
            "return_token_ids": True, **extra}  # fmt: skip


async def test_completions_stream_shape():
    async with engine() as (sim, s):
        prompt = list(range(100, 140))
        chunks, done = await sse(
            s, sim.base_url + "/v1/completions", completions_body(prompt, 3),
            headers={"x-request-id": "rid-1"},
        )  # fmt: skip
    assert done and len(chunks) == 4
    for i, c in enumerate(chunks[:3]):
        assert set(c) == {"id", "object", "created", "model", "choices"}
        assert c["id"] == "cmpl-rid-1" and c["object"] == "text_completion"
        (choice,) = c["choices"]
        assert set(choice) == {"index", "text", "logprobs", "finish_reason", "stop_reason",
                               "prompt_token_ids", "token_ids"}  # fmt: skip
        assert choice["prompt_token_ids"] == (prompt if i == 0 else None)
        assert len(choice["token_ids"]) == 1 and isinstance(choice["token_ids"][0], int)
        assert choice["finish_reason"] == ("length" if i == 2 else None)
    last = chunks[3]
    assert last["choices"] == [] and set(last["usage"]) == USAGE_KEYS
    assert last["usage"]["prompt_tokens"] == 40 and last["usage"]["completion_tokens"] == 3
    assert last["usage"]["total_tokens"] == 43
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_completions_unary_text_prompt_and_body_request_id():
    async with engine() as (sim, s):
        body = {"prompt": "ba be bi bo", "max_tokens": 2, "request_id": "body-7"}
        status, out = await post_json(s, sim.base_url + "/v1/completions", body)
        status2, out2 = await post_json(
            s, sim.base_url + "/v1/completions",
            {"prompt": [[1, 2, 3]], "max_tokens": 2, "return_token_ids": True, "rid": "r"},
        )  # fmt: skip
    assert status == 200 and out["id"] == "cmpl-body-7" and out["object"] == "text_completion"
    assert out["usage"]["prompt_tokens"] == 4 and out["usage"]["completion_tokens"] == 2
    assert len(out["choices"][0]["text"].split()) == 2
    assert "token_ids" not in out["choices"][0]
    assert status2 == 200 and out2["id"] == "cmpl-r"
    assert out2["choices"][0]["prompt_token_ids"] == [1, 2, 3]
    assert len(out2["choices"][0]["token_ids"]) == 2


async def test_chat_stream_and_unary_shapes():
    msgs = [{"role": "system", "content": "ba be"}, {"role": "user", "content": "bi bo bu"}]
    async with engine() as (sim, s):
        url = sim.base_url + "/v1/chat/completions"
        body = {"messages": msgs, "max_tokens": 2, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        chunks, done = await sse(s, url, body, headers={"x-request-id": "c1"})
        status, out = await post_json(s, url, {"messages": msgs, "max_completion_tokens": 3})
    assert done and [c["object"] for c in chunks] == ["chat.completion.chunk"] * 4
    assert chunks[0]["id"] == "chatcmpl-c1"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in chunks[1:3]] == [None, "length"]
    assert all(c["choices"][0]["delta"]["content"].startswith(" ") for c in chunks[1:3])
    # template: 2 tokens per message + 1 for the assistant header, on top of 5 words
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["prompt_tokens"] == 5 + 2 * 2 + 1
    assert status == 200 and out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert len(out["choices"][0]["message"]["content"].split()) == 3
    assert out["usage"]["completion_tokens"] == 3


async def test_vllm_generate_stream_and_unary_shapes():
    ids = list(range(1, 51))
    async with engine() as (sim, s):
        url = sim.base_url + "/inference/v1/generate"
        body = {"token_ids": ids, "stream": True, "request_id": "g1",
                "sampling_params": {"max_tokens": 2, "temperature": 0, "ignore_eos": True},
                "stream_options": {"include_usage": True}}  # fmt: skip
        chunks, done = await sse(s, url, body)
        status, out = await post_json(
            s, url, {"token_ids": ids, "sampling_params": {"max_tokens": 3}},
            headers={"x-request-id": "g2"},
        )  # fmt: skip
    assert done and len(chunks) == 3
    for c in chunks[:2]:
        assert set(c) == {"request_id", "usage", "output_mode", "choices"}
        assert c["request_id"] == "generate-tokens-g1" and c["usage"] is None
        assert set(c["choices"][0]) == {"index", "finish_reason", "stop_reason", "token_ids",
                                        "logprobs"}  # fmt: skip
        assert len(c["choices"][0]["token_ids"]) == 1
    assert chunks[1]["choices"][0]["finish_reason"] == "length"
    assert chunks[2]["choices"] == [] and set(chunks[2]["usage"]) == USAGE_KEYS
    assert status == 200 and out["request_id"] == "generate-tokens-g2"
    assert len(out["choices"][0]["token_ids"]) == 3
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 48  # min(50, 49) -> 48


async def test_sglang_generate_stream_and_unary_shapes():
    ids = list(range(7, 47))
    async with engine(mode="sglang") as (sim, s):
        body = {"rid": "s1", "input_ids": ids, "stream": True,
                "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}  # fmt: skip
        chunks, done = await sse(s, sim.base_url + "/generate", body)
        status, out = await post_json(
            s, sim.base_url + "/generate",
            {"rid": "s2", "input_ids": ids, "sampling_params": {"max_new_tokens": 2}},
        )  # fmt: skip
    assert done and len(chunks) == 3
    for k, c in enumerate(chunks, start=1):
        assert set(c) == {"output_ids", "meta_info"} and len(c["output_ids"]) == 1
        meta = c["meta_info"]
        assert set(meta) == {"id", "prompt_tokens", "completion_tokens", "cached_tokens",
                             "finish_reason"}  # fmt: skip
        assert meta["id"] == "s1" and meta["prompt_tokens"] == 40
        assert meta["completion_tokens"] == k
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert chunks[0]["meta_info"]["finish_reason"] is None
    assert status == 200 and len(out["output_ids"]) == 2
    assert out["meta_info"]["cached_tokens"] == 32


async def test_models_health_reset_and_bad_requests():
    async with engine(model="m1") as (sim, s):
        async with s.get(sim.base_url + "/v1/models") as r:
            models = await r.json()
        async with s.get(sim.base_url + "/health") as r:
            health = r.status
        async with s.post(sim.base_url + "/reset_prefix_cache") as r:
            reset = (r.status, await r.json())
        bad = await post_json(s, sim.base_url + "/v1/completions", {"prompt": [-1]})
        long = await post_json(s, sim.base_url + "/v1/completions",
                               {"prompt": [1] * 200_000, "max_tokens": 1})  # fmt: skip
    assert models["object"] == "list" and models["data"][0]["id"] == "m1"
    assert health == 200 and reset == (200, {"success": True})
    assert bad[0] == 400 and bad[1]["error"]["type"] == "BadRequestError"
    assert long[0] == 400 and "maximum context length" in long[1]["error"]["message"]


async def test_second_request_reports_shared_full_blocks_cached():
    async with engine(block_size=16) as (sim, s):
        url = sim.base_url + "/v1/completions"
        base = list(range(1000, 1100))
        _, a = await post_json(s, url, {"prompt": base, "max_tokens": 1})
        k = 4  # share 4 full blocks (+ 3 tokens of the 5th) then diverge
        other = [*base[: k * 16 + 3], *range(5000, 5040)]
        _, b = await post_json(s, url, {"prompt": other, "max_tokens": 1})
        _, again = await post_json(s, url, {"prompt": base, "max_tokens": 1})
    cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in (a, b, again)]
    assert cached == [0, k * 16, 96]  # the same 100 tokens again: min(100, 99) -> 96


async def test_lru_eviction_order_then_a_later_miss():
    # 8 blocks of 16: A and B (3 blocks each) fill 6; C needs 4 and evicts A's tail first.
    async with engine(num_blocks=8) as (sim, s):
        url = sim.base_url + "/inference/v1/generate"

        async def run(ids):
            body = {"token_ids": ids, "sampling_params": {"max_tokens": 1}}
            status, out = await post_json(s, url, body)
            assert status == 200
            return out["usage"]["prompt_tokens_details"]["cached_tokens"]

        a, b, c = list(range(48)), list(range(100, 148)), list(range(200, 264))
        first = [await run(a), await run(b), await run(c)]
        evictions = sim.engine.stats()["kv_evictions"]
        a_again = await run(a)
    assert first == [0, 0, 0] and evictions == 2
    assert a_again == 16  # A's head block survived; its two tail blocks were evicted


async def test_preemption_under_small_capacity_still_completes_every_request():
    async with engine(num_blocks=24) as (sim, s):
        url = sim.base_url + "/v1/completions"
        bodies = [completions_body([i + 1] * 40, 60) for i in range(6)]
        results = await asyncio.gather(*(sse(s, url, b) for b in bodies))
        stats = sim.engine.stats()
    assert stats["preemptions"] > 0
    for chunks, done in results:
        tokens = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
        assert done and len(tokens) == 60 and chunks[-1]["usage"]["completion_tokens"] == 60


def _metrics(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[sample.name] = out.get(sample.name, 0) + sample.value
            if sample.name == "vllm:cache_config_info":
                out["block_size"] = sample.labels["block_size"]
    return out


async def test_metrics_counters_equal_the_sum_of_usage():
    async with engine(num_blocks=40) as (sim, s):
        url = sim.base_url + "/v1/completions"
        shared = list(range(300, 364))
        bodies = [completions_body([*shared, *range(900 + 50 * i, 930 + 50 * i)], 5 + i)
                  for i in range(8)]  # fmt: skip
        usages = []
        for i in range(0, 8, 2):  # pairs in flight: sharing, preemption, cache reuse
            pair = await asyncio.gather(*(sse(s, url, b) for b in bodies[i : i + 2]))
            usages += [chunks[-1]["usage"] for chunks, _ in pair]
        async with s.get(sim.base_url + "/metrics") as r:
            m = _metrics(await r.text())
    assert m["vllm:prefix_cache_queries_total"] == sum(u["prompt_tokens"] for u in usages)
    assert m["vllm:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usages)
    hits = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert m["vllm:prefix_cache_hits_total"] == hits > 0
    assert m["vllm:generation_tokens_total"] == sum(u["completion_tokens"] for u in usages)
    assert m["vllm:request_success_total"] == 8
    assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    assert "vllm:num_preemptions_total" in m and m["block_size"] == "16"


async def test_sglang_mode_metric_names():
    async with engine(mode="sglang") as (sim, s):
        body = {"input_ids": list(range(40)), "sampling_params": {"max_new_tokens": 2}}
        for _ in range(2):
            await post_json(s, sim.base_url + "/generate", body)
        async with s.get(sim.base_url + "/metrics") as r:
            m = _metrics(await r.text())
    assert m["sglang:prompt_tokens_total"] == 80 and m["sglang:cached_tokens_total"] == 32
    assert m["sglang:generation_tokens_total"] == 4 and m["sglang:num_requests_total"] == 2
    assert {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"} <= set(m)
    assert not any(k.startswith("vllm:") for k in m)


async def test_debug_requests_hold_the_servers_truth():
    async with engine(zero_cost=False, speedup=50.0) as (sim, s):
        await sse(s, sim.base_url + "/v1/completions", completions_body(list(range(64)), 4),
                  headers={"x-request-id": "truth"})  # fmt: skip
        async with s.get(sim.base_url + "/debug/requests?request_id=truth") as r:
            (row,) = await r.json()
    assert row["completion_tokens"] == 4 and len(row["token_ns"]) == 4 == len(row["sent_ns"])
    assert row["arrival_ns"] < row["first_token_ns"] == row["token_ns"][0]
    assert row["token_ns"] == sorted(row["token_ns"]) and row["finish_ns"] == row["token_ns"][-1]
    assert all(s >= t for s, t in zip(row["sent_ns"], row["token_ns"], strict=True))


async def test_client_disconnect_aborts_the_engine_request():
    async with engine(zero_cost=False, speedup=20.0) as (sim, s):
        body = completions_body(list(range(64)), 100_000)
        async with s.post(sim.base_url + "/v1/completions", json=body) as resp:
            await resp.content.readline()  # first event arrived: request is running
        while sim.engine.stats()["requests_aborted"] < 1:
            await asyncio.sleep(0.01)
    stats = sim.engine.stats()
    assert stats["running"] == 0 and stats["kv_usage"] == 0.0


async def test_clients_vanishing_mid_stream_are_aborts_not_server_errors(caplog):
    """Cancelled clients close sockets while handlers still write: no traceback, no leak.

    A write can reach the closing transport before aiohttp cancels the handler; that
    is the same client abort, so the server must neither log an error nor keep blocks.
    """

    async def reader(s, url, events, streaming):
        body = completions_body(list(range(64)), 100_000)
        async with s.post(url + "/v1/completions", json=body) as resp:
            for i in range(events):
                await resp.content.readline()
                if i == 0:
                    streaming.append(1)

    async with asyncio.timeout(TIMEOUT * 3), serve_sim(speedup=200.0) as sim:
        for round_ in range(6):
            async with aiohttp.ClientSession() as s:
                streaming: list[int] = []
                tasks = [asyncio.create_task(reader(s, sim.base_url, 1 + (i + round_) % 20,
                                                    streaming))
                         for i in range(32)]  # fmt: skip
                # cancel once a few streams run (the rest at every stage: not yet sent,
                # waiting, mid-write); a fixed sleep let a loaded machine cancel all of
                # them before any reached the server, so no abort was counted
                while len(streaming) < 4 + round_:
                    await asyncio.sleep(0.002)
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        while sim.engine.stats()["running"]:
            await asyncio.sleep(0.01)
        assert sim.engine.stats()["kv_usage"] == 0.0
        assert sim.engine.stats()["requests_aborted"] >= 6
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors[0].getMessage()


@pytest.mark.parametrize(("knobs", "error", "message"), [
    ({"bogus": 1}, ValueError, "unknown engine knob"),
    ({"mode": "tgi"}, ConfigError, r"target\.engine\.mode: expected 'vllm' or 'sglang'"),
])
async def test_bad_knobs_raise(knobs, error, message):
    with pytest.raises(error, match=message):
        async with serve_sim(**knobs):
            pass


@pytest.mark.parametrize(("path", "body", "named"), [
    ("/v1/completions", {"prompt": "a b", "n": 2}, "n=2"),
    ("/v1/completions", {"prompt": "a b", "best_of": 3}, "best_of=3"),
    ("/v1/completions", {"prompt": "a b", "logprobs": 1}, "logprobs=1"),
    ("/v1/completions", {"prompt": "a b", "echo": True}, "echo=True"),
    ("/v1/completions", {"prompt": ["a b", "c d"]}, "a batch of 2 prompts"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "n": 2}, "n=2"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                              "logprobs": True, "top_logprobs": 2}, "logprobs=True"),
    ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {
        "max_tokens": 2, "n": 2}}, "sampling_params.n=2"),
    ("/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "n": 3}},
     "sampling_params.n=3"),
    ("/generate", {"input_ids": [1, 2], "return_logprob": True}, "return_logprob"),
])
async def test_options_the_engine_cannot_honour_are_refused_not_ignored(path, body, named):
    """n > 1, best_of, echo, token probabilities, a batch of prompts: a 400 naming the
    option, never an answer that quietly leaves it out; their default values pass."""
    async with engine() as (sim, s):
        status, out = await post_json(s, sim.base_url + path, body)
        fine = {k: v for k, v in body.items() if k in ("prompt", "messages", "token_ids",
                                                      "input_ids")}
        if "sampling_params" in body:
            fine["sampling_params"] = {k: v for k, v in body["sampling_params"].items()
                                       if k != "n"}
        if path == "/v1/completions" and isinstance(fine["prompt"], list):
            fine["prompt"] = fine["prompt"][:1]  # a one-prompt list is one prompt
        defaults = {"n": 1, "logprobs": None, "echo": False, "best_of": 1}
        ok_status, _ = await post_json(s, sim.base_url + path, {**fine, **(
            defaults if path.startswith("/v1/") else {})})
    assert status == 400 and out["error"]["type"] == "BadRequestError"
    assert named in out["error"]["message"], out
    assert ok_status == 200
