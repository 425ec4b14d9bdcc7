"""Axis 4 interfaces: what a wire protocol (a *codec*) must provide, and the parsing
helpers the OpenAI-shaped codecs share. A codec builds bodies and parses payloads; it
never touches the network or the clock (``transport.Transport`` owns both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self

import orjson

from workbench import redact
from workbench.backends.extras import EXTRA_KEYS, RequestExtras
from workbench.error_answers import error_message
from workbench.errors import ConfigError, WorkbenchError
from workbench.plurals import noun
from workbench.registry import Registry
from workbench.segments import Segments


class BackendError(WorkbenchError):
    """The server broke its wire protocol, or a guard found a server misconfiguration."""


class MissingUsage(BackendError):
    """A stream ended without the usage block it was asked for (``transport`` says whether
    it ended at ``[DONE]``: a server ignoring ``include_usage``, or cut short before)."""


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request as the wire sees it: the whole prompt as token ids plus pinned output."""

    request_id: str
    prompt_ids: Sequence[int]
    max_tokens: int
    session_id: str = ""
    routing_slot: int | None = None
    new_conversation: bool = True
    #: the prompt as parts, for a sender that takes them (virtual time; ``prompt_ids`` empty)
    segments: Segments | None = None
    #: called with the dispatch stamp each time the request goes out
    on_sent: Callable[[int], None] | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.segments) if self.segments is not None else len(self.prompt_ids)


@dataclass(slots=True)
class StreamOutcome:
    """What a finished stream told us, after the codec's validation (``cached_tokens_reported``
    False: usage had no cache detail; ``output_ids`` None: the protocol cannot return them)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cached_tokens_reported: bool
    finish_reason: str | None
    server_request_id: str | None
    echoed_prompt_tokens: int = 0
    output_ids: list[int] | None = None
    server_metrics: dict[str, Any] | None = None


class StreamParser(Protocol):
    """Parses one request's stream; a fresh one per request."""

    def feed(self, payload: bytes) -> list[int] | None:
        """One SSE ``data:`` payload → its output token ids; ``BackendError`` on a violation."""
        ...

    def feed_all(self, payloads: list[bytes], counts: list[int] | None = None) -> list[int]:
        """Every payload of one read → the id count of each token event, in order, appended
        to ``counts`` (a new list if None) and returned; on a violation the counts of the
        events before it are in ``counts`` when it raises (a failed request keeps what it
        received, docs/metrics.md)."""
        ...

    def feed_one(self, payload: bytes) -> int:
        """One payload (a read of exactly one event) → its token id count (0: none)."""
        ...

    def finish(self) -> StreamOutcome:
        """After ``[DONE]`` or the body's end: validate and summarise."""
        ...


class EventParser:
    """The fast paths in terms of ``feed``, for parsers with nothing faster."""

    __slots__ = ()

    def feed(self, payload: bytes) -> list[int] | None:
        raise NotImplementedError

    def feed_all(self, payloads: list[bytes], counts: list[int] | None = None) -> list[int]:
        if counts is None:
            counts = []
        for data in payloads:
            ids = self.feed(data)
            if ids:
                counts.append(len(ids))
        return counts

    def feed_one(self, payload: bytes) -> int:
        ids = self.feed(payload)
        return len(ids) if ids else 0


#: the routes that reset a server's prefix cache (docs/cache-isolation.md)
VLLM_RESET = "/reset_prefix_cache"
SGLANG_FLUSH = "/flush_cache"


@dataclass(frozen=True)
class ServerFacts:
    """What a backend declares about its servers (reset routes, preflight advice, profiler)."""

    flush_routes: tuple[str, ...]
    no_cached_tokens: str
    cache_off: str
    profile_dir_field: str | None = None


#: vLLM first, then SGLang's OpenAI layer: the servers behind the OpenAI-shaped protocols
OPENAI_SERVERS = ServerFacts(
    (VLLM_RESET, SGLANG_FLUSH),
    "the server did not report usage.prompt_tokens_details.cached_tokens: start vLLM "
    "with --enable-prompt-tokens-details (SGLang's OpenAI layer: --enable-cache-report)",
    "prefix caching looks off: start vLLM with --enable-prefix-caching "
    "(SGLang: do not pass --disable-radix-cache)",
)


