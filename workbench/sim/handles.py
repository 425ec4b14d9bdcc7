"""The embedded engine's request handles: what a caller holds for a submitted request (its
truth, its output, its stream) and the output items of that stream.

They live apart from ``sim.engine`` because ``SequenceHandle.batches`` and ``stream`` are
async generators, which mypyc does not compile, while ``Engine`` is a module of the
compiled set (docs/virtual-time.md, "Compiled step loop"). This module stays Python; a
handle reads its engine's state through the engine's methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.segments import Segments
from workbench.sim import scheduler as sched
from workbench.tokenizer import output_token

if TYPE_CHECKING:
    from workbench.sim.engine import Engine


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """Tokens one engine step produced for one request."""

    token_ids: list[int]
    t_ns: int
    finished: bool
    finish_reason: str | None


class SequenceHandle:
    """A submitted request's face, read off its scheduler sequence ``seq``: its truth
    (timestamps, usage), its output and its stream (``batches``; each kind, ``EngineRequest``
    and ``sim.dp.RankRequest``, says how to wait). ``_current`` is the sequence up to date."""

    seq: sched.Sequence

    request_id = property(lambda self: self.seq.request_id)
    prompt_tokens = property(lambda self: self.seq.prompt_len)
    max_tokens = property(lambda self: self.seq.max_tokens)
    arrival_ns = property(lambda self: self.seq.arrival_ns)
    finish_ns = property(lambda self: self.seq.finish_ns)
    finish_reason = property(lambda self: self.seq.finish_reason)
    finished = property(lambda self: self.seq.finished)
    preemptions = property(lambda self: self.seq.preemptions)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache at first admission (0 before)."""
        return max(0, self.seq.cached_tokens)

    @property
    def host_cached_tokens(self) -> int:
        """Of ``cached_tokens``, those brought back from the host KV tier."""
        return self.seq.host_tokens

    def _current(self) -> sched.Sequence:
        return self.seq

    @property
    def first_token_ns(self) -> int | None:
        times = self._current().token_ns
        return times[0] if times else None

    @property
    def output_ids(self) -> list[int]:
        return self._current().output  # a fresh list

    def output_segments(self) -> Segments:
        """The output so far as ``Segments`` (no ids drawn; a virtual replay's context)."""
        return self._current().output_segments()

    @property
    def token_ns(self) -> list[int]:
        """Emission time of every output token (the engine's own truth)."""
        return list(self._current().token_ns)

    @property
    def completion_tokens(self) -> int:
        return len(self._current().token_ns)

    async def batches(self) -> AsyncIterator[list[RequestOutput]]:
        """Every output not yet seen, as a list per wakeup (consumers that write in bulk)."""
        seq, i = self.seq, 0
        while True:
            n = len(self._current().token_ns)
            if i < n:
                yield [self._output(k) for k in range(i, n)]
                i = n
            elif seq.finished:
                if seq.finish_reason != "length":
                    yield [RequestOutput([], seq.finish_ns or 0, True, seq.finish_reason)]
                return
            else:
                await self._progress()

    async def _progress(self) -> None:
        """Wait for the next step that brings this request output (or ends it)."""
        raise NotImplementedError

    async def stream(self) -> AsyncIterator[RequestOutput]:
        """One item per engine step that produced tokens; a final empty item if aborted."""
        async for batch in self.batches():
            for out in batch:
                yield out

    def _output(self, k: int) -> RequestOutput:
        seq = self.seq
        last = seq.finished and seq.finish_reason == "length" and k == len(seq.token_ns) - 1
        # a prompt given as parts draws no output list: its ids are drawn when read
        token = output_token(seq.base, k) if seq.lazy else seq.outputs[k]
        return RequestOutput([token], seq.token_ns[k], last, "length" if last else None)


class EngineRequest(SequenceHandle):
    """Handle of a submitted request: its truth (timestamps, usage) and its stream."""

    def __init__(self, engine: Engine, seq: sched.Sequence) -> None:
        self._engine = engine
        self.seq = seq
        self._waiter: asyncio.Future[None] | None = None
        self._done: list[asyncio.Future[None]] = []  # one per ``wait()`` in progress
        seq.handle = self

    def _current(self) -> sched.Sequence:
        """The request's state now (an implicit decoder's fields are brought up to date)."""
        seq = self.seq
        if seq.tb >= 0:
            self._engine._catch_up()
            self._engine._sched.sync(seq)
        return seq

    def abort(self) -> None:
        """The client went away: free the request's blocks and end its stream."""
        engine = self._engine
        engine._cut()
        if engine._sched.abort(self.seq, engine.clock.now_ns()):
            engine._post()
            self._notify()

    def _notify(self) -> bool:
        """Resolve whatever a consumer awaits; True if a future was resolved."""
        futs = [] if self._waiter is None else [self._waiter]
        self._waiter = None
        if self.seq.finished:
            futs += self._done
            self._done = []
            # nothing wakes a finished request again: drop the sequence's back reference,
            # so the pair is freed by reference counting when the caller lets go, not
            # left to the rare cyclic collections of a virtual run (docs/virtual-time.md)
            self.seq.handle = None
        woke = False
        for fut in futs:
            if not fut.done():
                fut.set_result(None)
                woke = True
        return woke

    async def _progress(self) -> None:
        seq = self.seq
        if not seq.watched:  # from now on the engine wakes it every step (Scheduler.watch)
            self._engine._cut()
            self._engine._sched.watch(seq)
        self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter

    async def wait(self) -> EngineRequest:
        """Wait until the request finished: a single wakeup, none per step or token.
        Each call waits on its own future, so cancelling one wait leaves the others."""
        if not self.seq.finished:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._done.append(fut)
            await fut
        return self
