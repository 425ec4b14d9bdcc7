"""What the captured APIs look like: the facts of a request body and of a response.
Nothing here keeps text beyond the call (docs/capture.md, "What is captured").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.sse import DONE, SSEDecoder

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"
#: the OpenAI Responses API (Codex CLI, the newer OpenAI SDK agents)
RESPONSES = "/v1/responses"
#: the paths whose exchanges are captured (every other path is only passed through)
CAPTURED_PATHS = (CHAT, COMPLETIONS, MESSAGES, RESPONSES)

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

    api: str  # CHAT | COMPLETIONS | MESSAGES | RESPONSES
    model: str
    stream: bool
    messages: list[bytes]
    preamble: bytes
    tool_result: list[bool]  # per message: it carries a tool result
    body: dict[str, Any] = field(repr=False)
    #: Responses API: the earlier answer whose items precede ``messages`` on the server
    previous_response_id: str = ""
    #: Responses API: items the server holds come first (``previous_response_id``, a
    #: ``conversation``); their prompt's prefix is known only when rebuilt
    server_items: bool = False
    #: the message chain digests of what precedes ``messages`` (an earlier answer's
    #: request and output, rebuilt: docs/capture.md, "The Responses API"), else None
    prior_chain: list[bytes] | None = None
    #: chat and completions: ``n``, the choices asked for (more than one: not recorded)
    choices: int = 1


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


def loads(raw: bytes | str) -> Any:
    """JSON as orjson reads it; a document orjson refuses for a lone surrogate (an
    escaped ``\\ud83d`` without its other half: JSON allows it, UTF-8 cannot carry it)
    is read by the standard library, each lone surrogate as U+FFFD (docs/capture.md,
    "What is captured"). Raises ``ValueError`` on what is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        if b"\\u" not in (raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace")):
            raise
    import json

    return _without_surrogates(json.loads(raw))


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def request_facts(path: str, raw: bytes) -> RequestFacts | None:
    """The facts of a captured request, or ``None`` when the body is not that API's."""
    try:
        body = loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    stream = body.get("stream") is True
    # the API the path ends with (the relay captures by the path's end: a proxy may be
    # mounted under a prefix); none of them: read as chat
    api = next((p for p in CAPTURED_PATHS if path.endswith(p)), CHAT)
    if api == RESPONSES:
        return _responses_request(model, stream, body)
    n = body.get("n")
    choices = n if type(n) is int and n > 1 else 1
    if api == COMPLETIONS:
        prompt = body.get("prompt")
        items = [prompt] if prompt is not None else []
        return RequestFacts(COMPLETIONS, model, stream, [_canonical(p) for p in items], b"",
                            [False] * len(items), body, choices=choices)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    preamble = _canonical(body.get("system")) if api == MESSAGES and "system" in body else b""
    return RequestFacts(
        api, model, stream, [_canonical(m) for m in messages],
        preamble, [_is_tool_result(m) for m in messages], body,
        choices=choices if api == CHAT else 1,
    )  # fmt: skip


def responses_items(value: Any) -> list[dict[str, Any]] | None:
    """A Responses API ``input`` (or an answer's ``output``) as a list of items in one
    form: a string is one user message, a message item has its ``type`` and a content
    list, an output item's ``status`` is dropped (an agent echoing an answer's items
    sends it, one writing its own does not); None when it is not an ``input``."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    if not isinstance(value, list):
        return None
    items = []
    for item in value:
        if not isinstance(item, dict):
            return None
        item = {k: v for k, v in item.items() if k != "status"}
        if item.get("type", "message") == "message" and "role" in item:
            item["type"] = "message"
            if isinstance(item.get("content"), str):
                part = "output_text" if item["role"] == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
        items.append(item)
    return items


def _responses_preamble(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("instructions", "tools") if body.get(k) is not None}


def _responses_request(model: str, stream: bool, body: dict[str, Any]) -> RequestFacts | None:
    items = responses_items(body.get("input", []))
    if items is None:
        return None
    preamble = _responses_preamble(body)
    previous = body.get("previous_response_id")
    return RequestFacts(
        RESPONSES, model, stream, [_canonical(i) for i in items],
        _canonical(preamble) if preamble else b"",
        [str(i.get("type", "")).endswith("_call_output") for i in items], body,
        previous if isinstance(previous, str) else "",
        server_items=(body.get("conversation") is not None or bool(previous)
                      or any(i.get("type") == "item_reference" for i in items)),
    )  # fmt: skip


def responses_item_bytes(item: dict[str, Any]) -> bytes:
    """One normalized Responses item as the session chain compares it."""
    return _canonical(item)


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
        if kind in ("summary_text", "reasoning_text"):
            return str(content.get("text", ""))
        if kind == "tool_result":
            return _text_of(content.get("content"))
        if kind == "tool_use":
            return f"{content.get('name', '')} {orjson.dumps(content.get('input')).decode()}"
        return orjson.dumps(_strip_cache_control(content), option=orjson.OPT_SORT_KEYS).decode()
    return str(content)


def responses_segments(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(role, text)`` per Responses item, for a local tokenizer: a message its text, a
    function call its name and arguments, a tool's output its text, a reasoning item its
    summary and text (never its encrypted content), anything else its JSON."""
    parts: list[tuple[str, str]] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            parts.append((str(item.get("role", "user")), _text_of(item.get("content"))))
        elif kind == "function_call":
            parts.append(("assistant", f"{item.get('name', '')} {item.get('arguments', '')}"))
        elif isinstance(kind, str) and kind.endswith("_call_output"):
            parts.append(("tool", _text_of(item.get("output"))))
        elif kind == "reasoning":
            text = [_text_of(item.get("summary")), _text_of(item.get("content"))]
            parts.append(("assistant", " ".join(t for t in text if t)))
        else:
            parts.append(("assistant", orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode()))
    return parts


def preamble_segments(facts: RequestFacts) -> list[tuple[str, str]]:
    """The Responses API's ``instructions`` and ``tools`` as a local tokenizer sees them."""
    body, parts = facts.body, []
    if body.get("instructions") is not None:
        parts.append(("system", _text_of(body["instructions"])))
    if body.get("tools"):
        parts.append(("system", orjson.dumps(body["tools"], option=orjson.OPT_SORT_KEYS).decode()))
    return parts


def prompt_segments(facts: RequestFacts) -> list[tuple[str, str]]:
    """``(role, text)`` per part of the prompt, for a local tokenizer (a Responses
    request: its preamble and the items it sends, not the earlier answer it names)."""
    body = facts.body
    if facts.api == RESPONSES:
        return preamble_segments(facts) + responses_segments(
            responses_items(body.get("input", [])) or [])
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
    #: Responses API: the answer's id and output items (its next request may name it)
    response_id: str = ""
    output_items: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: the answer says it failed (a Responses stream's ``response.failed``): not recorded
    failed: bool = False


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


def _answer_words(api: str, doc: dict[str, Any]) -> int:
    """A whole (non-streamed) answer's output in words: its text, tool calls and reasoning
    as the prompt's are read for a local tokenizer (``_text_of``, ``responses_segments``;
    N words, N tokens) — the count taken when the answer has no usage, as a stream's
    output events are (docs/capture.md, "Token counts")."""
    texts: list[Any] = []
    if api == MESSAGES:
        texts.append(_text_of(doc.get("content")))
    elif api == RESPONSES:
        items = [i for i in doc.get("output") or [] if isinstance(i, dict)]
        texts += [text for _, text in responses_segments(items)]
    else:
        for choice in doc.get("choices") or []:
            msg = choice.get("message") if isinstance(choice, dict) and api == CHAT else None
            if not isinstance(msg, dict):
                texts.append(choice.get("text") if isinstance(choice, dict) else None)
                continue
            texts += [_text_of(msg.get("content")), msg.get("reasoning_content"),
                      msg.get("reasoning")]
            calls = [*(msg.get("tool_calls") or []), msg.get("function_call")]
            for call in calls:
                fn = call.get("function", call) if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    texts += [fn.get("name"), fn.get("arguments")]
    return sum(len(t.split()) for t in texts if isinstance(t, str))


#: what reading an answer of JSON not of its API's shape raises (``choices`` a number):
#: the exchange is relayed and not recorded (docs/capture.md, "What is captured")
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def _read_doc(api: str, facts: ResponseFacts, doc: Any, kinds: set[str], stream: bool) -> None:
    """One document of an answer: a whole answer's, or one stream event's."""
    if not isinstance(doc, dict):
        return
    if api == MESSAGES:
        _anthropic_doc(facts, doc, kinds, stream)
        return
    if api == RESPONSES:
        _responses_doc(facts, doc, kinds, stream)
        return
    if (usage := doc.get("usage")) and isinstance(usage, dict):
        facts.prompt_tokens = _count(usage.get("prompt_tokens"))
        facts.output_tokens = _count(usage.get("completion_tokens"))
    key = "text" if api == COMPLETIONS else ("delta" if stream else "message")
    for choice in doc.get("choices") or []:
        _openai_choice(facts, choice, kinds, key)


class AnswerReader:
    """A streamed answer read as its pieces are relayed (``feed`` each, after the agent
    got it; ``close`` at its end): the proxy's loop then pays each event as it passes,
    and only the last one at the end, where a whole 8,000-event answer read at its end
    held the loop ~10 ms (docs/capture.md, "The relay"). The facts are
    ``response_facts``' of the whole bytes, however the stream was cut; an answer not
    of its API's shape raises at ``close``, never into the relay."""

    __slots__ = ("_api", "_error", "_facts", "_kinds", "_sse")

    def __init__(self, api: str) -> None:
        self._api = api
        self._facts = ResponseFacts()
        self._kinds: set[str] = set()
        self._sse = SSEDecoder()
        self._error: Exception | None = None

    def feed(self, piece: bytes) -> None:
        if self._error is None:
            self._read(self._sse.feed(piece))

    def close(self) -> ResponseFacts:
        if self._error is None:
            self._read(self._sse.close())
        if self._error is not None:
            raise self._error
        self._facts.output_types = [k for k in _KIND_ORDER if k in self._kinds]
        return self._facts

    def _read(self, events: list[bytes]) -> None:
        try:
            for data in events:
                if not data.strip() or data.strip() == DONE:
                    continue
                try:
                    doc = loads(data)
                except ValueError:
                    continue
                _read_doc(self._api, self._facts, doc, self._kinds, True)
        except SHAPE_ERRORS as exc:
            self._error = exc


def response_facts(api: str, stream: bool, raw: bytes) -> ResponseFacts:
    """Read what the upstream answered a captured request (the bytes the agent got)."""
    if stream:
        reader = AnswerReader(api)
        reader.feed(raw)
        return reader.close()
    facts = ResponseFacts()
    kinds: set[str] = set()
    try:
        whole = loads(raw)
    except ValueError:
        return facts
    _read_doc(api, facts, whole, kinds, False)
    # no events: a whole answer without usage is counted in words
    facts.output_events = _answer_words(api, whole) if isinstance(whole, dict) else 0
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


#: Responses output item types → the captured format's output kinds (a ``*_call`` is a
#: tool call: function, custom, shell, web search …)
_ITEM_KIND = {"message": "text", "reasoning": "thinking"}
#: the calls the agent runs (its next request carries their output): ``stop: tool_use``;
#: a server's own (``web_search_call``, ``file_search_call`` …) end no turn
_CLIENT_CALLS = frozenset(("function_call", "custom_tool_call", "local_shell_call",
                           "computer_call", "shell_call", "apply_patch_call"))
#: stream events that carry output (the fallback count when there is no usage)
_RESPONSES_DELTAS = frozenset((
    "response.output_text.delta", "response.refusal.delta",
    "response.function_call_arguments.delta", "response.custom_tool_call_input.delta",
    "response.reasoning_text.delta", "response.reasoning_summary_text.delta",
))  # fmt: skip


def _item_kind(item: Any) -> str:
    kind = item.get("type") if isinstance(item, dict) else None
    if not isinstance(kind, str):
        return ""
    return _ITEM_KIND.get(kind) or ("tool_use" if kind.endswith("_call") else "")


def _responses_doc(facts: ResponseFacts, doc: dict[str, Any], kinds: set[str],
                   stream: bool) -> None:
    """One Responses API document: a whole response object, or one stream event."""
    kind = doc.get("type")
    if not stream:
        _responses_object(facts, doc, kinds)
    elif kind in ("response.created", "response.in_progress", "response.completed",
                  "response.incomplete", "response.failed"):
        if isinstance(doc.get("response"), dict):
            _responses_object(facts, doc["response"], kinds)
    elif kind in ("response.output_item.added", "response.output_item.done"):
        item = doc.get("item")
        if (k := _item_kind(item)):
            kinds.add(k)
        if kind == "response.output_item.done" and isinstance(item, dict):
            # the answer's items as they end (a final object without ``output`` keeps them)
            facts.output_items.extend(responses_items([item]) or [])
    elif kind in _RESPONSES_DELTAS:
        facts.output_events += 1
    elif kind == "error":
        facts.failed = True


def _responses_object(facts: ResponseFacts, obj: dict[str, Any], kinds: set[str]) -> None:
    """A response object: its id, usage, output items and status (docs/capture.md)."""
    if isinstance(obj.get("id"), str):
        facts.response_id = obj["id"]
    usage = obj.get("usage")
    if isinstance(usage, dict):
        facts.prompt_tokens = _count(usage.get("input_tokens"))
        facts.output_tokens = _count(usage.get("output_tokens"))
    output = obj.get("output")
    if isinstance(output, list) and output:
        facts.output_items = responses_items(output) or []
        for item in output:
            if (k := _item_kind(item)):
                kinds.add(k)
    status = obj.get("status")
    if status in ("failed", "cancelled"):
        facts.failed = True
    elif status == "completed":
        called = any(i.get("type") in _CLIENT_CALLS for i in facts.output_items)
        facts.stop = "tool_use" if called else "end_turn"
    elif status == "incomplete":
        details = obj.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        facts.stop = "max_tokens" if reason == "max_output_tokens" else ""
