"""The embedded engine driven by the official OpenAI Python SDK, as users point it at
``workbench sim serve`` (docs/embedded-engine.md, "Clients we did not write"): each test
is a call an SDK user makes, and the SDK must parse the answer without raising."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai
import pytest

from workbench.sim.process import serve_sim_process
from workbench.sim.server import serve_sim

MODEL = "workbench-sim"
USER = {"role": "user", "content": "hello there how are you"}
TIMEOUT = 30


@asynccontextmanager
async def _openai_on_sim(**knobs: Any) -> AsyncIterator[tuple[openai.AsyncOpenAI, Any]]:
    """``(client, sim)``: an ``AsyncOpenAI`` on the embedded engine (zero cost, ``knobs``),
    no retries."""
    async with asyncio.timeout(TIMEOUT), serve_sim(zero_cost=True, **knobs) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="sk-test",
                                    max_retries=0)
        try:
            yield client, sim
        finally:
            await client.close()


@pytest.fixture
async def sdk():
    async with _openai_on_sim() as pair:
        yield pair


async def test_a_developer_message_is_read_as_a_system_message(sdk) -> None:
    """The newer SDKs and agents send ``developer`` where they sent ``system``; vLLM takes
    it. It was refused with a 400 naming the role."""
    client, _ = sdk
    answers = [await client.chat.completions.create(
        model=MODEL, messages=[{"role": role, "content": "be brief"}, USER], max_tokens=2)
        for role in ("developer", "system")]
    dev, system = (a.usage for a in answers)
    assert dev is not None and system is not None
    assert dev.prompt_tokens == system.prompt_tokens == 12


async def test_an_answer_without_a_length_limit_ends_with_stop(sdk) -> None:
    """A request that sets no ``max_tokens`` gets the engine's default length as the
    model's own end (``stop``), as a real model ends at its end-of-sequence token; the
    SDK's ``parse`` helper raised ``LengthFinishReasonError`` on ``length``."""
    client, _ = sdk
    parsed = await client.chat.completions.parse(model=MODEL, messages=[USER])
    assert parsed.choices[0].finish_reason == "stop"
    assert parsed.usage is not None and parsed.usage.completion_tokens == 16
    stream = await client.chat.completions.create(
        model=MODEL, messages=[USER], stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    reasons = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert reasons == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 16
    text = await client.completions.create(model=MODEL, prompt="hello there")
    assert text.choices[0].finish_reason == "stop"
    # a limit the request set is reached: length, as before
    limited = await client.chat.completions.create(model=MODEL, messages=[USER], max_tokens=3)
    assert limited.choices[0].finish_reason == "length"
    capped = await client.chat.completions.create(model=MODEL, messages=[USER],
                                                  max_completion_tokens=3)
    assert capped.choices[0].finish_reason == "length"
    with pytest.raises(openai.LengthFinishReasonError):
        await client.chat.completions.parse(model=MODEL, messages=[USER], max_tokens=3)


async def test_an_assistant_tool_call_counts_in_the_next_prompt(sdk) -> None:
    """An agent resends its assistant turn with the ``tool_calls`` it made; a chat template
    renders them into the prompt (vLLM's do), so the prompt counts the call's name and
    arguments. They were dropped: a tool-heavy agent's prompts were undercounted."""
    client, _ = sdk
    args = '{"path": "src/main.py", "lines": "1-40"}'

    def turn(arguments: str | None) -> list[dict]:
        call = {"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": arguments}}
        assistant = {"role": "assistant", "content": None,
                     **({"tool_calls": [call]} if arguments is not None else {})}
        return [USER, assistant, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]

    counts = []
    for arguments in (None, args, args.replace("1-40", "41-80")):
        answer = await client.chat.completions.create(model=MODEL, messages=turn(arguments),
                                                      max_tokens=1)
        assert answer.usage is not None
        counts.append(answer.usage.prompt_tokens)
    bare, called, other = counts
    assert called == bare + len(f"read_file {args}".split()) == other


async def test_an_sdk_closing_its_stream_frees_the_request_and_keeps_alive() -> None:
    """The SDK's ``stream.close()`` mid-answer (an agent that stops reading) aborts the
    engine request and frees its blocks; the SDK's next calls, one after another, go on one
    kept-alive connection (the server's ``/debug/requests`` names each request's peer)."""
    async with asyncio.timeout(TIMEOUT), serve_sim(speedup=20.0) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="sk-test",
                                    max_retries=0)
        stream = await client.chat.completions.create(
            model=MODEL, messages=[USER], max_tokens=100_000, stream=True)
        async for _ in stream:
            break  # the first event came: the request is running
        await stream.close()
        while sim.engine.stats()["requests_aborted"] < 1:
            await asyncio.sleep(0.01)
        stats = sim.engine.stats()
        assert stats["running"] == 0 and stats["kv_usage"] == 0.0
        for _ in range(3):
            await client.completions.create(model=MODEL, prompt="hello there", max_tokens=2)
        await client.close()
    rows = sim.debug_requests()
    assert rows[0]["finish_reason"] == "abort"
    assert len({r["peer"] for r in rows[1:]}) == 1


