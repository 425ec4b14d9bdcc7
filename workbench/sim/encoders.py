"""The engine's wire encoders: per-protocol response shapes (stream chunks, the usage chunk,
the full body), vLLM 0.32's and SGLang's as docs/wire-protocols.md records them (and
vLLM's Anthropic Messages and Responses API front ends', "Anthropic Messages" and
"Responses API" there), with the
fault switches that change a shape. The client side's request codecs are
``workbench.backends``'. One ``WireEncoder`` serves one request.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from workbench.sim.faults import Faults, broken_usage
from workbench.sim.wire import GenRequest, Json, now_s, usage
from workbench.tokenizer import WordTokenizer

DONE = b"data: [DONE]\n\n"


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # an integer past 64 bits (fault usage_fault "huge"): stdlib json
        return json.dumps(obj, separators=(",", ":")).encode()


def sse(chunk: Json) -> bytes:
    return b"data: " + dumps(chunk) + b"\n\n"


class WireEncoder:
    """Base: what every protocol shares; subclasses fill in the shapes."""

    def __init__(self, gen: GenRequest, model: str, tok: WordTokenizer, faults: Faults) -> None:
        self.gen, self.model, self.tok, self.faults = gen, model, tok, faults
        self.created = now_s()
        self.first = True
        self.completion = 0
        self.text_so_far = ""  # fault text_cumulative

    def head_chunks(self) -> list[Json]:
        return []

    def head_bytes(self) -> list[bytes]:
        """The stream's events before its first token's."""
        return [sse(c) for c in self.head_chunks()]

    def token_chunk(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        raise NotImplementedError

    def token_bytes(self, ids: list[int], finish_reason: str | None, cached: int) -> bytes:
        """The stream's event(s) for these output ids."""
        return sse(self.token_chunk(ids, finish_reason, cached))

    def usage_chunk(self, cached: int) -> Json | None:
        return None

    def end_bytes(self, usage_chunk: Json | None) -> bytes:
        """The stream's end: its usage event, when it has one, then ``[DONE]``."""
        return (sse(usage_chunk) if usage_chunk else b"") + DONE

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        raise NotImplementedError

    def _with_usage(self, body: Json, cached: int) -> Json:
        """``body`` with its ``usage`` block, unless the fault ``omit_usage`` is on."""
        if not self.faults.omit_usage:
            body["usage"] = self._usage(cached)
        return body

    def _usage(self, cached: int) -> Json:
        out = broken_usage(self.faults.usage_fault,
                           usage(len(self.gen.prompt_ids), self.completion, cached))
        if self.faults.omit_cached_tokens and isinstance(out.get("prompt_tokens_details"), dict):
            del out["prompt_tokens_details"]
        return out

    def _text(self, ids: list[int]) -> str:
        """A stream chunk's text: the delta, or all text so far (fault text_cumulative)."""
        piece = self.tok.decode_delta(ids)
        if not self.faults.text_cumulative:
            return piece
        self.text_so_far += piece
        return self.text_so_far


