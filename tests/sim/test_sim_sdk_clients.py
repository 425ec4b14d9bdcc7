"""The embedded engine driven by the official OpenAI Python SDK, as users point it at
``workbench sim serve`` (docs/embedded-engine.md, "Clients we did not write"): each test
is a call an SDK user makes, and the SDK must parse the answer without raising."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from workbench.sim.server import serve_sim

MODEL = "workbench-sim"
USER = {"role": "user", "content": "hello there how are you"}
TIMEOUT = 30


@pytest.fixture
async def sdk():
    """``(client, sim)``: an ``AsyncOpenAI`` on the embedded engine (zero cost), no retries."""
    async with asyncio.timeout(TIMEOUT), serve_sim(zero_cost=True) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="sk-test",
                                    max_retries=0)
        try:
            yield client, sim
        finally:
            await client.close()


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