@pytest.fixture
async def claude():
    """``(client, sim)``: an ``AsyncAnthropic`` on the embedded engine (zero cost)."""
    async with asyncio.timeout(TIMEOUT), serve_sim(zero_cost=True, block_size=16) as sim:
        client = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key="sk-ant-test",
                                          max_retries=0)
        try:
            yield client, sim
        finally:
            await client.close()


def _conversation(turns: int) -> list[dict]:
    """An agent's rounds as Anthropic's API has them: text, a tool use, its result."""
    messages: list[dict] = [{"role": "user", "content": "read the notes " * 20}]
    for k in range(turns):
        messages += [
            {"role": "assistant", "content": [
                {"type": "text", "text": "reading"},
                {"type": "tool_use", "id": f"toolu_{k}", "name": "Read",
                 "input": {"path": f"notes/{k}.md"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": "words " * 30},
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]}]
    return messages


async def test_anthropic_messages_whole_and_streamed(claude) -> None:
    """Anthropic's ``/v1/messages`` (vLLM serves it; Claude Code speaks it): a whole
    message and a stream whose events come in the documented order, usage split into
    uncached input, cache reads and writes, and the output counted as streamed."""
    client, sim = claude
    system = [{"type": "text", "text": "You are a careful agent " * 10}]
    first = await client.messages.create(model=MODEL, max_tokens=5, system=system,
                                         messages=_conversation(0))
    assert first.type == "message" and first.role == "assistant"
    assert first.stop_reason == "max_tokens" and first.model == MODEL
    assert [b.type for b in first.content] == ["text"]
    assert len(first.content[0].text.split()) == 5
    u = first.usage
    assert (u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens) == (
        5, 0, 0)
    async with client.messages.stream(model=MODEL, max_tokens=7, system=system,
                                      messages=_conversation(1)) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_message()
    kinds = [e.type for e in events if e.type not in ("text",)]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    text = "".join(e.text for e in events if e.type == "text")
    assert len(text.split()) == 7 == final.usage.output_tokens
    assert final.stop_reason == "max_tokens"
    rows = sim.debug_requests()
    assert [r["protocol"] for r in rows] == ["messages", "messages"]
    # the second round extends the first: its shared prefix is read from the cache
    cached = rows[1]["cached_tokens"]
    assert cached > 0 and final.usage.cache_read_input_tokens == cached
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.input_tokens + cached == rows[1]["prompt_tokens"]
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens == final.usage.input_tokens
    assert start.message.usage.cache_read_input_tokens == cached


async def test_anthropic_messages_prompt_is_the_chat_template_of_its_blocks(claude) -> None:
    """The prompt is the chat template of the request converted as vLLM converts it
    (system first; a tool use an assistant's tool call, a tool result a ``tool`` message),
    so ``/tokenize`` of those chat messages counts it."""
    client, sim = claude
    answer = await client.messages.create(model=MODEL, max_tokens=1, system="be brief",
                                          messages=_conversation(1))
    chat = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "read the notes " * 20},
            {"role": "assistant", "content": "reading", "tool_calls": [
                {"id": "toolu_0", "type": "function",
                 "function": {"name": "Read", "arguments": '{"path": "notes/0.md"}'}}]},
            {"role": "tool", "tool_call_id": "toolu_0", "content": "words " * 30},
            {"role": "user", "content": "go on"}]
    tokenized = await openai.AsyncOpenAI(base_url=sim.base_url, api_key="x").post(
        "/tokenize", body={"messages": chat}, cast_to=object)
    u = answer.usage
    assert u.input_tokens + (u.cache_read_input_tokens or 0) == tokenized["count"]  # type: ignore[index]


async def test_anthropic_errors_are_sdk_errors(claude) -> None:
    """A request the engine refuses is an HTTP error the SDK raises as its class, its body
    Anthropic's error shape (``{"type": "error", "error": {"type", "message"}}``), as
    vLLM's Anthropic front end translates its errors."""
    client, _ = claude
    with pytest.raises(anthropic.BadRequestError, match="max_tokens") as zero:
        await client.messages.create(model=MODEL, max_tokens=0,
                                     messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="maximum context length") as long:
        await client.messages.create(model=MODEL, max_tokens=1,
                                     messages=[{"role": "user", "content": "w " * 140_000}])
    with pytest.raises(anthropic.BadRequestError, match="role must be") as role:
        await client.messages.count_tokens(model=MODEL,
                                           messages=[{"role": "tool", "content": "hi"}])
    for err in (zero.value, long.value, role.value):
        assert isinstance(err.body, dict) and err.body["type"] == "error"
        assert err.body["error"]["type"] == "BadRequestError"
        assert set(err.body["error"]) == {"type", "message"}


