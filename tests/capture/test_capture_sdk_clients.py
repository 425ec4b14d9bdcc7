"""The official SDKs through the capture proxy, in front of the embedded engine (which
speaks chat, completions, the Responses API and Anthropic's Messages): what each SDK
sends, streamed and whole, is recorded with the counts the engine itself served
(``/debug/requests``), and each SDK gets its answer parsed as it would from the engine
directly (docs/capture.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anthropic
import openai

from workbench.capture import CaptureProxy, read_capture
from workbench.sim.server import serve_sim

TIMEOUT = 60
MODEL = "workbench-sim"


async def test_sdk_rounds_are_recorded_with_the_engines_counts(tmp_path: Path) -> None:
    async with asyncio.timeout(TIMEOUT), serve_sim(zero_cost=True) as sim, \
            CaptureProxy(sim.base_url, tmp_path) as proxy:
        oa = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test-secret",
                                max_retries=0)
        chat = [{"role": "developer", "content": "plan first " * 40},
                {"role": "user", "content": "list the files"}]
        whole = await oa.chat.completions.create(model=MODEL, messages=chat, max_tokens=6)
        chat += [{"role": "assistant", "content": whole.choices[0].message.content},
                 {"role": "user", "content": "and the tests"}]
        stream = await oa.chat.completions.create(model=MODEL, messages=chat, max_tokens=5,
                                                  stream=True)  # no include_usage
        chunks = [c async for c in stream]
        assert len("".join(ch.delta.content or "" for c in chunks
                           for ch in c.choices).split()) == 5
        text = await oa.completions.create(model=MODEL, prompt="def main():", max_tokens=3,
                                           stream=True, stream_options={"include_usage": True})
        assert [c.usage.completion_tokens async for c in text if c.usage] == [3]
        # the Responses API (the engine serves it as vLLM does), whole and streamed
        said = await oa.responses.create(model=MODEL, instructions="be terse " * 20,
                                         input="what changed", max_output_tokens=4)
        assert said.status == "incomplete" and len(said.output_text.split()) == 4
        events = await oa.responses.create(
            model=MODEL, instructions="be terse " * 20, max_output_tokens=6, stream=True,
            input=[{"role": "user", "content": "what changed"},
                   {"role": "assistant", "content": said.output_text},
                   {"role": "user", "content": "and why"}])
        done = [e.response async for e in events if e.type == "response.completed"]
        assert len(done) == 1 and done[0].usage is not None
        assert done[0].usage.input_tokens_details.cached_tokens > 0
        await oa.close()
        an = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sk-ant-secret",
                                      max_retries=0)
        talk = [{"role": "user", "content": "read the notes " * 30}]
        first = await an.messages.create(model=MODEL, max_tokens=4, system="careful",
                                          messages=talk)
        talk += [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                 {"role": "user", "content": "go on"}]
        async with an.messages.stream(model=MODEL, max_tokens=8, system="careful",
                                      messages=talk) as s:
            second = await s.get_final_message()
        await an.close()
    assert first.stop_reason == second.stop_reason == "max_tokens"
    served = {r["prompt_tokens"]: r for r in sim.debug_requests()}
    rounds = [r for doc in read_capture(tmp_path) for r in doc["requests"]]
    assert len(rounds) == len(served) == 7
    for r in rounds:  # the proxy's in/out are the engine's own counts, however they came
        truth = served[r["in"]]
        assert r["out"] == truth["completion_tokens"]
        assert r["model"] == MODEL and r["stop"] == "max_tokens"
    assert second.usage.cache_read_input_tokens == served[
        second.usage.input_tokens + second.usage.cache_read_input_tokens]["cached_tokens"] > 0
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert b"secret" not in data and b"notes" not in data
