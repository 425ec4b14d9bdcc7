"""``openai`` and ``vllm-tokens`` codecs on scripted payloads (vLLM 0.32 shapes)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from workbench.backends import BACKENDS, BackendError, WireRequest, make_codec
from workbench.backends.base import parse_openai_usage
from workbench.backends.openai import UNKNOWN_TOKEN
from workbench.errors import ConfigError

REQ = WireRequest(request_id="r-1", prompt_ids=[5, 6, 7], max_tokens=3)


def j(obj: Any) -> bytes:
    return orjson.dumps(obj)


def cmpl_chunk(ids: list[int] | None, finish: str | None = None, **choice: Any) -> bytes:
    c = {"index": 0, "text": "", "finish_reason": finish, "token_ids": ids, **choice}
    return j({"id": "cmpl-r-1", "object": "text_completion", "choices": [c]})


def usage_chunk(prompt: int = 3, completion: int = 3, details: Any = None, **extra: Any) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, **extra}
    if details is not None:
        usage["prompt_tokens_details"] = details
    return j({"id": "cmpl-r-1", "choices": [], "usage": usage})


def feed_all(parser: Any, payloads: list[bytes]) -> list[list[int] | None]:
    return [parser.feed(p) for p in payloads]


def test_registry_names():
    assert set(BACKENDS.names()) == {"openai", "openai-chat", "vllm-tokens", "sglang-tokens"}


def test_completions_body_pins_output_and_carries_id():
    codec = make_codec("openai", model="tiny-llama")
    assert codec.url("http://h:1") == "http://h:1/v1/completions"
    assert codec.body(REQ) == {
        "model": "tiny-llama",
        "prompt": [5, 6, 7],
        "max_tokens": 3,
        "min_tokens": 3,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "rid": "r-1",
    }


def test_make_codec_rejects_unknown_options():
    with pytest.raises(ConfigError, match="no option"):
        make_codec("openai", initial_overhead_tokens=3)


def test_completions_stream_vllm_shape():
    parser = BACKENDS.get("openai").parser(REQ)
    got = feed_all(
        parser,
        [
            cmpl_chunk([11], prompt_token_ids=[5, 6, 7]),
            cmpl_chunk([12, 13], finish="length"),
            usage_chunk(details={"cached_tokens": 0}),
        ],
    )
    assert got == [[11], [12, 13], None]
    out = parser.finish()
    assert out.output_ids == [11, 12, 13]
    assert (out.prompt_tokens, out.completion_tokens) == (3, 3)
    assert (out.cached_tokens, out.cached_tokens_reported) == (0, True)
    assert out.finish_reason == "length"
    assert out.server_request_id == "cmpl-r-1"


def test_empty_token_chunks_are_not_events():
    parser = BACKENDS.get("openai").parser(REQ)
    assert parser.feed(cmpl_chunk([])) is None
    assert parser.feed(j({"id": "x", "choices": []})) is None


def test_missing_usage_fails():
    parser = BACKENDS.get("openai").parser(REQ)
    parser.feed(cmpl_chunk([1, 2, 3], finish="length"))
    with pytest.raises(BackendError, match="include_usage"):
        parser.finish()


def test_usage_without_cache_detail_is_zero_but_unreported():
    assert parse_openai_usage({"prompt_tokens": 4, "completion_tokens": 1}) == (4, 1, 0, False)
    details = {"prompt_tokens_details": {"cached_tokens": 992}}
    assert parse_openai_usage({"prompt_tokens": 1000, **details})[2:] == (992, True)
    assert parse_openai_usage({"prompt_tokens_details": None, "cache_read_input_tokens": 5})[
        2:
    ] == (5, True)


def test_output_id_count_must_match_usage():
    parser = BACKENDS.get("openai").parser(REQ)
    parser.feed(cmpl_chunk([1, 2]))
    parser.feed(usage_chunk(completion=3))
    with pytest.raises(BackendError, match="completion_tokens=3"):
        parser.finish()


def test_no_token_ids_at_all_names_return_token_ids():
    parser = BACKENDS.get("openai").parser(REQ)
    parser.feed(cmpl_chunk([]))
    parser.feed(usage_chunk(completion=3))
    with pytest.raises(BackendError, match="return_token_ids"):
        parser.finish()


def test_text_only_server_counts_events_but_has_no_ids():
    parser = BACKENDS.get("openai").parser(REQ)
    assert parser.feed(cmpl_chunk(None, text=" hi")) == [UNKNOWN_TOKEN]
    assert parser.feed(cmpl_chunk(None, text="")) is None
    parser.feed(usage_chunk(completion=1))
    out = parser.finish()
    assert out.output_ids is None
    assert out.completion_tokens == 1


def test_a_text_only_answer_of_one_empty_text_token_is_not_a_missing_ids_error():
    """llama.cpp: a 1-token answer whose token decodes to no text streams text "" only."""
    parser = BACKENDS.get("openai").parser(REQ)
    assert parser.feed(cmpl_chunk(None, text="", finish="length")) is None
    parser.feed(usage_chunk(completion=1))
    out = parser.finish()
    assert out.output_ids is None and out.completion_tokens == 1
    batched = BACKENDS.get("openai").parser(REQ)
    assert batched.feed_all([cmpl_chunk(None, text=""), usage_chunk(completion=1)]) == []
    assert batched.finish().output_ids is None


@pytest.mark.parametrize(
    "payload",
    [b'{"error": {"message": "boom"}}', b'{"object": "error", "message": "boom"}'],
)
def test_error_object_in_stream(payload: bytes):
    with pytest.raises(BackendError, match="boom"):
        BACKENDS.get("openai").parser(REQ).feed(payload)


def test_bad_json_is_a_backend_error():
    with pytest.raises(BackendError, match="bad JSON"):
        BACKENDS.get("vllm-tokens").parser(REQ).feed(b"{not json")


def test_vllm_tokens_body():
    codec = BACKENDS.get("vllm-tokens")
    assert codec.url("http://h:1") == "http://h:1/inference/v1/generate"
    assert codec.body(REQ) == {
        "token_ids": [5, 6, 7],
        "sampling_params": {
            "max_tokens": 3,
            "min_tokens": 3,
            "temperature": 0.0,
            "ignore_eos": True,
        },
        "stream": True,
        "stream_options": {"include_usage": True},
        "request_id": "r-1",
        "rid": "r-1",
    }


def test_vllm_tokens_stream():
    parser = BACKENDS.get("vllm-tokens").parser(REQ)
    chunk = {"request_id": "generate-tokens-r-1", "usage": None, "output_mode": "tokens"}
    got = feed_all(
        parser,
        [
            j({**chunk, "choices": [{"index": 0, "finish_reason": None, "token_ids": [6408]}]}),
            j({**chunk, "choices": [{"index": 0, "finish_reason": None, "token_ids": [25663]}]}),
            j({**chunk, "choices": [{"index": 0, "finish_reason": "length", "token_ids": [6408]}]}),
            j(
                {
                    **chunk,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 3,
                        "completion_tokens": 3,
                        "prompt_tokens_details": {"cached_tokens": 2},
                    },
                }
            ),
        ],
    )
    assert got == [[6408], [25663], [6408], None]
    out = parser.finish()
    assert out.output_ids == [6408, 25663, 6408]
    assert out.server_request_id == "generate-tokens-r-1"
    assert (out.cached_tokens, out.cached_tokens_reported, out.finish_reason) == (2, True, "length")


def test_with_options_returns_a_fresh_configured_codec():
    base = BACKENDS.get("vllm-tokens")
    tuned = base.with_options(model="m", temperature=0.5)  # type: ignore[attr-defined]
    assert tuned is not base and tuned.body(REQ)["model"] == "m"
    assert tuned.body(REQ)["sampling_params"]["temperature"] == 0.5
    assert "model" not in base.body(REQ)
    with pytest.raises(ConfigError, match="valid: model, temperature"):
        base.with_options(bogus=1)  # type: ignore[attr-defined]