class Codec(Protocol):
    """One wire protocol: URL, request body, stream parser, and what it declares (so
    nothing dispatches on a backend's name): its registry ``name``; ``returns_token_ids``
    (the parser yields the server's exact output ids); ``servers``; ``stream`` (False: the
    answer read whole) and ``whole_answers`` (the protocol can ask for one);
    ``sends_messages`` (chat messages built from the ids: ``MessagesCodec``); and
    ``request_headers`` beyond the transport's own. A new backend is one module ending in
    ``BACKENDS.add(name, codec)``, imported in ``workbench.backends``."""

    @property
    def name(self) -> str: ...

    @property
    def returns_token_ids(self) -> bool: ...

    @property
    def servers(self) -> ServerFacts: ...

    @property
    def stream(self) -> bool: ...

    @property
    def whole_answers(self) -> bool: ...

    @property
    def sends_messages(self) -> bool: ...

    def request_headers(self, req: WireRequest) -> dict[str, str] | None: ...

    def url(self, base_url: str) -> str: ...

    def body(self, req: WireRequest) -> dict[str, Any]: ...

    def parser(self, req: WireRequest) -> StreamParser: ...


class MessagesCodec(Codec, Protocol):
    """A codec with ``sends_messages``: the conversation it sends, and its memory of a reply."""

    def messages(self, req: WireRequest) -> list[dict[str, str]]: ...

    def remember(self, req: WireRequest, messages: list[dict[str, str]], reply: str,
                 reply_ids: list[int]) -> None: ...


class PlainCodec:
    """A codec's defaults: the server's token ids, streamed, from an OpenAI-shaped server."""

    __slots__ = ()
    stream = True
    whole_answers = False
    sends_messages = False
    returns_token_ids = True
    servers = OPENAI_SERVERS

    def request_headers(self, req: WireRequest) -> dict[str, str] | None:
        return None

    def with_options(self, **options: Any) -> Self:
        """A fresh codec with these options changed (``ConfigError`` on unknown ones)."""
        codec: Self = reconfigure(self, options)
        return codec


BACKENDS: Registry[Codec] = Registry("backend")


def make_codec(name: str, **options: Any) -> Codec:
    """A fresh codec of backend ``name`` with ``options`` (``ConfigError`` on unknown ones)."""
    extras = {k: options[k] for k in EXTRA_KEYS if options.get(k)}
    own = {k: v for k, v in options.items() if k not in EXTRA_KEYS}
    return RequestExtras.wrap(reconfigure(BACKENDS.get(name), own), extras)


def body_paths(body: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The dotted paths of a request body's leaves (a list is a leaf: it is replaced whole)."""
    if not isinstance(body, dict) or not body:
        return [prefix] if prefix else []
    return [path for key, value in body.items() for path in body_paths(value, (*prefix, key))]


def owned_body_paths(codec: Codec) -> list[tuple[str, ...]]:
    """The body fields a codec sets itself on every request (the prompt, the pinned output,
    the stream mode, the request id): those of a probe request's body. ``body`` and
    ``parser`` come in pairs (a chat codec keeps the messages for the parser): the probe
    takes both, so the codec keeps nothing of it."""
    probe = WireRequest("workbench-probe", [0, 1], 1)
    body = codec.body(probe)
    codec.parser(probe)
    return body_paths(body)


def reconfigure(codec: Any, options: Mapping[str, Any]) -> Any:
    """A new ``codec`` of the same class with ``options`` (init fields, or ``OPTIONS``) changed."""
    cls = type(codec)
    if dataclasses.is_dataclass(cls):
        valid = [f.name for f in dataclasses.fields(cls) if f.init]
    else:
        valid = list(getattr(cls, "OPTIONS", ()))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"backend {codec.name!r} has no {noun(len(unknown), 'option')} {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(valid)) or '(none)'}"
        )
    current = {k: getattr(codec, k) for k in valid}
    return cls(**{**current, **options})


def _shown(payload: bytes) -> str:
    """A payload's first 200 bytes as ``repr`` shows them, redacted whole before the cut
    (``redact.excerpt``)."""
    return repr(redact.excerpt(payload.decode("utf-8", "surrogateescape"), 200)
                .encode("utf-8", "surrogateescape"))


