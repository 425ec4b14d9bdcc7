"""``openai``: ``POST {root}/v1/completions`` with the prompt as a token-id list
(docs/wire-protocols.md, "openai"). Servers without ``return_token_ids`` stream text only:
each text chunk is one token event of unknown id. ``ChoicesParser`` serves ``vllm-tokens`` too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import orjson

from workbench.backends.base import (
    BACKENDS,
    BackendError,
    EventParser,
    OpenAIChunks,
    PlainCodec,
    StreamOutcome,
    WireRequest,
    as_id_list,
    check_output_count,
    loads,
    openai_body,
)

#: Stands in for a token whose id the server did not return (text-only streams).
UNKNOWN_TOKEN = -1


class ChoicesParser(OpenAIChunks):
    """Parser for streams of ``{choices:[{token_ids, finish_reason}], usage}`` chunks."""

    __slots__ = ("_ids", "_missing")

    def __init__(self, id_key: str) -> None:
        super().__init__(id_key)
        self._ids: list[int] = []
        self._missing = False

    def feed(self, payload: bytes) -> list[int] | None:
        return self._take(loads(payload))

    def _take(self, obj: dict[str, Any]) -> list[int] | None:
        """One parsed chunk → its output ids (text-only streams: one unknown id per text chunk)."""
        choice = self._head(obj)
        if choice is None:
            return None
        ids = choice.get("token_ids")
        if ids:
            self._ids.extend(ids)
            return ids
        if ids is None and "text" in choice:
            return self._text_only(choice)
        return None

    def _text_only(self, choice: dict[str, Any]) -> list[int] | None:
        """A chunk of a text-only stream (llama.cpp, SGLang): one unknown id if it has text."""
        self._missing = True
        return [UNKNOWN_TOKEN] if choice["text"] else None

    def feed_all(self, payloads: list[bytes], counts: list[int] | None = None) -> list[int]:
        """``feed`` on each payload, with one ``orjson.loads`` per read."""
        if counts is None:
            counts = []
        if len(payloads) == 1:
            if n := self.feed_one(payloads[0]):
                counts.append(n)
            return counts
        joined = b"[" + b",".join(payloads) + b"]"
        try:
            objs = orjson.loads(joined)
        except orjson.JSONDecodeError:
            objs = None
        if objs is None or len(objs) != len(payloads) or b'"error"' in joined:
            return EventParser.feed_all(self, payloads, counts)  # feed raises the precise error
        out, start = self._ids, len(self._ids)
        lo, hi = 0, len(objs)
        head: list[int] = []
        if self._rid is None:  # the stream's first chunk: the careful path
            if type(objs[0]) is not dict:
                return EventParser.feed_all(self, payloads, counts)  # feed raises the precise error
            ids = self._take(objs[0])
            head, lo = ([len(ids)] if ids else []), 1
        while hi > lo and type(objs[hi - 1]) is dict and "usage" in objs[hi - 1]:
            hi -= 1  # the usage chunk(s) at the end: the careful path, after the tokens
        try:  # plain token chunks: one comprehension, no calls per chunk
            idss = [obj["choices"][0]["token_ids"] for obj in objs[lo:hi]]
            out.extend(itertools.chain.from_iterable(idss))
        except (KeyError, IndexError, TypeError):  # unusual chunks, text-only streams
            del out[start:]  # (the head's ids too: feed takes every payload again)
            return EventParser.feed_all(self, payloads, counts)
        counts += head
        counts += [len(ids) for ids in idss if ids]
        for obj in reversed(objs[lo:hi]):  # the last finish_reason of the read wins
            reason = obj["choices"][0].get("finish_reason")
            if reason is not None:
                self._finish = reason
                break
        for obj in objs[hi:]:
            ids = self._take(obj)
            if ids:
                counts.append(len(ids))
        return counts

    def feed_one(self, payload: bytes) -> int:
        """``feed_all([payload])`` without the lists: a streamed answer is mostly this."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        if (
            type(obj) is not dict or self._rid is None or "error" in obj or "usage" in obj
            or obj.get("object") == "error"
        ):  # fmt: skip
            ids = self.feed(payload)  # the general path (and its precise errors)
            return len(ids) if ids else 0
        choices = obj.get("choices")
        if not choices:
            return 0
        choice = choices[0]
        reason = choice.get("finish_reason")
        if reason is not None:
            self._finish = reason
        ids = choice.get("token_ids")
        if ids:
            self._ids.extend(ids)
            return len(ids)
        if ids is None and "text" in choice:
            return 1 if self._text_only(choice) else 0
        return 0

    def finish(self) -> StreamOutcome:
        counts = self._usage_counts()
        completion = counts[1]
        output: list[int] | None = None
        if not self._missing:
            if not self._ids and completion:
                raise BackendError(
                    f"usage reports completion_tokens={completion} but the stream carried "
                    "no output token ids (does the server support return_token_ids?)"
                )
            check_output_count(self._ids, completion)
            output = self._ids
        return self._outcome(counts, output)


@dataclass(frozen=True)
class OpenAICompletionsCodec(PlainCodec):
    """OpenAI-compatible completions with a token-id prompt (vLLM, SGLang, llama.cpp)."""

    model: str | None = None
    temperature: float = 0.0
    #: False: ``"stream": false``, the answer read whole (``backend.stream``)
    stream: bool = True
    whole_answers = True
    name = "openai"

    def url(self, base_url: str) -> str:
        return f"{base_url}/v1/completions"

    def body(self, req: WireRequest) -> dict[str, Any]:
        prompt = {"prompt": as_id_list(req.prompt_ids)}
        return openai_body(req, prompt, self, return_token_ids=True)

    def parser(self, req: WireRequest) -> ChoicesParser:
        return ChoicesParser("id")


BACKENDS.add("openai", OpenAICompletionsCodec(), "openai-completions")
