"""Wire shapes of the four protocols the embedded engine speaks, and of Anthropic's
Messages and OpenAI's Responses API for other clients, as plain dicts
(docs/wire-protocols.md): ``parse_*`` turn a request body into a ``GenRequest``, after
vLLM's model and length checks (``check_model``, ``vllm_length_rules``); the responses
are ``sim.encoders``'. No aiohttp here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.tokenizer import WordTokenizer

Json = dict[str, Any]


class WireError(Exception):
    """A request the server rejects: HTTP ``status`` with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> Json:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }

    def anthropic_body(self) -> Json:
        """Anthropic's error shape, as vLLM's Anthropic front end translates its errors
        (docs/wire-protocols.md, "Anthropic Messages")."""
        return {"type": "error", "error": {"type": self.kind, "message": self.message}}


@dataclass(frozen=True, slots=True)
class GenRequest:
    """A generation request, whatever protocol it came in."""

    protocol: str
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    return_token_ids: bool
    text_input: bool
    model: str
    cached_tokens_details: bool = False  # SGLang return_cached_tokens_details
    #: the request set its length limit; without one, the default length ends as a model's
    #: own end: ``stop``, not ``length`` (docs/embedded-engine.md, "Clients we did not write")
    limited: bool = True
    #: the field the length limit came in (named in a refusal: ``vllm_length_rules``)
    limit_field: str = "max_tokens"
    #: request fields a Responses answer repeats (``instructions``, ``tools``, ...)
    echo: Mapping[str, Any] | None = None


