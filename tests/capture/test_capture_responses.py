"""The OpenAI Responses API (``/v1/responses``: what Codex CLI and the newer OpenAI SDK
agents speak) through the proxy (docs/capture.md, "The Responses API").

The upstream is a small app answering the documented shapes: a request's
``instructions``, ``tools`` and ``input`` (a string, or items: messages,
``function_call``, ``function_call_output``, ``reasoning``), ``previous_response_id``
(the app keeps every stored answer's items, as the server does); the answer one response
object, or a stream of ``response.created``, ``response.output_item.added``/``.done``,
deltas and ``response.completed`` (whose ``response.usage`` has the counts). Its
``input_tokens`` are the word tokenizer's count of the whole prompt (the items the
server holds included), so the capture's blocks cover every token. A scripted agent of
three rounds (two function calls, their outputs, a final text answer) runs once sending
its whole history each round and once naming the previous answer instead: both
captures must be the same file.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from workbench.capture import CaptureProxy, read_capture
from workbench.capture.blocks import BLOCK_SIZE
from workbench.capture.protocols import (
    CHAT,
    COMPLETIONS,
    MESSAGES,
    RESPONSES,
    preamble_segments,
    request_facts,
    response_facts,
)
from workbench.capture.tokens import segment_ids, word_ids
from workbench.cli import main
from workbench.traces.load import detect_format, load_trace

API_KEY = "sk-proj-responsestest-5e1f2a3b4c"
MARKERS = ("lanternkumquat", "velvetgazebo", "copperplatypus")
INSTRUCTIONS = f"You are a careful coding agent {MARKERS[0]} " + " ".join(
    f"rule{k}" for k in range(300))
TOOLS = [{"type": "function", "name": "shell", "description": "run a command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def _output(n: int, calls_seen: int) -> list[dict[str, Any]]:
    """Two rounds of reasoning and a function call, then a text answer."""
    if calls_seen < 2:
        return [{"type": "reasoning", "id": f"rs_{n}", "status": "completed",
                 "summary": [{"type": "summary_text", "text": f"look at {MARKERS[1]} {n}"}]},
                {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                 "name": "shell", "arguments": orjson.dumps({"cmd": f"ls {n}"}).decode(),
                 "status": "completed"}]
    return [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Fixed it.", "annotations": []}]}]


def stream_events(response: dict[str, Any]) -> list[bytes]:
    """The events of a streamed answer, ``response.completed`` carrying the whole object."""
    seq = itertools.count()
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [_event({"type": "response.created", "sequence_number": next(seq),
                      "response": started})]
    for index, item in enumerate(response["output"]):
        events.append(_event({"type": "response.output_item.added", "output_index": index,
                              "sequence_number": next(seq),
                              "item": {**item, "status": "in_progress"}}))
        if item["type"] == "message":
            events.append(_event({"type": "response.output_text.delta", "item_id": item["id"],
                                  "output_index": index, "content_index": 0,
                                  "sequence_number": next(seq), "delta": "Fixed it."}))
        elif item["type"] == "function_call":
            events.append(_event({"type": "response.function_call_arguments.delta",
                                  "item_id": item["id"], "output_index": index,
                                  "sequence_number": next(seq), "delta": item["arguments"]}))
        else:
            events.append(_event({"type": "response.reasoning_summary_text.delta",
                                  "item_id": item["id"], "output_index": index,
                                  "summary_index": 0, "sequence_number": next(seq),
                                  "delta": "look"}))
        events.append(_event({"type": "response.output_item.done", "output_index": index,
                              "sequence_number": next(seq), "item": item}))
    events.append(_event({"type": "response.completed", "sequence_number": next(seq),
                          "response": response}))
    return events


class Upstream:
    """The fake Responses server: keeps stored answers' items by id, logs its usage."""

    def __init__(self) -> None:
        self.kept: dict[str, list[dict[str, Any]]] = {}
        self.numbers = itertools.count(1)
        self.usage: list[tuple[int, int]] = []
        #: set: the first answer's stream ends only once a second request came in
        self.hold: asyncio.Event | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        items = body["input"]
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.kept:
            return web.json_response({"error": {"message": "no such response"}}, status=400)
        history = [*self.kept.get(previous, []), *items] if previous else items
        n = next(self.numbers)
        if self.hold is not None and n > 1:
            self.hold.set()
        output = _output(n, sum(i.get("type") == "function_call_output" for i in history))
        whole = {k: v for k, v in body.items() if k != "previous_response_id"}
        prompt = len(word_ids(request_facts(RESPONSES, orjson.dumps({**whole,
                                                                     "input": history}))))
        out = 7 * len(output)
        self.usage.append((prompt, out))
        response = {
            "id": f"resp_{n}", "object": "response", "model": body["model"],
            "status": "completed", "incomplete_details": None, "output": output,
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": out,
                      "output_tokens_details": {"reasoning_tokens": 3},
                      "total_tokens": prompt + out},
        }
        if body.get("store", True):
            self.kept[response["id"]] = [*history, *output]
        if not body.get("stream"):
            return web.json_response(response)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in stream_events(response):
            await resp.write(event)
        if self.hold is not None and n == 1:
            await self.hold.wait()
        await resp.write_eof()
        return resp


