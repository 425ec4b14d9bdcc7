"""What both HTTP clients share: one response's token accounting (``StreamState``: one
``(stamp, id count)`` per token event), and the failures they raise.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from workbench import bodies, redact
from workbench.backends.base import BackendError, StreamParser
from workbench.backends.overrun import (
    AFTER_DONE_MAX_BYTES,
    ERROR_CLASS,
    OutputOverrun,
    OverrunGuard,
)
from workbench.keepalive import CONNECTION_IDLE_S
from workbench.records import RequestRecord
from workbench.sse import DONE, SSEDecoder

BOM = "\ufeff".encode()
#: an unexpected body (no event stream, an error status) is quoted up to this many bytes
RAW_MAX = 2000
#: a read of up to this many events is parsed by ``feed_one``, more by ``feed_all``
FEED_ONE_MAX = 8
#: what a parser raises on an event of the wrong shape (a choice that is null, ids that
#: are a number): the request's error, never the client's (docs/wire-protocols.md)
MALFORMED = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def malformed_event(exc: Exception) -> BackendError:
    """The request's error for an event a parser could not take (``MALFORMED``)."""
    return BackendError(f"malformed event from the server ({type(exc).__name__}: {exc})")


__all__ = [
    "CONNECT_FAILED",
    "RETRY_AFTER",
    "ClientSettings",
    "ConnectError",
    "ConnectTimeoutError",
    "DisconnectedError",
    "IdleTimeoutError",
    "ResponseBody",
    "StaleConnectionError",
    "StreamState",
    "WholeBody",
    "kept_header",
    "sent_at",
]


#: ``RequestRecord.extra`` key set on a request whose connection could not be made: it
#: never reached the server (docs/measurement-rules.md, "A server that dies"): no release
#: lag, and the runner counts such failures in a row (``arrival.stop_after_refused``)
CONNECT_FAILED = "connect_failed"


class ConnectError(OSError):
    """No connection could be made (refused, unresolvable, TLS handshake failed)."""


class ConnectTimeoutError(TimeoutError):
    """The connection was not made within the idle timeout."""


class IdleTimeoutError(TimeoutError):
    """No byte came for longer than ``stream_idle_timeout_s`` (headers included)."""


class DisconnectedError(ConnectionError):
    """The server closed the connection before the response ended."""


class StaleConnectionError(DisconnectedError):
    """A pooled keep-alive connection died before any byte of the response came."""


#: a response head (1xx included) larger than this is refused (docs/wire-protocols.md)
HEAD_MAX = 64 * 1024
#: a non-streamed answer's body (an error, a GET) is kept up to this size
ERROR_BODY_MAX = 64 * 1024


def malformed(why: object) -> BackendError:
    """The clients' error for a response their parser refused."""
    return BackendError(f"malformed HTTP response from the server: {why}")


#: both clients' error for a head past ``HEAD_MAX``
HEAD_TOO_LARGE = f"the response head passed {HEAD_MAX} bytes"


class Inflater(bodies.Inflater):
    """``bodies.Inflater`` whose broken body is a ``BackendError`` (the clients' error)."""

    __slots__ = ()
    error = BackendError


def inflater_for(encoding: str) -> Inflater | None:
    """The ``Inflater`` of a ``Content-Encoding`` (None: identity); others are refused."""
    enc = encoding.strip().lower()
    if not enc or enc == "identity":
        return None
    if enc in bodies.ENCODINGS:
        return Inflater(enc)
    raise BackendError(f"the server sent content-encoding {enc!r}, which this client cannot "
                       "decode (it asks for none; supported: gzip, deflate)")


@dataclass(eq=False)
class ClientSettings:
    """What both clients are built with (``idle_s``: the stream idle timeout;
    ``connection_idle_s``: how long a pooled connection may sit idle and still be reused,
    None: no bound)."""

    now: Callable[[], int]
    headers: dict[str, str]
    request_timeout_s: float | None
    idle_s: float | None
    max_connections: int = 0
    ssl_context: ssl.SSLContext | None = None
    connection_idle_s: float | None = CONNECTION_IDLE_S

    def __post_init__(self) -> None:  # a client's own set-up
        pass


#: response headers a client keeps for the record (lower case): ``x-workbench-*``, and
#: ``retry-after`` (an error says the wait a server asked for, docs/wire-protocols.md)
KEPT_HEADER_PREFIX = "x-workbench-"
RETRY_AFTER = "retry-after"


def kept_header(name: str) -> bool:
    """A response header (lower case) the clients keep in ``state.headers``."""
    return name.startswith(KEPT_HEADER_PREFIX) or name == RETRY_AFTER