def _ids(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise WireError(400, f"{what} must be a non-empty list of token ids")
    if not all(type(t) is int and t >= 0 for t in value):
        raise WireError(400, f"{what} must hold non-negative integers only")
    return value


def _positive(value: Any, what: str, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or value < 1:
        raise WireError(400, f"{what} must be a positive integer, got {value!r}")
    return value


def _stream_opts(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options") or {}
    return bool(opts.get("include_usage")) if isinstance(opts, dict) else False


#: options a request may set only to their one-choice, no-probabilities values; any other
#: value is refused, never ignored (docs/embedded-engine.md, "What the engine refuses")
ONE_CHOICE: dict[str, tuple[Any, ...]] = {
    "n": (None, 1), "best_of": (None, 1), "echo": (None, False), "logprobs": (None, False),
    "top_logprobs": (None, 0), "prompt_logprobs": (None,), "use_beam_search": (None, False),
}


def _one_choice(body: Mapping[str, Any], where: str = "") -> None:
    """``WireError`` (400) for an option the embedded engine cannot honour."""
    for key, fine in ONE_CHOICE.items():
        value = body.get(key)
        if not any(value is f or (type(value) is type(f) and value == f) for f in fine):
            raise WireError(400, f"{where}{key}={value!r}: the embedded engine answers one "
                            "choice of pinned length per request, without echo or token "
                            f"probabilities (allowed: {', '.join(map(repr, fine))})")


def _prompt(value: Any, tok: WordTokenizer) -> tuple[list[int], bool]:
    """vLLM's accepted ``prompt`` forms: ids, text, or a one-element list of either."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (list, str)):
        value = value[0]
    if isinstance(value, list) and value and all(isinstance(v, (list, str)) for v in value):
        raise WireError(400, f"prompt is a batch of {len(value)} prompts: the embedded engine "
                        "serves one prompt per request (send one request each)")
    if isinstance(value, str):
        ids = tok.encode(value)
        if not ids:
            raise WireError(400, "prompt text encodes to zero tokens")
        return ids, True
    return _ids(value, "prompt"), False


def prompt_ids(value: Any, tok: WordTokenizer) -> list[int]:
    """The token ids of a ``prompt`` in any form ``/v1/completions`` accepts (``/tokenize``)."""
    return _prompt(value, tok)[0]


def parse_completions(
    body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str
) -> GenRequest:
    _one_choice(body)
    ids, text = _prompt(body.get("prompt"), tok)
    limit = body.get("max_tokens")
    return GenRequest(
        "completions", rid, ids, _positive(limit, "max_tokens", 16),
        bool(body.get("stream")), _stream_opts(body), bool(body.get("return_token_ids")),
        text, model, limited=limit is not None,
    )  # fmt: skip


#: ``developer`` is the newer OpenAI APIs' name for ``system`` (vLLM takes both): one id
ROLE_IDS = {"system": 3, "developer": 3, "user": 4, "assistant": 5, "tool": 6}
END_OF_TURN = 7


def _calls_text(calls: Any) -> str:
    """An assistant message's ``tool_calls`` as its template renders them: each call's
    function name and arguments (docs/embedded-engine.md, "Clients we did not write")."""
    if not isinstance(calls, list):
        return ""
    fns = [c.get("function") for c in calls if isinstance(c, dict)]
    return " ".join(f"{f.get('name') or ''} {f.get('arguments') or ''}"
                    for f in fns if isinstance(f, dict))


def chat_prompt(messages: Any, tok: WordTokenizer) -> list[int]:
    """The built-in chat template: ``<|role|> content <|end|>`` per message (an
    assistant's tool calls after its content), then ``<|assistant|>``. So a conversation
    costs 2 tokens per message plus 1 more than its content: the hidden template overhead
    real chat servers add."""
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list")
    ids: list[int] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLE_IDS:
            raise WireError(400, f"bad message {m!r}: role must be one of {sorted(ROLE_IDS)}")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        ids += [ROLE_IDS[m["role"]], *tok.encode(str(content)),
                *tok.encode(_calls_text(m.get("tool_calls"))), END_OF_TURN]
    ids.append(ROLE_IDS["assistant"])
    return ids


def parse_chat(body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str) -> GenRequest:
    _one_choice(body)
    # vLLM's rule: max_completion_tokens, unless unset or null, else max_tokens
    field = "max_tokens" if body.get("max_completion_tokens") is None else "max_completion_tokens"
    limit = body.get(field)
    return GenRequest(
        "chat", rid, chat_prompt(body.get("messages"), tok), _positive(limit, field, 16),
        bool(body.get("stream")), _stream_opts(body), False, True, model,
        limited=limit is not None, limit_field=field,
    )  # fmt: skip


def _item_text(content: Any) -> Any:
    """A Responses message's content as chat content: a string, or its parts' texts."""
    if isinstance(content, list):
        return [{"text": p.get("text", "")} for p in content if isinstance(p, dict)]
    return content


def responses_as_chat(body: Mapping[str, Any]) -> list[Json]:
    """A Responses API request as the chat messages vLLM 0.32 converts it to
    (docs/wire-protocols.md, "Responses API"): ``instructions`` as a system message; a
    string ``input`` one user message; per input item a message with its role, a
    ``function_call`` (or ``custom_tool_call``) a tool call of the assistant message
    before it (or a new one), its ``*_output`` a ``tool`` message, a ``reasoning`` item
    nothing; any other item a 400 naming its type."""
    chat: list[Json] = []
    if body.get("instructions"):
        chat.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return [*chat, {"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise WireError(400, "input must be a string or a non-empty list of items",
                        param="input")
    for item in items:
        if not isinstance(item, dict):
            raise WireError(400, f"bad input item {item!r}: not an object", param="input")
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments") if kind == "function_call" else item.get("input")
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": args}}
            last = chat[-1] if chat else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            chat.append({"role": "tool", "tool_call_id": item.get("call_id"),
                         "content": item.get("output")})
        elif kind == "reasoning":
            continue  # vLLM: the assistant's ``reasoning``; the built-in template has none
        elif "role" in item and kind in (None, "message"):
            chat.append({"role": item["role"], "content": _item_text(item.get("content"))})
        else:
            raise WireError(400, f"Unsupported input item type: {kind}", param="input")
    return chat


#: a Responses request's fields its answer repeats, with vLLM's defaults
RESPONSES_ECHO: dict[str, Any] = {
    "instructions": None, "metadata": None, "parallel_tool_calls": True, "temperature": 1.0,
    "tool_choice": "auto", "tools": [], "top_p": 1.0, "background": False,
    "previous_response_id": None, "reasoning": None, "service_tier": "auto", "text": None,
    "top_logprobs": 0, "truncation": "disabled", "user": None,
}


def parse_responses(body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str
                    ) -> GenRequest:
    """The Responses API's ``POST /v1/responses``: ``max_output_tokens`` is the limit."""
    _one_choice(body)
    limit = body.get("max_output_tokens")
    echo = {k: body[k] if body.get(k) is not None else v for k, v in RESPONSES_ECHO.items()}
    return GenRequest(
        "responses", rid, chat_prompt(responses_as_chat(body), tok),
        _positive(limit, "max_output_tokens", 16), bool(body.get("stream")), True, False,
        True, model, limited=limit is not None, limit_field="max_output_tokens", echo=echo,
    )  # fmt: skip


def _block_text(content: Any) -> str:
    """The text of an Anthropic content value: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return " ".join(str(b.get("text", "")) for b in content
                    if isinstance(b, dict) and b.get("type") == "text")


def messages_as_chat(body: Mapping[str, Any]) -> list[Json]:
    """An Anthropic Messages request as the chat messages vLLM converts it to
    (docs/wire-protocols.md, "Anthropic Messages"): ``system`` first; per message its
    text; an assistant's ``tool_use`` blocks its ``tool_calls`` (the input as JSON); a
    user's ``tool_result`` blocks ``tool`` messages before the rest of its text."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list")
    chat: list[Json] = []
    system = _block_text(body.get("system"))
    if system:
        chat.append({"role": "system", "content": system})
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise WireError(400, f"bad message {m!r}: role must be user or assistant")
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        calls = [{"id": b.get("id"), "type": "function",
                  "function": {"name": b.get("name"),
                               "arguments": json.dumps(b.get("input") or {})}}
                 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                chat.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                             "content": _block_text(b.get("content"))})
        text = _block_text(content)
        if text or calls or not blocks:
            chat.append({"role": m["role"], "content": text,
                         **({"tool_calls": calls} if calls else {})})
    return chat


def parse_messages(body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str
                   ) -> GenRequest:
    """Anthropic's ``/v1/messages``: ``max_tokens`` is required, as Anthropic's API has it."""
    limit = body.get("max_tokens")
    if limit is None:
        raise WireError(400, "max_tokens is required (Anthropic's Messages API)")
    return GenRequest(
        "messages", rid, chat_prompt(messages_as_chat(body), tok),
        _positive(limit, "max_tokens", 16), bool(body.get("stream")), True, False, True, model,
    )  # fmt: skip


def parse_generate(body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str) -> GenRequest:
    params = body.get("sampling_params")
    if not isinstance(params, dict):
        raise WireError(400, "sampling_params is required (an object with max_tokens)")
    _one_choice(params, "sampling_params.")
    return GenRequest(
        "generate", rid, _ids(body.get("token_ids"), "token_ids"),
        _positive(params.get("max_tokens"), "sampling_params.max_tokens", 16),
        bool(body.get("stream")), _stream_opts(body), bool(body.get("return_token_ids")),
        False, model,
    )  # fmt: skip


def parse_sglang(body: Mapping[str, Any], rid: str, tok: WordTokenizer, model: str) -> GenRequest:
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise WireError(400, "sampling_params must be an object")
    _one_choice(params, "sampling_params.")
    if body.get("return_logprob"):
        raise WireError(400, "return_logprob: the embedded engine has no token probabilities")
    text = body.get("input_ids") is None and isinstance(body.get("text"), str)
    ids = tok.encode(body["text"]) if text else _ids(body.get("input_ids"), "input_ids")
    if not ids:
        raise WireError(400, "text encodes to zero tokens")
    return GenRequest(
        "sglang", rid, ids, _positive(params.get("max_new_tokens"), "max_new_tokens", 128),
        bool(body.get("stream")), True, False, text, model,
        bool(body.get("return_cached_tokens_details")),
    )  # fmt: skip


PARSERS: dict[str, Callable[[Mapping[str, Any], str, WordTokenizer, str], GenRequest]] = {
    "completions": parse_completions,
    "chat": parse_chat,
    "generate": parse_generate,
    "sglang": parse_sglang,
    "messages": parse_messages,
    "responses": parse_responses,
}

#: the front ends that check ``model`` as vLLM does (SGLang's ``/generate`` does not;
#: nor does vLLM's ``/v1/messages/count_tokens``)
MODEL_CHECKED = frozenset({"completions", "chat", "generate", "messages", "responses"})
#: the front ends that apply vLLM 0.32's length rules (``vllm_length_rules``); its
#: tokens-in ``/inference/v1/generate`` clamps a limit past the model's length instead
LENGTH_CHECKED = frozenset({"completions", "chat", "messages", "responses"})


def check_model(body: Mapping[str, Any], served: str) -> None:
    """vLLM 0.32's ``_check_model``: a ``model`` other than the served one is a 404
    (docs/wire-protocols.md, "Errors"); none, or an empty one, passes."""
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise WireError(400, f"model must be a string, got {type(name).__name__}",
                        param="model")
    if name and name != served:
        raise WireError(404, f"The model `{name}` does not exist. Valid aliases: {served}.",
                        "NotFoundError", param="model")


def vllm_length_rules(gen: GenRequest, max_model_len: int) -> None:
    """vLLM 0.32.0's refusals of a length (docs/wire-protocols.md, "Errors"), in its
    order: a limit above ``max_model_len``; a prompt longer than it; a prompt of exactly
    it (the limit left is 0). A limit that overflows only with the prompt passes: the
    engine clamps it to what is left, as vLLM's ``get_max_tokens`` does."""
    def refuse(message: str, param: str, value: int) -> WireError:
        return WireError(400, f"{message} (parameter={param}, value={value})", param=param)

    limit, field, n = gen.max_tokens, gen.limit_field, len(gen.prompt_ids)
    if gen.limited and limit > max_model_len:
        raise refuse(f"{field}={limit} cannot be greater than max_model_len="
                     f"{max_model_len}. Please request fewer output tokens.", field, limit)
    if n > max_model_len:
        # text is tokenized only up to one token past the length: "at least" that many
        n = max_model_len + 1 if gen.text_input else n
        least = "at least " if n == max_model_len + 1 else ""
        raise refuse(f"This model's maximum context length is {max_model_len} tokens. "
                     f"However, your prompt contains {least}{n} input tokens, which exceeds "
                     "this limit even without any output tokens. Please reduce the length "
                     "of the input prompt.", "input_tokens", n)
    if n == max_model_len:
        raise refuse("max_tokens must be at least 1, got 0.", "max_tokens", 0)


def usage(prompt: int, completion: int, cached: int) -> Json:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def now_s() -> int:
    return int(time.time())