class CompletionsEncoder(WireEncoder):
    """``/v1/completions``: ``cmpl-<id>`` chunks, ``return_token_ids`` fields."""

    def _envelope(self, choices: list[Json]) -> Json:
        return {
            "id": f"cmpl-{self.gen.request_id}",
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _reason(self, finish_reason: str | None) -> str | None:
        """The wire's finish reason: a request that set no length limit ends at the
        engine's default length as a model ends at its end of sequence, ``stop``."""
        return "stop" if finish_reason == "length" and not self.gen.limited else finish_reason

    def _choice(self, ids: list[int], finish_reason: str | None, text: str) -> Json:
        choice: Json = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": self._reason(finish_reason),
            "stop_reason": None,
        }
        if self.gen.return_token_ids:
            choice["prompt_token_ids"] = self.gen.prompt_ids if self.first else None
            choice["token_ids"] = ids
        return choice

    def token_chunk(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion += len(ids)
        chunk = self._envelope([self._choice(ids, finish_reason, self._text(ids))])
        self.first = False
        return chunk

    def usage_chunk(self, cached: int) -> Json | None:
        if not self.gen.include_usage or self.faults.omit_usage:
            return None
        return {**self._envelope([]), "usage": self._usage(cached)}

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion = len(ids)
        choice = self._choice(ids, finish_reason, self.tok.decode(ids))
        return self._with_usage(self._envelope([choice]), cached)


class ChatEncoder(CompletionsEncoder):
    """``/v1/chat/completions``: a role-only first chunk, then ``delta.content``; unary, a
    ``message``."""

    def _envelope(self, choices: list[Json]) -> Json:
        env = super()._envelope(choices)
        env["id"] = f"chatcmpl-{self.gen.request_id}"
        env["object"] = "chat.completion.chunk" if self.gen.stream else "chat.completion"
        return env

    def head_chunks(self) -> list[Json]:
        delta = {"role": "assistant", "content": ""}
        return [
            self._envelope([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
        ]

    def _choice(self, ids: list[int], finish_reason: str | None, text: str) -> Json:
        reason = self._reason(finish_reason)
        if self.gen.stream:
            return {"index": 0, "delta": {"content": text}, "logprobs": None,
                    "finish_reason": reason}
        message = {"role": "assistant", "content": text}
        return {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}


class GenerateEncoder(WireEncoder):
    """vLLM ``/inference/v1/generate`` (tokens in, tokens out)."""

    def _choice(self, ids: list[int], finish_reason: str | None) -> Json:
        return {
            "index": 0,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "token_ids": ids,
            "logprobs": None,
        }

    @property
    def _rid(self) -> str:
        return f"generate-tokens-{self.gen.request_id}"

    def token_chunk(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion += len(ids)
        chunk: Json = {"request_id": self._rid, "usage": None, "output_mode": "tokens"}
        if self.first and self.gen.return_token_ids:
            chunk["prompt_token_ids"] = self.gen.prompt_ids
        self.first = False
        chunk["choices"] = [self._choice(ids, finish_reason)]
        return chunk

    def usage_chunk(self, cached: int) -> Json | None:
        if not self.gen.include_usage or self.faults.omit_usage:
            return None
        return {
            "request_id": self._rid,
            "usage": self._usage(cached),
            "output_mode": "tokens",
            "choices": [],
        }

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion = len(ids)
        body = self._with_usage(
            {"request_id": self._rid, "model": self.model, "created": self.created}, cached
        )
        body["prompt_token_ids"] = self.gen.prompt_ids if self.gen.return_token_ids else None
        body["output_mode"] = "tokens"
        body["choices"] = [self._choice(ids, finish_reason)]
        return body


class SglangEncoder(WireEncoder):
    """SGLang ``/generate``: ``output_ids`` + running ``meta_info`` on every chunk."""

    def __init__(self, gen: GenRequest, model: str, tok: WordTokenizer, faults: Faults) -> None:
        super().__init__(gen, model, tok, faults)
        self.sent_ids: list[int] = []
        k = min(faults.sglang_prompt_echo, len(gen.prompt_ids))
        self.echo = gen.prompt_ids[len(gen.prompt_ids) - k :] if k else []

    def _meta(self, finish_reason: str | None, cached: int) -> Json:
        meta: Json = {
            "id": self.gen.request_id,
            "prompt_tokens": len(self.gen.prompt_ids),
            "completion_tokens": self.completion,
        }
        if not (self.faults.omit_usage or self.faults.omit_cached_tokens):
            meta["cached_tokens"] = cached
            if self.gen.cached_tokens_details:  # one tier here: every cached token on device
                meta["cached_tokens_details"] = {"device": cached, "host": 0}
        reason: Any = None
        if finish_reason == "length":
            reason = {"type": "length", "length": self.completion}
        elif finish_reason is not None:
            reason = {"type": finish_reason}
        meta["finish_reason"] = reason
        return broken_usage(self.faults.usage_fault, meta)

    def _body(self, out_ids: list[int], finish_reason: str | None, cached: int) -> Json:
        body: Json = {"output_ids": out_ids}
        if self.gen.text_input:
            body["text"] = self.tok.decode(out_ids)
        body["meta_info"] = self._meta(finish_reason, cached)
        return body

    def token_chunk(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion += len(ids)
        self.sent_ids += ids
        if self.faults.sglang_cumulative:
            out = self.echo + self.sent_ids
        else:
            out = (self.echo + ids) if self.first else ids
        self.first = False
        return self._body(out, finish_reason, cached)

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion = len(ids)
        return self._body(self.echo + ids, finish_reason, cached)


#: the engine's finish reasons as Anthropic's stop reasons (vLLM's ``stop_reason_map``)
ANTHROPIC_STOP = {"length": "max_tokens", "stop": "end_turn"}


class MessagesEncoder(WireEncoder):
    """Anthropic's ``/v1/messages`` (docs/wire-protocols.md, "Anthropic Messages"): one
    text block; a stream of named events, ``message_start`` (input usage) with the first
    token, ``content_block_delta`` per batch, then ``content_block_stop``,
    ``message_delta`` (stop reason, usage) and ``message_stop``."""

    def _event(self, data: Json) -> bytes:
        return b"event: " + data["type"].encode() + b"\ndata: " + dumps(data) + b"\n\n"

    def _anthropic_usage(self, cached: int) -> Json:
        """Anthropic's split: uncached input, cache reads (the engine's hit), writes 0."""
        return {"input_tokens": len(self.gen.prompt_ids) - cached,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
                "output_tokens": self.completion}

    def _message(self, content: list[Json], stop: str | None, cached: int) -> Json:
        msg: Json = {"id": f"msg_{self.gen.request_id}", "type": "message",
                     "role": "assistant", "model": self.model, "content": content,
                     "stop_reason": stop, "stop_sequence": None}
        if not self.faults.omit_usage:
            msg["usage"] = self._anthropic_usage(cached)
        return msg

    def token_bytes(self, ids: list[int], finish_reason: str | None, cached: int) -> bytes:
        out = b""
        if self.first:
            self.first = False
            out = self._event({"type": "message_start", "message": self._message([], None, cached)})
            out += self._event({"type": "content_block_start", "index": 0,
                                "content_block": {"type": "text", "text": ""}})
        self.completion += len(ids)
        delta = {"type": "text_delta", "text": self._text(ids)}
        return out + self._event({"type": "content_block_delta", "index": 0, "delta": delta})

    def usage_chunk(self, cached: int) -> Json | None:
        delta: Json = {"type": "message_delta",
                       "delta": {"stop_reason": ANTHROPIC_STOP["length"], "stop_sequence": None}}
        if not self.faults.omit_usage:
            delta["usage"] = self._anthropic_usage(cached)
        return delta

    def end_bytes(self, usage_chunk: Json | None) -> bytes:
        out = b"" if self.first else self._event({"type": "content_block_stop", "index": 0})
        if usage_chunk:
            out += self._event(usage_chunk)
        return out + self._event({"type": "message_stop"})

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion = len(ids)
        stop = ANTHROPIC_STOP.get(finish_reason or "", finish_reason)
        return self._message([{"type": "text", "text": self.tok.decode(ids)}], stop, cached)


class ResponsesEncoder(WireEncoder):
    """The Responses API's ``/v1/responses`` as vLLM 0.32 answers a text model
    (docs/wire-protocols.md, "Responses API"): one ``message`` output item with one
    ``output_text`` part; a stream of ``event:``-named events, numbered by
    ``sequence_number``, ``response.created`` and ``response.in_progress``, the item and
    part added with the first token, ``response.output_text.delta`` per batch, then the
    text, part and item done and ``response.completed`` with the whole response and its
    usage; no ``[DONE]``."""

    def __init__(self, gen: GenRequest, model: str, tok: WordTokenizer, faults: Faults) -> None:
        super().__init__(gen, model, tok, faults)
        self.seq = 0
        self.item_id = f"msg_{gen.request_id}"
        self.text = ""  # the whole text streamed so far

    def _event(self, data: Json) -> bytes:
        data = {"type": data["type"], "sequence_number": self.seq, **data}
        self.seq += 1
        return b"event: " + data["type"].encode() + b"\ndata: " + dumps(data) + b"\n\n"

    def _status(self, finish_reason: str | None) -> str:
        """``incomplete`` at a limit the request set, as vLLM's ``length``; ``completed``
        at the engine's default length (a model's own end)."""
        return "incomplete" if finish_reason == "length" and self.gen.limited else "completed"

    def _response_usage(self, cached: int) -> Json | None:
        """vLLM's ``ResponseUsage``: the prompt with its prefix-cache hit, the output."""
        if self.faults.omit_usage:
            return None
        prompt = len(self.gen.prompt_ids)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0,
                                     "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens": self.completion,
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": prompt + self.completion,
        }

    def _response(self, status: str, output: list[Json], usage: Json | None) -> Json:
        return {
            "id": f"resp_{self.gen.request_id}", "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "model": self.model, "object": "response", "output": output,
            "max_output_tokens": self.gen.max_tokens, "max_tool_calls": None, "prompt": None,
            **(self.gen.echo or {}), "status": status, "usage": usage,
        }  # fmt: skip

    def _part(self, text: str) -> Json:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": None}

    def _message(self, text: str, status: str) -> Json:
        return {"id": self.item_id, "type": "message", "role": "assistant",
                "content": [self._part(text)] if text else [], "status": status}

    def head_bytes(self) -> list[bytes]:
        start = self._response("in_progress", [], None)
        return [self._event({"type": "response.created", "response": start}),
                self._event({"type": "response.in_progress", "response": start})]

    def token_bytes(self, ids: list[int], finish_reason: str | None, cached: int) -> bytes:
        out = b""
        where = {"output_index": 0, "item_id": self.item_id}
        if self.first:
            self.first = False
            out = self._event({"type": "response.output_item.added", "output_index": 0,
                               "item": self._message("", "in_progress")})
            out += self._event({"type": "response.content_part.added", **where,
                                "content_index": 0, "part": {**self._part(""), "logprobs": []}})
        self.completion += len(ids)
        self.text += self.tok.decode_delta(ids)
        return out + self._event({"type": "response.output_text.delta", **where,
                                  "content_index": 0, "delta": self._text(ids), "logprobs": []})

    def usage_chunk(self, cached: int) -> Json | None:
        """The finished response ``response.completed`` carries (``_stream``: at ``length``)."""
        status = self._status("length")
        return self._response(status, [self._message(self.text, "completed")],
                              self._response_usage(cached))

    def end_bytes(self, usage_chunk: Json | None) -> bytes:
        if usage_chunk is None:  # the engine stopped the request: the stream just ends
            return b""
        where = {"output_index": 0, "item_id": self.item_id, "content_index": 0}
        part = self._part(self.text)
        return b"".join([
            self._event({"type": "response.output_text.done", **where, "text": self.text,
                         "logprobs": []}),
            self._event({"type": "response.content_part.done", **where, "part": part}),
            self._event({"type": "response.output_item.done", "output_index": 0,
                         "item": self._message(self.text, "completed")}),
            self._event({"type": "response.completed", "response": usage_chunk}),
        ])

    def final_body(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        self.completion = len(ids)
        text = self.tok.decode(ids)
        return self._response(self._status(finish_reason), [self._message(text, "completed")],
                              self._response_usage(cached))


ENCODERS: dict[str, type[WireEncoder]] = {
    "completions": CompletionsEncoder,
    "chat": ChatEncoder,
    "generate": GenerateEncoder,
    "sglang": SglangEncoder,
    "messages": MessagesEncoder,
    "responses": ResponsesEncoder,
}