async def test_anthropic_count_tokens_is_the_prompt_a_message_would_have(claude) -> None:
    """``/v1/messages/count_tokens`` (vLLM serves it; Claude Code asks it before a long
    request): the prompt the same request gets in ``/v1/messages``."""
    client, _ = claude
    counted = await client.messages.count_tokens(model=MODEL, system="be brief",
                                                 messages=_conversation(2))
    answer = await client.messages.create(model=MODEL, max_tokens=1, system="be brief",
                                          messages=_conversation(2))
    u = answer.usage
    assert counted.input_tokens == u.input_tokens + (u.cache_read_input_tokens or 0) > 100


async def test_a_bad_length_limit_is_named_as_the_request_sent_it(sdk) -> None:
    """A 400 names the field the request set: ``max_completion_tokens`` (what the newer
    SDKs send) was reported as ``max_tokens``."""
    client, _ = sdk
    for field in ("max_completion_tokens", "max_tokens"):
        with pytest.raises(openai.BadRequestError, match=f"^Error code: 400 - {field} must"):
            await client.chat.completions.create(model=MODEL, messages=[USER],
                                                 **{field: 0})  # type: ignore[call-overload]


async def test_an_unknown_model_is_a_404_as_vllm_answers(sdk, claude) -> None:
    """A ``model`` the server does not serve is vLLM 0.32's 404 ``NotFoundError`` naming
    it and the served name, in every front end that checks it (chat, completions,
    Responses, ``/tokenize``, Anthropic Messages); it was answered 200, so a benchmark
    pointed at the wrong name measured the embedded engine as if it were right."""
    client, sim = sdk
    vllm = {"message": "The model `nope` does not exist. Valid aliases: workbench-sim.",
            "type": "NotFoundError", "param": "model", "code": 404}
    root = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
    calls = [
        lambda: client.chat.completions.create(model="nope", messages=[USER], max_tokens=1),
        lambda: client.completions.create(model="nope", prompt="hello there", max_tokens=1),
        lambda: client.responses.create(model="nope", input="hello there",
                                        max_output_tokens=1),
        lambda: root.post("/tokenize", body={"model": "nope", "prompt": "hi"}, cast_to=object),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as err:
            await call()
        assert err.value.body == vllm
    await root.close()
    anthropic_client, _ = claude
    with pytest.raises(anthropic.NotFoundError) as missing:
        await anthropic_client.messages.create(model="nope", max_tokens=1,
                                               messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body == {"type": "error", "error": {
        "type": "NotFoundError", "message": vllm["message"]}}
    # the served name, and a request without a name, are answered
    ok = await client.completions.create(model=MODEL, prompt="hello there", max_tokens=1)
    assert ok.choices[0].finish_reason == "length"
    assert len(sim.debug_requests()) == 1  # no refused request reached the engine


@pytest.fixture
async def short():
    """``(client, sim)`` on an engine of ``max_model_len`` 64."""
    async with _openai_on_sim(max_model_len=64) as pair:
        yield pair


async def test_length_past_the_context_is_answered_as_vllm_0_32_does(short) -> None:
    """vLLM 0.32.0 (the real-engine tier's, docs/wire-protocols.md "Errors"): a length
    limit above ``max_model_len`` is a 400 naming the field sent; a prompt of
    ``max_model_len`` tokens leaves a limit of 0 (400); a longer one is the context
    error; a limit that only overflows with the prompt is clamped to what is left."""
    client, _ = short

    async def refused(call) -> dict:
        with pytest.raises(openai.BadRequestError) as err:
            await call
        assert isinstance(err.value.body, dict)
        return err.value.body

    for field in ("max_tokens", "max_completion_tokens"):
        body = await refused(client.chat.completions.create(
            model=MODEL, messages=[USER], **{field: 65}))  # type: ignore[call-overload]
        assert body == {"message": f"{field}=65 cannot be greater than max_model_len=64. "
                        f"Please request fewer output tokens. (parameter={field}, value=65)",
                        "type": "BadRequestError", "param": field, "code": 400}
    body = await refused(client.responses.create(model=MODEL, input="hi",
                                                 max_output_tokens=65))
    assert body["param"] == "max_output_tokens"
    full = await refused(client.completions.create(model=MODEL, prompt="w " * 64))
    assert full["message"] == ("max_tokens must be at least 1, got 0. "
                               "(parameter=max_tokens, value=0)")
    assert full["param"] == "max_tokens"
    # text is tokenized one token past the length ("at least"), token ids are counted
    for prompt, said in (("w " * 65, "at least 65"), ("w " * 70, "at least 65"),
                         ([1] * 65, "at least 65"), ([1] * 70, "70")):
        body = await refused(client.completions.create(model=MODEL, prompt=prompt,
                                                       max_tokens=1))
        assert body["message"] == (
            f"This model's maximum context length is 64 tokens. However, your prompt "
            f"contains {said} input tokens, which exceeds this limit even without any "
            f"output tokens. Please reduce the length of the input prompt. "
            f"(parameter=input_tokens, value={said.split()[-1]})")
        assert body["param"] == "input_tokens"
    # within the model's length, past it only with the prompt: clamped, as vLLM 0.32 does
    clamped = await client.chat.completions.create(model=MODEL, messages=[USER], max_tokens=64)
    assert clamped.usage is not None
    assert clamped.usage.completion_tokens == 64 - clamped.usage.prompt_tokens
    assert clamped.choices[0].finish_reason == "length"


async def test_responses_api_whole_and_streamed() -> None:
    """``POST /v1/responses`` as vLLM 0.32 serves it (docs/wire-protocols.md, "Responses
    API"), from ``workbench sim serve`` in a process of its own: the input as chat
    messages (``instructions`` first), one output message; a stream of named events
    ending in ``response.completed``; ``usage`` with the prefix-cache hit in
    ``input_tokens_details.cached_tokens``. It was a 404."""
    async with asyncio.timeout(TIMEOUT), serve_sim_process(zero_cost=True) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="sk-test",
                                    max_retries=0)
        root = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0)
        try:
            await _responses_rounds(client, root)
        finally:
            await client.close()
            await root.close()


