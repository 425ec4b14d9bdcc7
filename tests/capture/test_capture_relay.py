"""The proxy relays unchanged: the agent gets byte-identical answers through it and
directly, streams piece by piece as they come; other paths pass through; the files are
written as requests finish, atomically (docs/capture.md, "The relay")."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import orjson
import pytest
from waiting import BOUND_S, POLL_S

from workbench.capture import CaptureProxy, read_capture
from workbench.sim.server import serve_sim

KEY = "sk-relaytest-0123456789abcdef"
CREATED = re.compile(rb'"created":(\d+)')

CHAT = {"model": "workbench-sim", "max_tokens": 9,
        "messages": [{"role": "system", "content": "be brief " * 40},
                     {"role": "user", "content": "list the files please"}]}
COMPLETIONS = {"model": "workbench-sim", "max_tokens": 7, "prompt": "once upon a time " * 30}


async def _post(http: aiohttp.ClientSession, url: str, path: str, body: dict,
                rid: str) -> tuple[int, bytes, str]:
    headers = {"Authorization": f"Bearer {KEY}", "x-request-id": rid,
               "Content-Type": "application/json"}
    async with http.post(url + path, data=orjson.dumps(body), headers=headers) as resp:
        return resp.status, await resp.read(), resp.headers.get("Content-Type", "")


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", CHAT),
                                       ("/v1/completions", COMPLETIONS)])
@pytest.mark.parametrize("stream", [True, False])
async def test_byte_identical_through_the_proxy(sim, tmp_path: Path, path: str, body: dict,
                                                stream: bool) -> None:
    body = {**body, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    async with CaptureProxy(sim.base_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        for attempt in range(3):  # the engine stamps `created` in whole seconds
            rid = f"same-{attempt}"
            # each from an empty prefix cache, so that both report the same cached count
            async with http.post(sim.base_url + "/reset_prefix_cache") as resp:
                assert resp.status == 200
            direct = await _post(http, sim.base_url, path, body, rid)
            async with http.post(sim.base_url + "/reset_prefix_cache") as resp:
                assert resp.status == 200
            proxied = await _post(http, proxy.url, path, body, rid)
            if CREATED.findall(direct[1])[:1] == CREATED.findall(proxied[1])[:1]:
                break
    assert direct[0] == proxied[0] == 200
    assert proxied == direct
    assert (b"data: [DONE]" in proxied[1]) is stream
    doc = read_capture(tmp_path)[0]
    usage = orjson.loads(proxied[1])["usage"] if not stream else orjson.loads(
        [ln for ln in proxied[1].split(b"\n") if b'"usage":{' in ln][-1][6:])["usage"]
    assert doc["requests"][-1]["in"] == usage["prompt_tokens"]
    assert doc["requests"][-1]["out"] == usage["completion_tokens"]


async def test_other_paths_pass_through(sim, tmp_path: Path) -> None:
    async with CaptureProxy(sim.base_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        for method, path, body in [("GET", "/v1/models", None), ("GET", "/health", None),
                                   ("POST", "/tokenize", {"prompt": "a b c"}),
                                   ("GET", "/metrics", None), ("GET", "/nope", None)]:
            got = []
            for url in (sim.base_url, proxy.url):
                async with http.request(method, url + path,
                                        data=orjson.dumps(body) if body else None) as resp:
                    raw = await resp.read()
                    got.append((resp.status, CREATED.sub(b"", raw) if path != "/metrics"
                                else b""))
            assert got[0] == got[1], path
        # an error answer of a captured path is relayed and not recorded
        status, raw, _ = await _post(http, proxy.url, "/v1/chat/completions",
                                     {"model": "workbench-sim", "messages": []}, "bad")
        assert status == 400 and b"messages" in raw
    assert proxy.captured == 0 and not list(tmp_path.glob("*.json"))


async def test_streams_are_relayed_as_they_come(tmp_path: Path) -> None:
    """At the engine's own speed a 24-token stream takes tens of ms: the agent's first
    piece through the proxy arrives long before its last, as it does directly."""
    async with serve_sim() as sim, CaptureProxy(sim.base_url, tmp_path) as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        body = {**CHAT, "max_tokens": 24, "stream": True}
        spans = []
        for url in (sim.base_url, proxy.url):
            loop = asyncio.get_running_loop()
            async with http.post(url + "/v1/chat/completions", json=body) as resp:
                times = []
                async for _ in resp.content.iter_any():
                    times.append(loop.time())
            spans.append((len(times), times[-1] - times[0]))
    (n_direct, direct), (n_proxy, proxied) = spans
    assert n_direct > 4 and n_proxy > 4, spans
    assert proxied > 0.5 * direct > 0, spans


async def test_files_are_on_disk_as_requests_finish(sim, tmp_path: Path) -> None:
    """Each finished request is in its file before the capture ends (a crash keeps it),
    and no temporary file is left beside the files."""
    async with CaptureProxy(sim.base_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        messages = list(CHAT["messages"])
        for k in range(3):
            status, raw, _ = await _post(http, proxy.url, "/v1/chat/completions",
                                         {**CHAT, "messages": messages}, f"r{k}")
            assert status == 200
            messages += [{"role": "assistant", "content": orjson.loads(raw)["choices"][0]
                          ["message"]["content"]}, {"role": "user", "content": "go on"}]
            # the write (a thread's) follows the response: polled, with the loop free
            async with asyncio.timeout(BOUND_S):
                while not ((docs := read_capture(tmp_path))
                           and len(docs[0]["requests"]) == k + 1):
                    await asyncio.sleep(POLL_S)
            assert len(docs) == 1
            assert sorted(p.name for p in tmp_path.iterdir()) == ["conv_0001.json"]
    # a second capture into the same directory numbers its files after the first's
    async with CaptureProxy(sim.base_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        await _post(http, proxy.url, "/v1/chat/completions", CHAT, "again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv_0001.json", "conv_0002.json"]


async def test_usage_missing_falls_back_to_the_tokenizer(sim, tmp_path: Path) -> None:
    """A stream that did not ask for usage is relayed as it is (nothing added): the
    prompt count is the tokenizer's (exact against the engine), the output count the
    events that carried text."""
    body = {**CHAT, "stream": True}
    async with CaptureProxy(sim.base_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        status, raw, _ = await _post(http, proxy.url, "/v1/chat/completions", body, "nu")
        _, counted, _ = await _post(http, sim.base_url, "/v1/chat/completions",
                                    {**CHAT, "stream": False}, "nu2")
    assert status == 200 and b'"usage"' not in raw
    usage = orjson.loads(counted)["usage"]
    req = read_capture(tmp_path)[0]["requests"][0]
    assert req["in"] == usage["prompt_tokens"]
    assert req["out"] == CHAT["max_tokens"]
    assert len(req["hash_ids"]) == req["in"] // 64


async def test_word_tokenizer_hashes_as_the_engine_counts(sim, tmp_path: Path) -> None:
    """``--tokenizer word`` (the built-in tokenizer, the engine's chat template): the
    same ids as the engine's /tokenize, so the same hash ids."""
    files = []
    for kind in ("upstream", "word"):
        out = tmp_path / kind
        async with CaptureProxy(sim.base_url, out, tokenizer=kind) as proxy, \
                aiohttp.ClientSession() as http:  # fmt: skip
            messages = list(CHAT["messages"])
            for k in range(2):
                _, raw, _ = await _post(http, proxy.url, "/v1/chat/completions",
                                        {**CHAT, "messages": messages}, f"{kind}{k}")
                messages += [{"role": "assistant", "content": orjson.loads(raw)["choices"][0]
                              ["message"]["content"]}, {"role": "tool", "content": "ok " * 70}]
        files.append([(r["in"], r["hash_ids"]) for r in read_capture(out)[0]["requests"]])
    assert files[0] == files[1]
    assert len(files[0][1][1]) > len(files[0][0][1]) > 0


async def test_unreachable_upstream_is_a_502_without_the_url(tmp_path: Path) -> None:
    async with serve_sim() as sim:
        dead = sim.base_url
    async with CaptureProxy(f"http://user:pw-secret-1@{dead[7:]}", tmp_path) as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        status, raw, _ = await _post(http, proxy.url, "/v1/chat/completions", CHAT, "x")
    assert status == 502 and b"upstream request failed" in raw
    assert b"pw-secret-1" not in raw and dead[7:].encode() not in raw
    assert not list(tmp_path.glob("*.json"))


async def test_a_compressed_answer_is_relayed_compressed_and_counted(loopback,
                                                                     tmp_path: Path) -> None:
    """An upstream that compresses (OpenAI's API gzips JSON answers when the SDK asks):
    the agent gets the compressed bytes; the counts are read from them inflated. No
    embedded-engine answer is compressed, so the upstream here is a small app."""
    import gzip

    from aiohttp import web

    answer = {"id": "c1", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "finish_reason": "tool_calls",
                           "message": {"role": "assistant", "content": None,
                                       "tool_calls": [{"id": "t", "type": "function",
                                                       "function": {"name": "ls",
                                                                    "arguments": "{}"}}]}}],
              "usage": {"prompt_tokens": 321, "completion_tokens": 17, "total_tokens": 338}}
    packed = gzip.compress(orjson.dumps(answer))

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=packed, headers={"Content-Type": "application/json",
                                                  "Content-Encoding": "gzip"})

    upstream = await loopback([web.post("/v1/chat/completions", chat)])
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession(auto_decompress=False) as http:  # fmt: skip
        resp = await http.post(proxy.url + "/v1/chat/completions", json=CHAT,
                               headers={"Accept-Encoding": "gzip"})
        got = await resp.read()
        assert resp.headers["Content-Encoding"] == "gzip"
    assert got == packed
    req = read_capture(tmp_path)[0]["requests"][0]
    assert (req["in"], req["out"], req["stop"]) == (321, 17, "tool_use")
    assert req["output_types"] == ["tool_use"] and len(req["hash_ids"]) == 321 // 64


