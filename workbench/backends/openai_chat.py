"""``openai-chat``: ``POST {root}/v1/chat/completions`` with synthetic text messages, one
word per token id; conversations and template overheads: docs/wire-protocols.md,
"openai-chat". Output ids are the reply re-encoded, hence ``returns_token_ids = False``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.backends.base import (
    BACKENDS,
    BackendError,
    OpenAIChunks,
    PlainCodec,
    StreamOutcome,
    WireRequest,
    loads,
    openai_body,
)
from workbench.backends.openai import UNKNOWN_TOKEN

Message = dict[str, str]


class TextTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


def default_tokenizer() -> TextTokenizer:
    """The shared deterministic tokenizer, imported late so backends stay light."""
    from workbench.tokenizer import get_tokenizer

    return get_tokenizer()


@dataclass(slots=True)
class _Conversation:
    messages: list[Message]
    covered: int  # prompt ids the messages stand for (prompt + reply ids)
    key: int  # hash of those ids


class OpenAIChatCodec(PlainCodec):
    """Chat completions; remembers each session's messages to build the next round."""

    name = "openai-chat"
    sends_messages = True
    whole_answers = True
    returns_token_ids = False
    OPTIONS = (
        "model",
        "temperature",
        "initial_overhead_tokens",
        "turn_overhead_tokens",
        "tokenizer",
        "max_sessions",
        "stream",
    )

    def __init__(
        self,
        model: str | None = None,
        temperature: float = 0.0,
        initial_overhead_tokens: int = 0,
        turn_overhead_tokens: int = 0,
        tokenizer: TextTokenizer | None = None,
        max_sessions: int = 4096,
        stream: bool = True,
    ) -> None:
        self.model = model
        self.stream = stream  # False: "stream": false, the answer read whole
        self.temperature = temperature
        self.initial_overhead_tokens = initial_overhead_tokens
        self.turn_overhead_tokens = turn_overhead_tokens
        self.max_sessions = max_sessions
        self._tokenizer = tokenizer
        self._sessions: OrderedDict[str, _Conversation] = OrderedDict()
        self._pending: dict[str, list[Message]] = {}

    @property
    def tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None:
            self._tokenizer = default_tokenizer()
        return self._tokenizer

    def url(self, base_url: str) -> str:
        return f"{base_url}/v1/chat/completions"

    def body(self, req: WireRequest) -> dict[str, Any]:
        messages = self.messages(req)
        self._pending[req.request_id] = messages
        return openai_body(req, {"messages": messages}, self)

    def parser(self, req: WireRequest) -> ChatParser:
        messages = self._pending.pop(req.request_id, None)
        if messages is None:
            messages = self.messages(req)
        return ChatParser(self, req, messages)

    def messages(self, req: WireRequest) -> list[Message]:
        """The messages for ``req`` (pure with respect to the stored conversations)."""
        ids = list(req.prompt_ids)
        conv = None
        if not req.new_conversation and req.session_id:
            conv = self._sessions.get(req.session_id)
        if (
            conv is not None
            and conv.covered < len(ids)
            and hash(tuple(ids[: conv.covered])) == conv.key
        ):
            fresh = ids[conv.covered :]
            keep = max(0, len(fresh) - self.turn_overhead_tokens)
            return [*conv.messages, self._user(fresh[:keep])]
        keep = max(0, len(ids) - self.initial_overhead_tokens)
        return [self._user(ids[:keep])]

    def remember(
        self, req: WireRequest, messages: list[Message], reply: str, reply_ids: list[int]
    ) -> None:
        """Store a finished round so the next one can append to it."""
        if not req.session_id:
            return
        ids = [*req.prompt_ids, *reply_ids]
        conv = _Conversation(
            messages=[*messages, {"role": "assistant", "content": reply}],
            covered=len(ids),
            key=hash(tuple(ids)),
        )
        sessions = self._sessions
        sessions[req.session_id] = conv
        sessions.move_to_end(req.session_id)
        while len(sessions) > self.max_sessions:
            sessions.popitem(last=False)

    def _user(self, ids: list[int]) -> Message:
        return {"role": "user", "content": self.tokenizer.decode(ids)}


CUMULATIVE_TEXT_HINT = (
    "the chat stream's content is cumulative (each chunk repeats all the text so far, "
    "and the text holds more tokens than usage.completion_tokens): the server does not "
    "stream deltas; use a server or proxy that streams OpenAI deltas"
)


class ChatParser(OpenAIChunks):
    """Chat deltas (or a whole answer's ``message``): each chunk with text is a token event of
    its text re-encoded; cumulative content fails the request."""

    __slots__ = ("_codec", "_grown", "_messages", "_parts", "_req")

    def __init__(self, codec: OpenAIChatCodec, req: WireRequest, messages: list[Message]):
        super().__init__("id")
        self._codec = codec
        self._req = req
        self._messages = messages
        self._parts: list[str] = []
        self._grown = 0  # chunks that repeated the previous chunk's text and added to it

    def feed(self, payload: bytes) -> list[int] | None:
        choice = self._head(loads(payload))
        if choice is None:
            return None
        # a stream's chunk has a delta, a whole (non-streaming) answer its message
        delta = choice.get("delta") or choice.get("message")
        if not delta:
            return None
        content = delta.get("content")
        if content:
            parts = self._parts
            if parts and len(content) > len(parts[-1]) and content.startswith(parts[-1]):
                self._grown += 1
            parts.append(content)
        else:
            content = delta.get("reasoning_content") or delta.get("reasoning")
            if not content:
                return None
        return self._codec.tokenizer.encode(content) or [UNKNOWN_TOKEN]

    def finish(self) -> StreamOutcome:
        counts = self._usage_counts()
        reply = "".join(self._parts)
        reply_ids = self._codec.tokenizer.encode(reply)
        completion = counts[1]
        if (
            self._grown >= 2 and self._grown == len(self._parts) - 1
            and completion is not None and len(reply_ids) > completion
        ):  # fmt: skip
            raise BackendError(CUMULATIVE_TEXT_HINT)
        self._codec.remember(self._req, self._messages, reply, reply_ids)
        return self._outcome(counts, reply_ids)


BACKENDS.add("openai-chat", OpenAIChatCodec())
