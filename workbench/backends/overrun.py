"""Output overrun: a server that streams more output tokens than ``max_tokens``, or never
stops, is flagged and, past ``cut_limit``, cut (docs/output-overrun.md)."""

from __future__ import annotations

import logging

from workbench.backends.base import BackendError
from workbench.records import RequestRecord

log = logging.getLogger(__name__)

#: the error class an overrun record's ``error`` starts with
ERROR_CLASS = "output_overrun"
#: a stream is cut once it carried ``max_tokens`` plus this margin
MARGIN_TOKENS = 64
MARGIN_RATIO = 0.25


#: bytes one unfinished SSE event may hold: a floor, or room per prompt and output token
EVENT_BYTES_FLOOR = 1 << 20
EVENT_BYTES_PER_TOKEN = 32
#: bytes read on after ``[DONE]`` (so the connection can go back to the pool) at most
AFTER_DONE_MAX_BYTES = 64 * 1024
#: how long a connection reads on for its body's end after [DONE] (the request has ended)
#: when no stream idle timeout is set; past it (or the idle timeout) it is dropped
DRAIN_S = 60.0
#: how long a request that needs a connection waits for one still reading its body's end
#: after [DONE] (a server writes its last chunk a moment after [DONE]); past it the server
#: is taken to hold its streams open: that connection is dropped, and the client's later
#: streams ending at [DONE] drop theirs at once but one, which reads on this long as
#: evidence: a body that ends within it clears the judgement (docs/wire-protocols.md,
#: "HTTP framing")
HELD_AFTER_DONE_S = 1.0


class AfterDone:
    """What an HTTP client did about streams whose body did not end with ``[DONE]``
    (docs/wire-protocols.md, "HTTP framing"; ``summary.json["client"]["after_done"]``)."""

    __slots__ = ("dropped_at_done", "held", "resumed")

    def __init__(self) -> None:
        #: times a drain outlived ``HELD_AFTER_DONE_S``: the server was taken to hold streams
        self.held = 0
        #: connections closed at [DONE] (not reused) while the server was taken to hold them
        self.dropped_at_done = 0
        #: times a later body ended promptly and connection reuse resumed
        self.resumed = 0

    def as_dict(self) -> dict[str, int]:
        return {"held": self.held, "dropped_at_done": self.dropped_at_done,
                "resumed": self.resumed}  # fmt: skip


class HeldJudgement:
    """Whether a server is taken to hold its streams open after ``[DONE]`` (one per pool of
    connections to it): judged when a drain outlives ``HELD_AFTER_DONE_S``, cleared when a
    body ends promptly again; each change counted in the client's ``AfterDone``
    (docs/wire-protocols.md, "HTTP framing")."""

    __slots__ = ("after_done", "holds")

    def __init__(self, after_done: AfterDone) -> None:
        self.after_done = after_done
        self.holds = False

    def held(self) -> None:
        """A drain outlived ``HELD_AFTER_DONE_S``: the server holds its streams open."""
        if not self.holds:
            self.holds = True
            self.after_done.held += 1

    def ended_promptly(self) -> None:
        """A streamed body ended with its [DONE] or within ``HELD_AFTER_DONE_S`` of it: the
        judgement is cleared (reuse resumes)."""
        if self.holds:
            self.holds = False
            self.after_done.resumed += 1


def event_bytes_limit(prompt_tokens: int, max_tokens: int) -> int:
    """Bytes at which a stream that has not ended its current event is cut."""
    per_token = EVENT_BYTES_PER_TOKEN * (prompt_tokens + cut_limit(max_tokens))
    return max(EVENT_BYTES_FLOOR, per_token)


def cut_limit(max_tokens: int) -> int:
    """The output tokens at which a stream is cut: ``max_tokens + max(64, max_tokens / 4)``."""
    return max_tokens + max(MARGIN_TOKENS, int(max_tokens * MARGIN_RATIO))


class OutputOverrun(BackendError):
    """The stream passed its cut limit; the request is cut there."""


class OverrunGuard:
    """Counts one stream's output tokens as its events are parsed (``StreamState`` inlines
    ``check``'s usual case)."""

    __slots__ = ("by_events", "event_limit", "limit", "max_tokens", "rec", "seen", "stale",
                 "total")

    def __init__(
        self, rec: RequestRecord, max_tokens: int, *, by_events: bool, prompt_tokens: int = 0
    ) -> None:
        self.rec = rec
        self.max_tokens = max_tokens
        self.limit = cut_limit(max_tokens)
        self.event_limit = event_bytes_limit(prompt_tokens, max_tokens)
        self.by_events = by_events
        self.seen = 0
        self.total = 0
        self.stale = 0  # bytes of parse batches that brought no token

    def check(self, counts: list[int], nbytes: int = 0) -> None:
        """After a parse batch of ``nbytes``: cut past the token or the stale-bytes limit."""
        n = len(counts)
        if n == self.seen:
            self.stale += nbytes
            if self.stale > self.event_limit:
                self._mark(self.total, cut=True)
                self.rec.extra["output_overrun"]["bytes_without_tokens"] = self.stale
                raise OutputOverrun(
                    f"{ERROR_CLASS}: the server sent {self.stale} bytes without a token "
                    f"(limit {self.event_limit} bytes for this request) after {self.total} "
                    "output tokens; cut. It streams events or comments that carry no "
                    "token and never ends"
                )
            return
        total = self.total + (n - self.seen if self.by_events else sum(counts[self.seen :]))
        if total > self.limit:
            # cut at the event that crossed the limit, however the reads fell
            total = self.total
            for k in range(self.seen, n):
                total += 1 if self.by_events else counts[k]
                if total > self.limit:
                    break
            del counts[k + 1 :]
            del self.rec.token_times_ns[k + 1 :]
            self.total, self.seen = total, k + 1
            self._mark(self.total, cut=True)
            raise OutputOverrun(
                f"{ERROR_CLASS}: the server streamed {self.total} output tokens against "
                f"max_tokens {self.max_tokens} and did not stop; cut at {self.limit} "
                "(max_tokens + margin). The server ignores max_tokens: check its "
                "generation limits (vLLM/SGLang honour max_tokens; a proxy may drop it)"
            )
        self.total, self.seen = total, n

    def check_unfinished(self, nbytes: int) -> None:
        """Cut a stream whose current event has grown past ``event_limit`` bytes unended."""
        if nbytes > self.event_limit:
            self._mark(self.total, cut=True)
            self.rec.extra["output_overrun"]["unfinished_event_bytes"] = nbytes
            raise OutputOverrun(
                f"{ERROR_CLASS}: the server sent {nbytes} bytes without ending an event "
                f"(limit {self.event_limit} bytes for this request); cut. The server's "
                "stream is not server-sent events, or it never stops"
            )

    def flag(self, completion_tokens: int | None) -> None:
        """A finished stream that carried (or reported) more than ``max_tokens``."""
        received = max(self.total, completion_tokens or 0)
        if received > self.max_tokens:
            self._mark(received, cut=False)
            log.warning(
                "%s: %s: the server sent %d output tokens against max_tokens %d",
                self.rec.request_id, ERROR_CLASS, received, self.max_tokens,
            )

    def _mark(self, received: int, *, cut: bool) -> None:
        self.rec.extra["output_overrun"] = {
            "max_tokens": self.max_tokens, "received": received, "limit": self.limit, "cut": cut,
        }  # fmt: skip