async def test_an_answer_of_the_wrong_shape_is_relayed_and_not_recorded(
        loopback, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An upstream answer that is JSON but not of its API's shape (``choices`` a number,
    an Anthropic block ``type`` a list) reaches the agent unchanged and is counted as a
    request that could not be recorded; the next one is recorded. Reading it raised in
    the proxy's callback: a traceback on the console and the turn left open."""
    import logging

    from aiohttp import web

    good = {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 130, "completion_tokens": 3, "total_tokens": 133}}
    answers = [orjson.dumps({**good, "choices": 1}),
               orjson.dumps({"type": "message", "content": [{"type": ["text"]}],
                             "usage": {"input_tokens": 130, "output_tokens": 3}}),
               orjson.dumps(good)]

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answers.pop(0), content_type="application/json")

    upstream = await loopback([web.post("/v1/chat/completions", answer),
                               web.post("/v1/messages", answer)])
    sent = list(answers)
    anthropic = {"model": "m", "max_tokens": 9,
                 "messages": [{"role": "user", "content": "list the files please"}]}
    with caplog.at_level(logging.WARNING):
        async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
                aiohttp.ClientSession() as http:  # fmt: skip
            got = [await _post(http, proxy.url, path, body, f"r{i}") for i, (path, body) in
                   enumerate([("/v1/chat/completions", CHAT), ("/v1/messages", anthropic),
                              ("/v1/chat/completions", CHAT)])]
    assert [g[:2] for g in got] == [(200, a) for a in sent]  # relayed as they came
    assert (proxy.failed, proxy.captured) == (2, 1)
    assert [r["in"] for r in read_capture(tmp_path)[0]["requests"]] == [130]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
