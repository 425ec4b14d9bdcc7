"""``sglang-tokens``: SGLang's native ``POST {root}/generate`` with token ids in and out, and
its two guards (docs/wire-protocols.md, "sglang-tokens"; sgl-project/sglang#10896).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.backends.base import (
    BACKENDS,
    SGLANG_FLUSH,
    VLLM_RESET,
    BackendError,
    EventParser,
    PlainCodec,
    ServerFacts,
    StreamOutcome,
    WireRequest,
    as_id_list,
    finish_reason_of,
    loads,
    usage_count,
)

CUMULATIVE_HINT = (
    "SGLang streamed cumulative output_ids (each chunk repeats every id so far): "
    "start the server with --stream-output (newer name: --incremental-streaming-output)"
)


def _done_count(meta: dict[str, Any]) -> int | None:
    done = meta.get("completion_tokens")
    if done is None:
        return usage_count("output_tokens", meta.get("output_tokens"))
    return usage_count("completion_tokens", done)


#: SGLang's own flush route first; its native endpoint's cache telemetry and switch
SGLANG_SERVERS = ServerFacts(
    (SGLANG_FLUSH, VLLM_RESET),
    "SGLang sent no meta_info.cached_tokens; use a build that reports it",
    "prefix caching looks off: start SGLang without --disable-radix-cache",
    profile_dir_field="output_dir",
)


class SGLangParser(EventParser):
    """Incremental ``output_ids`` with both guards (echoed ids never count as token events)."""

    __slots__ = ("_echo", "_ids", "_meta", "_prompt")

    def __init__(self, prompt_ids: Sequence[int]) -> None:
        self._prompt = prompt_ids
        self._ids: list[int] = []
        self._meta: dict[str, Any] | None = None
        self._echo = 0

    def feed(self, payload: bytes) -> list[int] | None:
        obj = loads(payload)
        meta = obj.get("meta_info")
        done = None
        if meta:
            self._meta = meta
            done = _done_count(meta)
        ids = obj.get("output_ids")
        if not ids:
            return None
        got = self._ids
        n = len(got)
        if (
            n
            and len(ids) > n
            and ids[:n] == got
            and (done is None or n + len(ids) - self._echo > done)
        ):
            raise BackendError(CUMULATIVE_HINT)
        got.extend(ids)
        if done is not None:
            surplus = len(got) - done
            if surplus > self._echo:
                grown = surplus - self._echo
                self._echo = surplus
                return ids[grown:]
        return ids

    def finish(self) -> StreamOutcome:
        meta = self._meta
        if meta is None:
            raise BackendError("stream ended without meta_info (no usage from SGLang)")
        completion = _done_count(meta)
        output, echoed = self._trim_echo(completion)
        cached = usage_count("cached_tokens", meta.get("cached_tokens"))
        rid = meta.get("id")
        details = meta.get("cached_tokens_details")  # asked for: device/host/storage split
        return StreamOutcome(
            prompt_tokens=usage_count("prompt_tokens", meta.get("prompt_tokens")),
            completion_tokens=completion,
            cached_tokens=cached or 0,
            cached_tokens_reported=cached is not None,
            finish_reason=finish_reason_of(meta.get("finish_reason")),
            server_request_id=None if rid is None else str(rid),
            echoed_prompt_tokens=echoed,
            output_ids=output,
            server_metrics={"cached_tokens_details": details} if details else None,
        )

    def _trim_echo(self, completion: int | None) -> tuple[list[int], int]:
        ids = self._ids
        if completion is None:
            raise BackendError("SGLang meta_info has no completion_tokens")
        surplus = len(ids) - completion
        if surplus < 0:
            raise BackendError(
                f"stream carried {len(ids)} output ids but meta_info reports "
                f"completion_tokens={completion}"
            )
        if surplus == 0:
            return ids, 0
        prompt = self._prompt
        if surplus <= len(prompt) and list(prompt[len(prompt) - surplus :]) == ids[:surplus]:
            return ids[surplus:], surplus
        raise BackendError(
            f"stream carried {len(ids)} output ids but completion_tokens={completion}, "
            f"and the {surplus} surplus ids are not the prompt's tail (not a prompt echo)"
        )


@dataclass(frozen=True)
class SGLangTokensCodec(PlainCodec):
    """Exact output ids from SGLang's native endpoint."""

    temperature: float = 0.0
    # SGLang's split of cached tokens by tier, kept per request (docs/sweeps.md)
    return_cached_tokens_details: bool = False
    name = "sglang-tokens"
    servers = SGLANG_SERVERS

    def url(self, base_url: str) -> str:
        return f"{base_url}/generate"

    def body(self, req: WireRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "rid": req.request_id,
            "input_ids": as_id_list(req.prompt_ids),
            "sampling_params": {
                "max_new_tokens": req.max_tokens,
                "min_new_tokens": req.max_tokens,
                "temperature": self.temperature,
                "ignore_eos": True,
            },
            "stream": True,
        }
        if self.return_cached_tokens_details:
            body["return_cached_tokens_details"] = True
        return body

    def parser(self, req: WireRequest) -> SGLangParser:
        return SGLangParser(req.prompt_ids)


BACKENDS.add("sglang-tokens", SGLangTokensCodec())