def _completed(raw: bytes, stream: bool) -> dict[str, Any]:
    if not stream:
        return orjson.loads(raw)
    for line in raw.split(b"\n"):
        if line.startswith(b"data: "):
            event = orjson.loads(line[6:])
            if event["type"] == "response.completed":
                return event["response"]
    raise AssertionError("the stream carried no response.completed")


async def run_agent(http: aiohttp.ClientSession, urls: list[str], *, stream: bool,
                    previous: bool) -> list[dict[str, Any]]:
    """Three rounds, each through ``urls[round]`` (or the last): the whole history each
    round, or (``previous``) only the new items and the previous answer's id."""
    task = f"Fix the {MARKERS[2]} bug"
    history: list[dict[str, Any]] = [{"role": "user", "content": task}]
    new: Any = task  # the first input a string, as the SDK's examples send it
    last_id = None
    answers = []
    for rnd in range(3):
        body: dict[str, Any] = {"model": "gpt-test", "instructions": INSTRUCTIONS,
                                "tools": TOOLS, "stream": stream, "store": True}
        if previous and last_id is not None:
            body |= {"input": new, "previous_response_id": last_id}
        else:
            body["input"] = task if rnd == 0 else history
        url = urls[min(rnd, len(urls) - 1)]
        async with http.post(url + "/v1/responses", data=orjson.dumps(body), headers={
                "Authorization": f"Bearer {API_KEY}",
                "Content-Type": "application/json"}) as resp:
            raw = await resp.read()
            assert resp.status == 200, raw[:300]
        answer = _completed(raw, stream)
        answers.append(answer)
        last_id = answer["id"]
        new = tool_outputs(answer)
        history += [*answer["output"], *new]
    return answers


