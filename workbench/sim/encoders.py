"""The engine's wire encoders: per-protocol response shapes (stream chunks, the usage chunk,
the full body), vLLM 0.32's and SGLang's as docs/wire-protocols.md records them, with the
fault switches that change a shape. The client side's request codecs are
``workbench.backends``'. One ``WireEncoder`` serves one request.
"""

from __future__ import annotations

from typing import Any

from workbench.sim.faults import Faults, broken_usage
from workbench.sim.wire import GenRequest, Json, now_s, usage
from workbench.tokenizer import WordTokenizer


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

    def token_chunk(self, ids: list[int], finish_reason: str | None, cached: int) -> Json:
        raise NotImplementedError

    def usage_chunk(self, cached: int) -> Json | None:
        return None

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

    def _choice(self, ids: list[int], finish_reason: str | None, text: str) -> Json:
        choice: Json = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
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
        if self.gen.stream:
            return {"index": 0, "delta": {"content": text}, "logprobs": None,
                    "finish_reason": finish_reason}
        message = {"role": "assistant", "content": text}
        return {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}


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


ENCODERS: dict[str, type[WireEncoder]] = {
    "completions": CompletionsEncoder,
    "chat": ChatEncoder,
    "generate": GenerateEncoder,
    "sglang": SglangEncoder,
}