class StreamState:
    """SSE decoding and token accounting of one response, fed ``(stamp, bytes)`` reads."""

    #: a 200 with a JSON body is not a stream (an error body); ``WholeBody`` takes it
    takes_json = False

    __slots__ = (
        "after_done", "counts", "cut", "decode", "decoder", "done", "error", "feed_all",
        "feed_one", "guard", "headers", "idle_ns", "json_body", "on_sent", "one", "raw",
        "reads", "rec", "saw_done", "times",
    )  # fmt: skip

    def __init__(
        self,
        parser: StreamParser,
        rec: RequestRecord,
        guard: OverrunGuard | None = None,
        idle_s: float | None = None,
    ) -> None:
        self.decoder = SSEDecoder()
        self.decode = self.decoder.feed
        self.one = self.decoder.one
        self.feed_all = parser.feed_all  # the parser's fast paths (``StreamParser``)
        self.feed_one = parser.feed_one
        self.rec = rec
        self.on_sent: Callable[[int], None] | None = None  # WireRequest.on_sent (sent_at)
        self.times, self.counts = rec.token_times_ns, rec.token_counts
        self.done = False  # [DONE] seen: later bytes are not parsed
        self.saw_done = False  # the stream ended at its [DONE] (not at the body's end)
        self.error: BackendError | IdleTimeoutError | None = None
        self.reads = 0  # network reads of the body (pacing tells streamed from whole answers)
        self.guard = guard
        self.cut = False  # drop the connection, do not read on
        self.after_done = 0  # bytes read after [DONE]
        #: the response's ``x-workbench-*`` headers (a simulated cluster names its worker)
        self.headers: dict[str, str] = {}
        #: a 200 with a JSON body: an error body, returned unparsed
        self.json_body = False
        # the body's first bytes while no SSE event came (``not_a_stream``)
        self.raw: bytes | None = b""
        # the idle timeout counts from the last token event: keep-alive bytes are no progress
        self.idle_ns = None if idle_s is None else int(idle_s * 1e9)

    def feed(self, t: int, chunk: bytes) -> None:
        """One network read of the body, received at ``t`` (a violation goes to ``error``)."""
        self.reads += 1
        if self.done:
            self.after_done += len(chunk)
            if self.after_done > AFTER_DONE_MAX_BYTES:  # still sending after [DONE]
                self.cut = True
            return
        if self.reads == 1 and chunk[:3] == BOM:  # the SSE spec ignores a leading BOM
            chunk = chunk[3:]
        feed_one = self.feed_one
        one = self.one(chunk)
        if one is not None and one != DONE:  # one event in the read: no lists
            self.raw = None
            try:
                n = feed_one(one)
            except BackendError as exc:
                self.error, self.done = exc, True
                return
            except MALFORMED as exc:
                self.error, self.done = malformed_event(exc), True
                return
            if n:
                counts = self.counts
                self.times.append(t)
                counts.append(n)
                guard = self.guard
                if guard is not None:  # _counted(guard, n, len(chunk), 1), inline: once per event
                    total = guard.total + (1 if guard.by_events else n)
                    if total <= guard.limit:
                        guard.total, guard.seen = total, len(counts)
                    else:
                        self._check(len(chunk))
                return
            if self.idle_ns is not None:
                self._stalled(t)
            if self.guard is not None:
                self._check(len(chunk))
            return
        payloads = self.decode(chunk)
        if not payloads:
            if self.raw is not None and len(self.raw) < RAW_MAX:
                self.raw += chunk[: RAW_MAX - len(self.raw)]
            if self.idle_ns is not None:
                self._stalled(t)
            if self.guard is not None and not self.done:  # an unfinished event, token-less
                self._check(len(chunk))
            return
        self.raw = None
        if DONE in payloads:
            payloads = payloads[: payloads.index(DONE)]
            self.done = self.saw_done = True
            self.rec.end_ns = t
            if not payloads:
                return
        counts = []  # the events before a violation stay (docs/metrics.md)
        try:
            if len(payloads) <= FEED_ONE_MAX:
                for p in payloads:  # feed_all's counts
                    if n := feed_one(p):
                        counts.append(n)
            else:
                self.feed_all(payloads, counts)
        except (BackendError, *MALFORMED) as exc:
            self.error = exc if isinstance(exc, BackendError) else malformed_event(exc)
            self.done = True
            self.times.extend([t] * len(counts))
            self.counts.extend(counts)
            return
        if counts:
            self.times.extend([t] * len(counts))
            self.counts.extend(counts)
            guard = self.guard
            if guard is not None and not self.done:
                if self.decoder.pending:  # an event left unfinished: bound it too
                    self._check(len(chunk))
                else:
                    self._counted(guard, sum(counts), len(chunk), len(counts))
            return
        if self.idle_ns is not None and not self.done:
            self._stalled(t)
        if self.guard is not None and not self.done:
            self._check(len(chunk))

    def _counted(self, guard: OverrunGuard, ids: int, nbytes: int, events: int) -> None:
        """``_check`` after a read that ended whole, its usual case inline (design-notes.md)."""
        total = guard.total + (events if guard.by_events else ids)
        if total <= guard.limit:
            guard.total, guard.seen = total, len(self.counts)
        else:
            self._check(nbytes)

    def _stalled(self, t: int) -> None:
        """A read without a token event: cut the stream once none came for the idle timeout."""
        since = self.times[-1] if self.times else self.rec.dispatch_ns
        if since is not None and t - since > self.idle_ns:  # type: ignore[operator]
            self.error = IdleTimeoutError(
                f"no token event for {self.idle_ns / 1e9:g}s (only keep-alive bytes came)"  # type: ignore[operator]
            )
            self.done = self.cut = True

    def _check(self, nbytes: int) -> None:
        """The overrun guard after one read of ``nbytes``: cut the stream if it refuses."""
        guard = self.guard
        try:
            guard.check_unfinished(self.decoder.pending)  # type: ignore[union-attr]
            guard.check(self.counts, nbytes)  # type: ignore[union-attr]
        except OutputOverrun as exc:
            self.error, self.done, self.cut = exc, True, True

    def close(self, t: int) -> None:
        """End of body without ``[DONE]``: flush the decoder (a last unterminated event)."""
        if self.done:
            return
        payloads = self.decoder.close()
        if payloads:
            self.raw = None
        if DONE in payloads:
            payloads = payloads[: payloads.index(DONE)]
            self.saw_done = True
        self.done = True
        self.rec.end_ns = t
        if payloads:
            counts: list[int] = []
            try:
                self.feed_all(payloads, counts)
            except BackendError as exc:
                self.error = exc
            except MALFORMED as exc:
                self.error = malformed_event(exc)
            self.times.extend([t] * len(counts))
            self.counts.extend(counts)

    def not_a_stream(self) -> BackendError | None:
        """The error of a body that carried no SSE event at all (None if it did)."""
        if self.raw is None:
            return None
        text = self.raw.decode("utf-8", errors="replace").strip()
        if not text:
            return BackendError("HTTP 200 with an empty body (no event stream)")
        return BackendError("HTTP 200 but the body is no event stream: "
                            f"{redact.excerpt(text, RAW_MAX)}")