def tool_outputs(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """What the agent's tools answered the answer's function calls."""
    calls = [i for i in answer["output"] if i["type"] == "function_call"]
    return [{"type": "function_call_output", "call_id": c["call_id"],
             "output": f"{MARKERS[1]} listing of {c['arguments']}: "
                       + " ".join(f"file{k}.py" for k in range(150))} for c in calls]


def _no_secrets(directory: Path) -> None:
    for path in directory.iterdir():
        data = path.read_bytes()
        assert API_KEY.encode() not in data
        assert not any(m.encode() in data for m in MARKERS)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_responses_rounds_with_and_without_previous_response_id(
        loopback, tmp_path: Path, stream: bool, capsys: pytest.CaptureFixture[str]) -> None:
    fake = Upstream()
    upstream = await loopback([web.post("/v1/responses", fake.handle)])
    dirs = {"whole history": tmp_path / "whole", "previous_response_id": tmp_path / "prev"}
    async with aiohttp.ClientSession() as http:
        for (name, out), previous in zip(dirs.items(), (False, True), strict=True):
            async with CaptureProxy(upstream, out) as proxy:
                answers = await run_agent(http, [proxy.url], stream=stream,
                                          previous=previous)
                if not previous:  # the last round again, naming its previous answer
                    body = {"model": "gpt-test", "instructions": INSTRUCTIONS, "tools": TOOLS,
                            "stream": stream, "input": tool_outputs(answers[1]),
                            "previous_response_id": answers[1]["id"]}
                    async with http.post(proxy.url + "/v1/responses", data=orjson.dumps(body),
                                         headers={"Authorization": f"Bearer {API_KEY}"}) as r:
                        assert r.status == 200, await r.read()
            assert proxy.captured == 4 - previous and proxy.prefix_unknown == 0, name
            assert answers[-1]["output"][0]["type"] == "message"
    whole, prev = (read_capture(d) for d in dirs.values())
    assert len(whole) == 1 and len(prev) == 1
    *reqs, again = whole[0]["requests"]
    # rebuilt from the answer it named, the retried round is the round it repeats: the
    # same blocks (digests) in the same file
    assert again["hash_ids"] == reqs[2]["hash_ids"] and again["in"] == reqs[2]["in"]
    assert [(r["in"], r["out"]) for r in reqs] == fake.usage[:3]
    assert [r["type"] for r in reqs] == ["s" if stream else "n"] * 3
    assert [r["stop"] for r in reqs] == ["tool_use", "tool_use", "end_turn"]
    assert [r["output_types"] for r in reqs] == [["thinking", "tool_use"]] * 2 + [["text"]]
    assert [r["input_types"] for r in reqs] == [["text"], ["tool_result"], ["tool_result"]]
    for r in reqs:
        assert len(r["hash_ids"]) == r["in"] // BLOCK_SIZE and r["model"] == "gpt-test"
    # each round extends the last: all of its blocks but the one holding its end are shared
    for a, b in itertools.pairwise(reqs):
        assert b["hash_ids"][:len(a["hash_ids"]) - 1] == a["hash_ids"][:-1]
    assert len(set(reqs[2]["hash_ids"])) == len(reqs[2]["hash_ids"])
    # the rounds that named the previous answer were rebuilt from it: the same file
    def shape(requests: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["in"], r["out"], r["hash_ids"], r["input_types"], r["output_types"],
                 r["stop"]) for r in requests]
    assert shape(prev[0]["requests"]) == shape(reqs)
    assert "requests_prefix_unknown" not in prev[0]
    for d in dirs.values():
        _no_secrets(d)

    # the capture replays: read as a Weka trace, one session of three rounds, simulated
    assert detect_format(str(dirs["previous_response_id"])) == "weka"
    (unit,) = load_trace(str(dirs["previous_response_id"])).units
    assert len(unit.rounds) == 3
    assert main(["simulate", "--trace", str(dirs["previous_response_id"]), "--json",
                 "-o", str(tmp_path / "runs"), "--run-id", "responses"]) == 0
    out = capsys.readouterr().out
    summary = orjson.loads(out[:out.rindex("}") + 1])
    assert (summary["requests"], summary["ok"]) == (3, 3)
    # the replay plans the shared blocks the file says: each round's prefix of the last's
    def common(a: list[int], b: list[int]) -> int:
        return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)))
    shared = BLOCK_SIZE * sum(common(a["hash_ids"], b["hash_ids"])
                              for a, b in itertools.pairwise(reqs))
    assert shared >= 3 * BLOCK_SIZE
    assert summary["planned_prefix_hit_rate"] == pytest.approx(
        shared / sum(r["in"] for r in reqs))


