"""``sglang-tokens``: body, incremental stream, and the two guards of docs/wire-protocols.md."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from workbench.backends import BACKENDS, BackendError, WireRequest

PROMPT = [100, 101, 102, 103, 104]
REQ = WireRequest(request_id="r-9", prompt_ids=PROMPT, max_tokens=3)


def chunk(ids: list[int], done: int, finish: Any = None, cached: int | None = 2) -> bytes:
    meta: dict[str, Any] = {
        "id": "r-9",
        "prompt_tokens": len(PROMPT),
        "completion_tokens": done,
        "finish_reason": finish,
    }
    if cached is not None:
        meta["cached_tokens"] = cached
    return orjson.dumps({"output_ids": ids, "meta_info": meta})


def run(payloads: list[bytes]) -> tuple[list[Any], Any]:
    parser = BACKENDS.get("sglang-tokens").parser(REQ)
    got = [parser.feed(p) for p in payloads]
    return got, parser.finish()


def test_body():
    codec = BACKENDS.get("sglang-tokens")
    assert codec.url("http://h:2") == "http://h:2/generate"
    assert codec.body(REQ) == {
        "rid": "r-9",
        "input_ids": PROMPT,
        "sampling_params": {
            "max_new_tokens": 3,
            "min_new_tokens": 3,
            "temperature": 0.0,
            "ignore_eos": True,
        },
        "stream": True,
    }


def test_incremental_stream_with_object_finish_reason():
    got, out = run([chunk([7], 1), chunk([8], 2), chunk([9], 3, {"type": "length", "length": 3})])
    assert got == [[7], [8], [9]]
    assert out.output_ids == [7, 8, 9]
    assert (out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (5, 3, 2)
    assert out.cached_tokens_reported
    assert out.finish_reason == "length"
    assert out.server_request_id == "r-9"
    assert out.echoed_prompt_tokens == 0


def test_cumulative_stream_fails_naming_the_flag():
    parser = BACKENDS.get("sglang-tokens").parser(REQ)
    parser.feed(chunk([7], 1))
    with pytest.raises(BackendError, match="--stream-output") as err:
        parser.feed(chunk([7, 8], 2))
    assert "--incremental-streaming-output" in str(err.value)


def test_repeated_token_multi_delta_is_not_mistaken_for_cumulative():
    got, out = run([chunk([7], 1), chunk([7, 7], 3, "length")])
    assert got == [[7], [7, 7]]
    assert out.output_ids == [7, 7, 7]


def test_prompt_echo_is_trimmed_and_counted():
    # the first chunk carries the prompt's last two ids before the first real token
    got, out = run([chunk([103, 104, 7], 1), chunk([8], 2), chunk([9], 3, "length")])
    assert got == [[7], [8], [9]]
    assert out.output_ids == [7, 8, 9]
    assert out.echoed_prompt_tokens == 2


def test_echo_only_chunk_is_not_a_token_event():
    got, out = run([chunk([104], 0), chunk([7], 1), chunk([8], 2), chunk([9], 3)])
    assert got[0] == []
    assert out.echoed_prompt_tokens == 1
    assert out.output_ids == [7, 8, 9]


def test_surplus_that_is_not_the_prompt_tail_fails():
    parser = BACKENDS.get("sglang-tokens").parser(REQ)
    for p in [chunk([55, 7], 1), chunk([8], 2), chunk([9], 3)]:
        parser.feed(p)
    with pytest.raises(BackendError, match="not the prompt's tail"):
        parser.finish()


def test_missing_meta_info_fails():
    parser = BACKENDS.get("sglang-tokens").parser(REQ)
    parser.feed(orjson.dumps({"output_ids": [1]}))
    with pytest.raises(BackendError, match="meta_info"):
        parser.finish()


def test_cached_tokens_absent_is_flagged():
    _, out = run([chunk([7, 8, 9], 3, "stop", cached=None)])
    assert (out.cached_tokens, out.cached_tokens_reported) == (0, False)