async def _responses_rounds(client: openai.AsyncOpenAI, root: openai.AsyncOpenAI) -> None:
    instructions = "You are a careful agent " * 10
    first = await client.responses.create(model=MODEL, instructions=instructions,
                                          input="hello there how are you",
                                          max_output_tokens=5)
    assert first.object == "response" and first.model == MODEL
    assert first.status == "incomplete"
    assert first.incomplete_details is not None
    assert first.incomplete_details.reason == "max_output_tokens"
    assert [o.type for o in first.output] == ["message"]
    assert len(first.output_text.split()) == 5
    u = first.usage
    assert u is not None
    chat = await client.chat.completions.create(model=MODEL, max_tokens=1, messages=[
        {"role": "system", "content": instructions}, USER])
    assert chat.usage is not None and u.input_tokens == chat.usage.prompt_tokens
    assert (u.output_tokens, u.total_tokens) == (5, u.input_tokens + 5)
    assert u.input_tokens_details.cached_tokens == 0
    assert u.output_tokens_details.reasoning_tokens == 0
    # streamed, a longer input sharing the first's prefix, as a list of items
    stream = await client.responses.create(
        model=MODEL, instructions=instructions, max_output_tokens=7, stream=True,
        input=[{"role": "user", "content": "hello there how are you"},
               {"role": "assistant", "content": first.output_text},
               {"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "function_call", "call_id": "c1", "name": "read",
                "arguments": '{"path": "a"}'},
               {"type": "function_call_output", "call_id": "c1", "output": "ok"},
               {"role": "user", "content": [{"type": "input_text", "text": "go on"}]}])
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response  # type: ignore[union-attr]
    assert len(text.split()) == 7 and done.output_text == text
    assert done.status == "incomplete" and done.usage is not None
    rows = await root.get("/debug/requests", cast_to=object)
    assert isinstance(rows, list)
    assert [r["protocol"] for r in rows] == ["responses", "chat", "responses"]
    cached = rows[2]["cached_tokens"]
    assert cached > 0 and done.usage.input_tokens_details.cached_tokens == cached
    assert done.usage.input_tokens == rows[2]["prompt_tokens"]
    # the SDK's stream helper, no limit: the default length ends as the model's own end
    async with client.responses.stream(model=MODEL, input="hi") as helper:
        async for _ in helper:
            pass
        final = await helper.get_final_response()
    assert final.status == "completed" and final.incomplete_details is None
    assert final.usage is not None and final.usage.output_tokens == 16
    # a refused request is the same JSON error shape
    with pytest.raises(openai.BadRequestError, match="Unsupported input item type: image"):
        await client.responses.create(model=MODEL, input=[{"type": "image"}])  # type: ignore[list-item]
