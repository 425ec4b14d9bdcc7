"""What the captured APIs look like: the facts of a request body and of a response.
Nothing here keeps text beyond the call (docs/capture.md, "What is captured").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.sse import DONE, SSEDecoder

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"
#: the paths whose exchanges are captured (every other path is only passed through)
CAPTURED_PATHS = (CHAT, COMPLETIONS, MESSAGES)

#: finish/stop reasons → the captured format's ``stop``
_STOP = {
    "stop": "end_turn", "end_turn": "end_turn", "stop_sequence": "end_turn",
    "tool_calls": "tool_use", "function_call": "tool_use", "tool_use": "tool_use",
    "length": "max_tokens", "max_tokens": "max_tokens",
}  # fmt: skip
#: Anthropic content block types → the captured format's output kinds
_BLOCK_KIND = {
    "text": "text", "tool_use": "tool_use", "server_tool_use": "tool_use",
    "thinking": "thinking", "redacted_thinking": "thinking",
}  # fmt: skip
_KIND_ORDER = ("text", "thinking", "tool_use")


def stop_reason(reason: Any) -> str:
    """A finish or stop reason as the format's ``stop`` (``""`` when none or unknown)."""
    return _STOP.get(reason, "") if isinstance(reason, str) else ""


@dataclass(slots=True)
class RequestFacts:
    """One request body, read: ``messages`` as canonical JSON bytes, ``preamble`` before them."""

    api: str  # CHAT | COMPLETIONS | MESSAGES
    model: str
    stream: bool
    messages: list[bytes]
    preamble: bytes
    tool_result: list[bool]  # per message: it carries a tool result
    body: dict[str, Any] = field(repr=False)


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def _canonical(value: Any) -> bytes:
    return orjson.dumps(_strip_cache_control(value), option=orjson.OPT_SORT_KEYS)


