"""``vllm-tokens``: vLLM's native ``POST {root}/inference/v1/generate``, token ids in and out
(docs/wire-protocols.md, "vllm-tokens"); the chunks are parsed by ``openai.ChoicesParser``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.backends.base import (
    BACKENDS,
    PlainCodec,
    WireRequest,
    as_id_list,
)
from workbench.backends.openai import ChoicesParser


@dataclass(frozen=True)
class VLLMTokensCodec(PlainCodec):
    """Exact output ids with no detokenisation on the server."""

    model: str | None = None
    temperature: float = 0.0
    name = "vllm-tokens"

    def url(self, base_url: str) -> str:
        return f"{base_url}/inference/v1/generate"

    def body(self, req: WireRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "token_ids": as_id_list(req.prompt_ids),
            "sampling_params": {
                "max_tokens": req.max_tokens,
                "min_tokens": req.max_tokens,
                "temperature": self.temperature,
                "ignore_eos": True,
            },
            "stream": True,
            "stream_options": {"include_usage": True},
            "request_id": req.request_id,
            "rid": req.request_id,
        }
        if self.model is not None:
            body["model"] = self.model
        return body

    def parser(self, req: WireRequest) -> ChoicesParser:
        return ChoicesParser("request_id")


BACKENDS.add("vllm-tokens", VLLMTokensCodec())