def loads(payload: bytes) -> dict[str, Any]:
    """Decode one JSON payload; a bad payload or a server error object is a BackendError."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise BackendError(f"bad JSON in the answer ({exc}): {_shown(payload)}") from None
    if not isinstance(obj, dict):
        raise BackendError(f"answer payload is not a JSON object: {_shown(payload)}")
    if (msg := error_message(obj)) is not None:
        raise BackendError(f"server error in the answer: {msg}")
    return obj


_CACHED_FALLBACKS = (
    "cached_tokens",
    "cached_input_tokens",
    "cache_read_input_tokens",
    "prompt_cached_tokens",
    "num_cached_tokens",
)


#: the largest token count a usage field may report (no context is near 2**31 tokens)
USAGE_MAX = 2**31 - 1


def usage_count(name: str, value: Any) -> int | None:
    """A server-reported token count in [0, ``USAGE_MAX``], or None; else a ``BackendError``."""
    if value is None:
        return None
    if type(value) is int and 0 <= value <= USAGE_MAX:
        return value
    if type(value) is float and value.is_integer() and 0 <= value <= USAGE_MAX:
        return int(value)  # 12.0: JSON from some servers; the count itself is sound
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise BackendError(
        f"server reported usage {name}={shown}, which is not a token count "
        f"(an integer in [0, {USAGE_MAX}])"
    )


def json_body_error(body: bytes) -> BackendError:
    """The error of a 200 whose body is JSON, not an event stream (a proxy's error object)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if (msg := error_message(obj)) is not None:
        return BackendError(f"server error (HTTP 200, JSON body): {msg}")
    text = redact.excerpt(body.decode("utf-8", "replace"), 200)
    return BackendError(f"HTTP 200 with a JSON body instead of an event stream: {text}")


def parse_openai_usage(usage: Mapping[str, Any]) -> tuple[int | None, int | None, int, bool]:
    """``(prompt_tokens, completion_tokens, cached_tokens, cached_reported)`` of a usage block."""
    if not isinstance(usage, Mapping):
        raise BackendError(f"server sent a usage block that is not an object: {usage!r:.80}")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        for key in _CACHED_FALLBACKS:
            cached = usage.get(key)
            if cached is not None:
                break
    cached = usage_count("cached_tokens", cached)
    return (
        usage_count("prompt_tokens", usage.get("prompt_tokens")),
        usage_count("completion_tokens", usage.get("completion_tokens")),
        cached or 0,
        cached is not None,
    )


def openai_body(
    req: WireRequest, prompt: dict[str, Any], codec: Any, **more: Any
) -> dict[str, Any]:
    """An OpenAI-shaped body: ``prompt``, the output pinned to ``max_tokens``, the response
    mode (a stream with a final usage chunk, or ``"stream": false``), ``more``, the model."""
    body = {
        **prompt,
        "max_tokens": req.max_tokens,
        "min_tokens": req.max_tokens,
        "ignore_eos": True,
        "temperature": codec.temperature,
        "stream": codec.stream,
        **({"stream_options": {"include_usage": True}} if codec.stream else {}),
        **more,
        "rid": req.request_id,
    }
    if codec.model is not None:
        body["model"] = codec.model
    return body


def finish_reason_of(value: Any) -> str | None:
    """A finish reason given as a string or as an object with ``type`` (SGLang)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        kind = value.get("type")
        return None if kind is None else str(kind)
    return str(value)


class OpenAIChunks(EventParser):
    """What every OpenAI-style chunk shares: ``_head`` keeps its id, usage and finish reason."""

    __slots__ = ("_finish", "_id_key", "_metrics", "_rid", "_usage")

    def __init__(self, id_key: str = "id") -> None:
        self._id_key = id_key
        self._usage: dict[str, Any] | None = None
        self._finish: Any = None
        self._rid: Any = None
        self._metrics: dict[str, Any] | None = None

    def _head(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if self._rid is None:
            self._rid = obj.get(self._id_key)
        usage = obj.get("usage")
        if usage:
            self._usage = usage
            metrics = obj.get("metrics")  # vLLM --enable-per-request-metrics, beside usage
            if isinstance(metrics, dict):
                self._metrics = metrics
        choices = obj.get("choices")
        if not choices:
            return None
        choice: dict[str, Any] = choices[0]
        reason = choice.get("finish_reason")
        if reason is not None:
            self._finish = reason
        return choice

    def _usage_counts(self) -> tuple[int | None, int | None, int, bool]:
        """``parse_openai_usage`` of the stream's usage block (an error when none came)."""
        if self._usage is None:
            raise MissingUsage(
                "stream ended without a usage block (the server ignored "
                "stream_options.include_usage)"
            )
        return parse_openai_usage(self._usage)

    def _outcome(
        self, counts: tuple[int | None, int | None, int, bool], output_ids: list[int] | None
    ) -> StreamOutcome:
        prompt, completion, cached, reported = counts
        return StreamOutcome(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            cached_tokens_reported=reported,
            finish_reason=finish_reason_of(self._finish),
            server_request_id=None if self._rid is None else str(self._rid),
            output_ids=output_ids,
            server_metrics=self._metrics,
        )


def check_output_count(ids: list[int], completion_tokens: int | None) -> None:
    """Output ids carried into the next prompt must match the server's own count."""
    if completion_tokens is not None and len(ids) != completion_tokens:
        raise BackendError(
            f"stream carried {len(ids)} output token ids but usage reports "
            f"completion_tokens={completion_tokens}"
        )


def as_id_list(ids: Sequence[int]) -> list[int] | tuple[int, ...]:
    """The prompt in a form orjson serialises without copying lists twice."""
    return ids if isinstance(ids, list | tuple) else list(ids)
