"""``openai-chat``: text rendering, template-overhead accounting, conversation reuse."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from workbench.backends import BackendError, WireRequest, make_codec
from workbench.backends.openai_chat import OpenAIChatCodec


class WordTok:
    """The documented contract of the shared tokenizer: one word per id."""

    def encode(self, text: str) -> list[int]:
        return [int(w[1:]) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{i}" for i in ids)


def codec(**kw: Any) -> OpenAIChatCodec:
    c = make_codec("openai-chat", tokenizer=WordTok(), **kw)
    assert isinstance(c, OpenAIChatCodec)
    return c


def delta(content: str | None = None, role: str | None = None, finish: str | None = None) -> bytes:
    d: dict[str, Any] = {}
    if role is not None:
        d["role"] = role
    if content is not None:
        d["content"] = content
    choice = {"index": 0, "delta": d, "finish_reason": finish}
    return orjson.dumps({"id": "chatcmpl-x", "choices": [choice]})


def usage(prompt: int, completion: int, cached: int = 0) -> bytes:
    u = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return orjson.dumps({"id": "chatcmpl-x", "choices": [], "usage": u})


def answer(c: OpenAIChatCodec, req: WireRequest, words: list[str]) -> Any:
    body = c.body(req)
    parser = c.parser(req)
    events = [parser.feed(delta("", role="assistant"))]
    events += [parser.feed(delta(w)) for w in words]
    events.append(parser.feed(usage(len(req.prompt_ids), len(words))))
    return body, events, parser.finish()


def test_body_and_overhead_on_first_round():
    c = codec(initial_overhead_tokens=2, model="m")
    req = WireRequest("r1", list(range(10, 16)), 4, session_id="s")
    body = c.body(req)
    assert c.url("http://h") == "http://h/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "w10 w11 w12 w13"}]
    assert body["max_tokens"] == body["min_tokens"] == 4
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["rid"], body["model"]) == ("r1", "m")
    assert c.returns_token_ids is False


def test_role_only_chunk_is_not_a_token_event_and_reply_is_reencoded():
    c = codec()
    req = WireRequest("r1", [1, 2, 3], 2, session_id="s")
    _, events, out = answer(c, req, [" w40", " w41"])
    assert events == [None, [40], [41], None]
    assert out.output_ids == [40, 41]
    assert out.completion_tokens == 2
    assert out.server_request_id == "chatcmpl-x"


def test_whitespace_delta_still_counts_as_one_event():
    c = codec()
    req = WireRequest("r1", [1], 1)
    c.body(req)
    parser = c.parser(req)
    assert parser.feed(delta("\n")) == [-1]


def test_next_round_appends_assistant_and_user_turns():
    c = codec(initial_overhead_tokens=1, turn_overhead_tokens=2)
    r1 = WireRequest("r1", [1, 2, 3, 4], 2, session_id="s")
    answer(c, r1, [" w40", " w41"])
    prompt2 = [1, 2, 3, 4, 40, 41, 7, 8, 9, 10]
    body = c.body(WireRequest("r2", prompt2, 2, session_id="s", new_conversation=False))
    assert body["messages"] == [
        {"role": "user", "content": "w1 w2 w3"},
        {"role": "assistant", "content": " w40 w41"},
        {"role": "user", "content": "w7 w8"},
    ]


def test_cut_prefix_or_new_conversation_starts_fresh():
    c = codec(initial_overhead_tokens=1)
    answer(c, WireRequest("r1", [1, 2, 3], 1, session_id="s"), [" w40"])
    cut = WireRequest("r2", [1, 2, 9, 9], 1, session_id="s", new_conversation=False)
    assert c.body(cut)["messages"] == [{"role": "user", "content": "w1 w2 w9"}]
    again = WireRequest("r3", [1, 2, 3, 40, 5], 1, session_id="s", new_conversation=True)
    assert len(c.body(again)["messages"]) == 1


def test_missing_usage_fails():
    c = codec()
    req = WireRequest("r1", [1], 1)
    c.body(req)
    parser = c.parser(req)
    parser.feed(delta(" w5"))
    with pytest.raises(BackendError, match="usage"):
        parser.finish()


def test_shared_tokenizer_round_trips_prompt_text():
    from workbench.backends.openai_chat import default_tokenizer

    tok = default_tokenizer()
    ids = [100, 2000, 31999, 500]
    c = make_codec("openai-chat")
    content = c.body(WireRequest("r", ids, 1))["messages"][0]["content"]
    assert tok.encode(content) == ids


def test_with_options_keeps_tokenizer_and_changes_overheads():
    c = codec(initial_overhead_tokens=1)
    tuned = c.with_options(initial_overhead_tokens=2)
    assert tuned.body(WireRequest("r", [1, 2, 3], 1))["messages"][0]["content"] == "w1"
    assert c.initial_overhead_tokens == 1