class WholeBody:
    """A non-streaming answer: one JSON body, parsed at its end (wire-protocols.md)."""

    takes_json = True

    __slots__ = ("cut", "done", "error", "headers", "ids", "json_body", "limit", "on_sent",
                 "parser", "parts", "reads", "rec", "size")

    def __init__(self, parser: StreamParser, rec: RequestRecord, limit: int) -> None:
        self.parser, self.rec, self.limit = parser, rec, limit
        self.on_sent: Callable[[int], None] | None = None  # WireRequest.on_sent (sent_at)
        self.parts: list[bytes] = []
        self.size = 0
        self.done = self.cut = False
        self.error: BackendError | None = None
        self.reads = 0
        self.headers: dict[str, str] = {}
        self.json_body = False
        self.ids = 0  # output ids the answer carried (set at ``close``)

    def feed(self, t: int, chunk: bytes) -> None:
        """One read of the body: kept until the end, cut past ``limit`` bytes."""
        self.reads += 1
        if self.done:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            self.error = OutputOverrun(
                f"{ERROR_CLASS}: the non-streaming answer passed {self.limit} bytes "
                "(the bound for this request) without ending; cut")
            self.done = self.cut = True
            return
        self.parts.append(chunk)

    def close(self, t: int) -> None:
        """End of body: parse the answer (its ids, usage, finish reason) in one piece."""
        if self.done:
            return
        self.done = True
        self.rec.end_ns = t
        body = b"".join(self.parts)
        self.parts.clear()
        try:
            self.ids = len(self.parser.feed(body) or ())
        except BackendError as exc:
            self.error = whole_body_error(body) or exc
        except MALFORMED as exc:
            self.error = whole_body_error(body) or malformed_event(exc)

    def not_a_stream(self) -> BackendError | None:
        """None: a body that is no JSON answer (empty included) fails at ``close``."""
        return None


def whole_body_error(body: bytes) -> BackendError | None:
    """Why a non-streaming body is no JSON object (None when it is one)."""
    head = body[:RAW_MAX].decode("utf-8", errors="replace").strip()
    if not head:
        return BackendError("HTTP 200 with an empty body (no JSON answer)")
    if head.startswith(("data:", "event:", ":")):
        return BackendError("the server streamed server-sent events although the request "
                            f"said \"stream\": false: {_shown(body, 200)}")
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return BackendError(f"malformed JSON body (non-streaming answer): {exc}: "
                            f"{_shown(body, RAW_MAX)}")
    if not isinstance(obj, dict):
        return BackendError("the non-streaming answer is not a JSON object: "
                            f"{_shown(body, RAW_MAX)}")
    return None


def _shown(body: bytes, limit: int) -> str:
    """A body's text in an error: redacted whole, then cut (``redact.excerpt``)."""
    return redact.excerpt(body.decode("utf-8", errors="replace").strip(), limit)


#: what a client feeds a response's body to: a stream, or a whole answer
ResponseBody = StreamState | WholeBody


def sent_at(state: ResponseBody, t: int) -> None:
    """The request went out at ``t``: its record's dispatch, and ``WireRequest.on_sent``."""
    state.rec.dispatch_ns = t
    if state.on_sent is not None:
        state.on_sent(t)