async def test_previous_response_the_capture_never_saw(
        loopback, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The agent's first round went straight to the upstream: the two rounds captured
    name answers whose items the proxy never saw. They are recorded with the usage's
    counts, their instructions' and tools' blocks shared and nothing past them claimed;
    the file counts them and one warning says so."""
    fake = Upstream()
    upstream = await loopback([web.post("/v1/responses", fake.handle)])
    caplog.set_level(logging.WARNING, logger="workbench.capture")
    async with aiohttp.ClientSession() as http, CaptureProxy(upstream, tmp_path) as proxy:
        await run_agent(http, [upstream, proxy.url], stream=True, previous=True)
        # the items of a server-side conversation are not known either
        body = {"model": "gpt-test", "instructions": INSTRUCTIONS, "tools": TOOLS,
                "conversation": "conv_123", "input": "and now the tests"}
        async with http.post(proxy.url + "/v1/responses", data=orjson.dumps(body),
                             headers={"Authorization": f"Bearer {API_KEY}"}) as resp:
            assert resp.status == 200
    assert proxy.captured == 3 and proxy.prefix_unknown == 3
    warnings = [r for r in caplog.records if "previous_response_id" in r.getMessage()]
    assert len(warnings) == 1
    doc, other = read_capture(tmp_path)  # a new conversation: the agent's turn had ended
    assert other["requests_prefix_unknown"] == 1 and len(other["requests"]) == 1
    assert doc["requests_prefix_unknown"] == 2
    first, second = doc["requests"]  # one agent: the second continues the first
    assert [(r["in"], r["out"]) for r in (first, second)] == fake.usage[1:3]
    assert second["think_time"] >= 0 and second["input_types"] == ["tool_result"]
    facts = request_facts(RESPONSES, orjson.dumps({"instructions": INSTRUCTIONS,
                                                   "tools": TOOLS, "input": []}))
    assert facts is not None
    known = len(segment_ids(preamble_segments(facts))) // BLOCK_SIZE
    assert known >= 3
    for r in (first, second):
        assert len(r["hash_ids"]) == r["in"] // BLOCK_SIZE
    assert first["hash_ids"][:known] == second["hash_ids"][:known]
    assert not set(first["hash_ids"][known:]) & set(second["hash_ids"][known:])
    _no_secrets(tmp_path)
    # the reader takes the file and carries the count (not an unknown field)
    workload = load_trace(str(tmp_path))
    assert len(workload.units) == 2
    assert "requests_prefix_unknown" not in workload.meta.get("unknown_fields", [])
    assert workload.meta["requests_prefix_unknown"] == 3


def test_responses_answer_facts() -> None:
    response = {"id": "resp_9", "object": "response", "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": _output(9, 0),
                "usage": {"input_tokens": 120, "output_tokens": 64}}
    facts = response_facts(RESPONSES, False, orjson.dumps(response))
    assert (facts.prompt_tokens, facts.output_tokens, facts.stop) == (120, 64, "max_tokens")
    assert facts.output_types == ["thinking", "tool_use"] and facts.response_id == "resp_9"
    assert [i["type"] for i in facts.output_items] == ["reasoning", "function_call"]
    assert not facts.failed
    # streamed without a usage (a server that does not count): the deltas are counted
    done = {**response, "status": "completed", "incomplete_details": None, "usage": None,
            "output": _output(9, 2)}
    streamed = response_facts(RESPONSES, True, b"".join(stream_events(done)))
    assert (streamed.prompt_tokens, streamed.output_tokens) == (None, None)
    assert (streamed.output_events, streamed.stop, streamed.output_types) == (1, "end_turn",
                                                                                ["text"])
    # a final object without its output: the items as the stream ended them
    slim = stream_events({**response, "status": "completed", "incomplete_details": None})
    slim[-1] = _event({"type": "response.completed",
                       "response": {**response, "status": "completed", "output": []}})
    from_items = response_facts(RESPONSES, True, b"".join(slim))
    assert [i["type"] for i in from_items.output_items] == ["reasoning", "function_call"]
    assert from_items.stop == "tool_use" and "status" not in from_items.output_items[1]
    # a server's own tool call (a web search) ends no turn
    searched = {**done, "output": [{"type": "web_search_call", "id": "ws_1"},
                                   *_output(9, 2)]}
    assert response_facts(RESPONSES, False, orjson.dumps(searched)).stop == "end_turn"
    # a stream that ends in response.failed is not recorded (as an error answer is not)
    failed = stream_events({**done, "status": "failed"})
    failed[-1] = failed[-1].replace(b"response.completed", b"response.failed")
    assert response_facts(RESPONSES, True, b"".join(failed)).failed


def test_responses_request_facts() -> None:
    """A string input and its list form are the same message; a tool's output is a tool
    result; a body whose input is neither is not the API's."""
    as_string = request_facts(RESPONSES, orjson.dumps({"model": "m", "input": "hi"}))
    as_list = request_facts(RESPONSES, orjson.dumps({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call_output", "call_id": "c", "output": "ok"}]}))
    assert as_string is not None and as_list is not None
    assert as_list.messages[0] == as_string.messages[0]
    assert as_list.tool_result == [False, True] and as_string.preamble == b""
    assert request_facts(RESPONSES, orjson.dumps({"model": "m", "input": 3})) is None
    named = request_facts("/openai/v1/responses", orjson.dumps(
        {"input": [], "previous_response_id": "resp_1", "instructions": "be brief"}))
    assert named is not None and named.previous_response_id == "resp_1" and named.preamble
    assert named.server_items and not as_list.server_items
    referenced = request_facts(RESPONSES, orjson.dumps(
        {"input": [{"type": "item_reference", "id": "msg_1"}]}))
    assert referenced is not None and referenced.server_items


def test_an_api_under_a_path_prefix_is_read_as_that_api() -> None:
    # a proxy mounted under a prefix (/proxy/v1/...) is captured (the relay matches the
    # path's end); its body is read as the API the path ends with, not as Anthropic's
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for prefix in ("", "/proxy", "/a/b"):
        facts = request_facts(prefix + CHAT, orjson.dumps(chat))
        assert facts is not None and facts.api == CHAT and facts.preamble == b""
        done = request_facts(prefix + COMPLETIONS, orjson.dumps({"model": "m", "prompt": "x"}))
        assert done is not None and done.api == COMPLETIONS
        msgs = request_facts(prefix + MESSAGES, orjson.dumps({**chat, "system": "s"}))
        assert msgs is not None and msgs.api == MESSAGES and msgs.preamble


async def test_a_request_sent_before_the_previous_relay_ended(loopback, tmp_path: Path) -> None:
    """The agent has the answer's ``response.completed`` and sends its next request, naming
    it, while the answer's stream is still open (the upstream ends it only once that
    request came in): the request is recorded continuing the answer, as when it comes
    after. It was recorded prefix-unknown: the answer was registered when its relay
    ended, after the request that names it had arrived."""
    fake = Upstream()
    fake.hold = asyncio.Event()
    upstream = await loopback([web.post("/v1/responses", fake.handle)])
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    first = {"model": "gpt-test", "instructions": INSTRUCTIONS, "tools": TOOLS,
             "stream": True, "input": f"Fix the {MARKERS[2]} bug"}
    async with aiohttp.ClientSession() as http, CaptureProxy(upstream, tmp_path) as proxy, \
            http.post(proxy.url + "/v1/responses", data=orjson.dumps(first),
                      headers=headers) as held:  # fmt: skip
        raw = b""
        while b'"response.completed"' not in raw or not raw.endswith(b"\n\n"):
            raw += await held.content.readany()
        answer = _completed(raw, True)
        second = {**first, "input": tool_outputs(answer), "previous_response_id": answer["id"]}
        async with http.post(proxy.url + "/v1/responses", data=orjson.dumps(second),
                             headers=headers) as resp:
            assert resp.status == 200
            await resp.read()
        await held.read()
    assert proxy.captured == 2 and proxy.prefix_unknown == 0
    (doc,) = read_capture(tmp_path)
    assert "requests_prefix_unknown" not in doc
    one, two = doc["requests"]
    assert [(r["in"], r["out"]) for r in (one, two)] == fake.usage
    assert two["hash_ids"][:len(one["hash_ids"])] == one["hash_ids"]
    assert len(two["hash_ids"]) == two["in"] // BLOCK_SIZE and two["input_types"] == ["tool_result"]


async def test_responses_prompts_take_word_with_tokenizer_upstream(
        loopback, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``--tokenizer upstream`` (the default): the Responses prompts are tokenized by the
    word tokenizer, no ``/tokenize`` call goes out, and one warning line says so (it was
    said in the docs only)."""
    fake = Upstream()
    tokenize_calls: list[bytes] = []

    async def tokenize(request: web.Request) -> web.Response:
        tokenize_calls.append(await request.read())
        return web.json_response({"tokens": [1, 2, 3]})

    upstream = await loopback([web.post("/v1/responses", fake.handle),
                               web.post("/tokenize", tokenize)])
    caplog.set_level(logging.WARNING, logger="workbench.capture")
    async with aiohttp.ClientSession() as http, CaptureProxy(upstream, tmp_path) as proxy:
        await run_agent(http, [proxy.url], stream=False, previous=False)
    assert proxy.captured == 3 and tokenize_calls == []
    lines = [r.getMessage() for r in caplog.records if "word tokenizer" in r.getMessage()]
    assert len(lines) == 1 and "/v1/responses" in lines[0]
    (doc,) = read_capture(tmp_path)
    assert [(r["in"], r["out"]) for r in doc["requests"]] == fake.usage