def _is_tool_result(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    if message.get("role") in ("tool", "function"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def request_facts(path: str, raw: bytes) -> RequestFacts | None:
    """The facts of a captured request, or ``None`` when the body is not that API's."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    stream = body.get("stream") is True
    if path == COMPLETIONS:
        prompt = body.get("prompt")
        items = [prompt] if prompt is not None else []
        return RequestFacts(COMPLETIONS, model, stream, [_canonical(p) for p in items], b"",
                            [False] * len(items), body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    preamble = _canonical(body.get("system")) if path == MESSAGES and "system" in body else b""
    return RequestFacts(
        CHAT if path == CHAT else MESSAGES, model, stream, [_canonical(m) for m in messages],
        preamble, [_is_tool_result(m) for m in messages], body,
    )  # fmt: skip


def _text_of(content: Any) -> str:
    """The text a local tokenizer sees of a message's content (any shape)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text_of(part) for part in content)
    if isinstance(content, dict):
        kind = content.get("type")
        if kind in ("text", "input_text", "output_text"):
            return str(content.get("text", ""))
        if kind in ("thinking",):
            return str(content.get("thinking", ""))
        if kind == "tool_result":
            return _text_of(content.get("content"))
        if kind == "tool_use":
            return f"{content.get('name', '')} {orjson.dumps(content.get('input')).decode()}"
        return orjson.dumps(_strip_cache_control(content), option=orjson.OPT_SORT_KEYS).decode()
    return str(content)


def prompt_segments(facts: RequestFacts) -> list[tuple[str, str]]:
    """``(role, text)`` per part of the prompt, for a local tokenizer."""
    body = facts.body
    if facts.api == COMPLETIONS:
        prompt = body.get("prompt")
        return [("user", prompt if isinstance(prompt, str) else " ".join(map(str, prompt or [])))]
    parts: list[tuple[str, str]] = []
    if facts.api == MESSAGES and body.get("system") is not None:
        parts.append(("system", _text_of(body.get("system"))))
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        text = _text_of(m.get("content"))
        calls = m.get("tool_calls")
        if calls:
            text += " " + orjson.dumps(calls, option=orjson.OPT_SORT_KEYS).decode()
        parts.append((str(m.get("role", "user")), text))
    return parts


@dataclass(slots=True)
class ResponseFacts:
    """What a response said (counts ``None``: no usage; ``output_events``: the fallback count)."""

    prompt_tokens: int | None = None
    output_tokens: int | None = None
    stop: str = ""
    output_types: list[str] = field(default_factory=list)
    output_events: int = 0


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    n = int(value)
    return n if n == value and n >= 0 else None


def _anthropic_usage(facts: ResponseFacts, usage: Any) -> None:
    """Anthropic's input is split in three: uncached, read from cache, written to cache."""
    if not isinstance(usage, dict):
        return
    parts = [_count(usage.get(k)) for k in
             ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    if parts[0] is not None:
        facts.prompt_tokens = sum(p or 0 for p in parts)
    out = _count(usage.get("output_tokens"))
    if out is not None:
        facts.output_tokens = out  # a stream's message_delta carries the final count


def _openai_choice(facts: ResponseFacts, choice: Any, kinds: set[str], delta_key: str) -> None:
    if not isinstance(choice, dict):
        return
    reason = choice.get("finish_reason")
    if reason:
        facts.stop = stop_reason(reason)
    part = choice.get(delta_key)
    if delta_key == "text":  # completions
        if choice.get("text"):
            kinds.add("text")
            facts.output_events += 1
        return
    if not isinstance(part, dict):
        return
    carried = False
    if part.get("content"):
        kinds.add("text")
        carried = True
    if part.get("tool_calls") or part.get("function_call"):
        kinds.add("tool_use")
        carried = True
    if part.get("reasoning_content") or part.get("reasoning"):
        kinds.add("thinking")
        carried = True
    facts.output_events += carried


def sse_data(raw: bytes) -> Iterable[Any]:
    """The JSON documents of a whole SSE stream, as the replay client frames them."""
    decoder = SSEDecoder()
    for data in [*decoder.feed(raw), *decoder.close()]:
        if not data.strip() or data.strip() == DONE:
            continue
        try:
            yield orjson.loads(data)
        except orjson.JSONDecodeError:
            continue


def response_facts(api: str, stream: bool, raw: bytes) -> ResponseFacts:
    """Read what the upstream answered a captured request (the bytes the agent got)."""
    facts = ResponseFacts()
    kinds: set[str] = set()
    if not stream:
        try:
            docs: Iterable[Any] = [orjson.loads(raw)]
        except orjson.JSONDecodeError:
            return facts
    else:
        docs = sse_data(raw)
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if api == MESSAGES:
            _anthropic_doc(facts, doc, kinds, stream)
            continue
        if (usage := doc.get("usage")) and isinstance(usage, dict):
            facts.prompt_tokens = _count(usage.get("prompt_tokens"))
            facts.output_tokens = _count(usage.get("completion_tokens"))
        key = "text" if api == COMPLETIONS else ("delta" if stream else "message")
        for choice in doc.get("choices") or []:
            _openai_choice(facts, choice, kinds, key)
    if not stream:
        facts.output_events = 0
    facts.output_types = [k for k in _KIND_ORDER if k in kinds]
    return facts


def _anthropic_doc(facts: ResponseFacts, doc: dict[str, Any], kinds: set[str],
                   stream: bool) -> None:
    """One Anthropic document: a whole message, or one stream event."""
    kind = doc.get("type")
    if not stream or kind == "message":
        _anthropic_usage(facts, doc.get("usage"))
        facts.stop = stop_reason(doc.get("stop_reason"))
        for block in doc.get("content") or []:
            if isinstance(block, dict) and block.get("type") in _BLOCK_KIND:
                kinds.add(_BLOCK_KIND[block["type"]])
        return
    if kind == "message_start" and isinstance(doc.get("message"), dict):
        _anthropic_usage(facts, doc["message"].get("usage"))
    elif kind == "content_block_start" and isinstance(doc.get("content_block"), dict):
        block = doc["content_block"].get("type")
        if block in _BLOCK_KIND:
            kinds.add(_BLOCK_KIND[block])
    elif kind == "content_block_delta":
        facts.output_events += 1
    elif kind == "message_delta":
        delta = doc.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason"):
            facts.stop = stop_reason(delta["stop_reason"])
        usage = doc.get("usage")
        if isinstance(usage, dict):
            if "input_tokens" in usage:
                _anthropic_usage(facts, usage)
            elif _count(usage.get("output_tokens")) is not None:
                facts.output_tokens = _count(usage.get("output_tokens"))
