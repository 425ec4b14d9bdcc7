"""The embedded engine core: a step loop on an injected ``Clock``.

The same code runs behind the HTTP server (``WallClock``: a task sleeps per step) and
inside ``run_virtual`` (``VirtualClock``: each step's end is registered with the loop,
``VirtualTimeLoop.call_step_at``), docs/virtual-time.md, "Steps". Nothing wakes per
token: only a request whose consumer is waiting gets its future resolved, once per step
(one awaited with ``wait()`` only once, when it finishes). The handles a submit returns
are ``sim.handles``'s; this module is of the mypyc-compiled set (docs/virtual-time.md,
"Compiled step loop").
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from array import array
from collections.abc import Sequence
from typing import Any

from workbench.clock import Clock, StepHandle, VirtualClock, VirtualTimeLoop
from workbench.segments import Segments
from workbench.sim import cost
from workbench.sim import scheduler as sched
from workbench.sim.config import EngineConfig
from workbench.sim.handles import EngineRequest

SPAN_MAX = 4096  # steps planned at once at most (a span: ``Engine._plan_step``)
_NEVER = math.inf  # ``Engine._event_s`` with no event in the span


class LoadBoard:
    """Every worker's load as a router reads it, kept by the workers of a cluster.

    Slot ``i`` is worker ``i``'s: ``loads[i]`` is its ``load()`` as its state is now
    (running, waiting, KV usage: it changes only when the worker does, and the worker
    rewrites the slot then: ``Engine._post``, ``DPWorker._post``), and ``events[i]`` the
    time (s, the loop's) from which a read must first catch its span up (``_event_s``;
    inf: none). A router's read of every worker is then the list, not a call a worker
    (docs/virtual-time.md, "Spans")."""

    __slots__ = ("events", "loads")

    def __init__(self, n: int) -> None:
        self.loads: list[tuple[int, int, float]] = [(0, 0, 0.0)] * n
        self.events: list[float] = [_NEVER] * n


class Engine:
    """Waiting/running scheduler + KV cache + cost model, stepping on ``clock``."""

    def __init__(self, config: EngineConfig, clock: Clock,
                 board: LoadBoard | None = None, slot: int = 0) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self._sched = sched.Scheduler(config)
        self._board, self._slot = board, slot  # a cluster's: this worker's load kept there
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # virtual time: the loop that runs the steps, the step in
        # flight (its plan and the loop's handle) and whether a kick is queued
        self._loop: VirtualTimeLoop | None = None
        self._plan: sched.StepPlan | None = None
        self._step: StepHandle | None = None
        self._kicked = False
        self._end_step_cb = self._end_step  # one bound method, not one per step
        self._idle = True  # no step planned since the engine last ran out of work
        self._wake_ns = cost.idle_wake_ns(config)
        # the cost model's decode-only step and span ends, the config's constants bound once
        self._decode_ns = cost.decode_step(config)
        self._ends_of = cost.span_ends(config)
        # a span (virtual time, ``_plan_step``): the end of each step in flight, the
        # first of them not yet applied, and the callback ending all but the last
        self._ends: list[int] | None = None
        self._done = 0
        # the end (s, 1 µs early) of its first step not applied with an event
        self._event_s = _NEVER
        self._span_cb = self._span_tail
        # the last prefix query: its hashes and hit (a list, or int64s from a compiled router)
        self._routed: tuple[Sequence[int], list[int] | array[int]] | None = None
        #: steps the loop ended one by one (``_end_step``), not applied inside a span
        self.steps_ended = 0

    async def start(self) -> None:
        if self._task is not None or self._loop is not None:
            return
        loop = asyncio.get_running_loop()
        if isinstance(self.clock, VirtualClock) and isinstance(loop, VirtualTimeLoop):
            self._loop = loop
            self.clock.bind(loop)
            if self._sched.has_work():
                self._kick_soon()
        else:
            self._task = asyncio.create_task(self._run(), name="workbench-sim-engine")

    async def stop(self) -> None:
        """Stop stepping; every unfinished request ends with finish_reason 'abort'."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._catch_up()
        self._loop = None
        self._ends, self._event_s = None, _NEVER
        if self._step is not None:
            self._step.cancel()
            self._step = self._plan = None
        now = self.clock.now_ns()
        for seq in [*self._sched.running, *self._sched.waiting]:
            self._sched.abort(seq, now)
            _handle(seq)._notify()
        self._post()

    def submit(
        self, request_id: str, prompt_ids: Sequence[int] | Segments, max_tokens: int
    ) -> EngineRequest:
        """Queue a request; it always generates exactly ``max_tokens`` tokens, clamped
        like vLLM to ``max_model_len − prompt``. ``ValueError``: a prompt of
        ``max_model_len`` or more, or one that could never fit in the KV cache. A
        ``Segments`` prompt (virtual time) is never materialised."""
        return self.submit_prepared(self.prepare(request_id, prompt_ids, max_tokens))

    def prepare(
        self, request_id: str, prompt_ids: Sequence[int] | Segments, max_tokens: int
    ) -> sched.Sequence:
        """The sequence ``submit`` would queue, checked (its ``ValueError``) and with its
        prompt's block hashes, but not queued: a cluster routes on those hashes, then the
        chosen worker queues it (``submit_prepared``; the workers share one config)."""
        # the caller's ids, copied (the sequence grows); parts are immutable
        prompt = prompt_ids if isinstance(prompt_ids, Segments) else list(prompt_ids)
        max_tokens = self._check(len(prompt), int(max_tokens))
        return self._sched.new_sequence(request_id, prompt, max_tokens, self.clock.now_ns())

    def submit_prepared(
        self, seq: sched.Sequence, routed: Sequence[int] | None = None
    ) -> EngineRequest:
        """Queue a sequence from ``prepare`` (of this engine or one with its config).
        ``routed``: the hashes a router just asked ``cached_prefix_blocks`` about here;
        admission starts from that hit (re-checked, not looked up again)."""
        last, self._routed = self._routed, None
        if routed is not None and last is not None and last[0] is routed:
            kv = self._sched.kv  # admission starts from the hit as far as it still holds
            seq.routed = (last[1], kv.epoch, kv.evictions)
        req = EngineRequest(self, seq)
        self._cut()  # before it joins: the steps ended so far did not see it
        self._sched.add(seq)
        self._post()
        if self._loop is None:
            self._wake.set()
        elif self._step is None:
            self._kick_soon()
        return req

    def submit_transferred(
        self, request_id: str, prompt_ids: Sequence[int] | Segments, max_tokens: int,
        kv_tokens: int,
    ) -> EngineRequest:
        """``submit`` for a request whose first ``kv_tokens`` prompt tokens arrive with
        their KV already computed (prefill/decode disaggregation, ``sim.cluster``):
        they are allocated at admission but not computed again."""
        req = self.submit(request_id, prompt_ids, max_tokens)
        req.seq.preloaded = max(0, min(int(kv_tokens), req.seq.prompt_len))
        return req

    def validate(self, prompt_ids: Sequence[int] | Segments, max_tokens: int) -> int:
        """``submit``'s ``ValueError`` without queueing; else the clamped ``max_tokens``."""
        return self._check(len(prompt_ids), int(max_tokens))

    # A router's reads below catch a span up (``_catch_up``) only when one of its steps
    # that ended has an event: its event-free steps change none of what they read
    # (catching 64 spans up a request was ~7 % of a 64-worker run: docs/virtual-time.md).
    def _events_up(self) -> None:
        """``_catch_up`` if a step with an event may have ended (the loop's time read
        directly: a superset of what ``_catch_up`` applies, which decides exactly)."""
        loop = self._loop
        if loop is not None and self._event_s <= loop.time():
            self._catch_up()

    def catch_up(self) -> None:
        """Apply the span's steps that ended before now (``_catch_up``): a cluster's read of
        its board, for a worker whose slot has an event due (``Cluster.loads``)."""
        self._catch_up()

    def load(self) -> tuple[int, int, float]:
        """(running requests, waiting requests, KV usage): what a router balances on (a
        cluster's router reads them off its ``LoadBoard``, which ``_post`` keeps equal)."""
        if self._ends is not None:
            self._events_up()
        s = self._sched
        return len(s.running), len(s.waiting), s.kv.usage

    def cached_prefix_blocks(self, hashes: Sequence[int], limit: int | None = None) -> int:
        """How many leading blocks of ``hashes`` (at most ``limit``) the prefix cache holds."""
        n = len(hashes) if limit is None else min(limit, len(hashes))
        if self._ends is not None:
            self._events_up()
        hit = self._sched.kv.longest_hit(hashes, n)
        self._routed = (hashes, hit)  # for ``submit_prepared(routed=hashes)``
        return len(hit)

    def found_prefix(self, hashes: Sequence[int], hit: list[int] | array[int]) -> None:
        """The router found ``hit`` (block ids), this cache's longest prefix of ``hashes``
        now, in the index ``prefix_shard`` gave it: ``cached_prefix_blocks``'s look-up."""
        self._routed = (hashes, hit)  # for ``submit_prepared(routed=hashes)``

    def caches_block(self, block_hash: int) -> bool:
        """Whether this engine's prefix cache holds the block of chained hash ``block_hash``
        (a router's bound: a prefix hit longer than ``i`` blocks holds block ``i``)."""
        if self._ends is not None:
            self._events_up()
        return self._sched.kv.holds(block_hash)

    def prefix_shard(self) -> tuple[Any, ...] | None:
        """This engine's compiled prefix index for a router (``sim.router._shards``; the
        cluster catches every worker with an event due up first, ``Cluster.loads``)."""
        return self._sched.kv.shard()

    def _post(self) -> None:
        """Write this worker's load and next span event to its cluster's board (after
        every change of either: a plan, a span caught up or cut, a submit, an abort)."""
        board = self._board
        if board is not None:
            s, i = self._sched, self._slot
            board.loads[i] = (len(s.running), len(s.waiting), s.kv.usage)
            board.events[i] = self._event_s

    def _check(self, n_prompt: int, max_tokens: int) -> int:
        cfg = self.config
        if not n_prompt:
            raise ValueError("prompt must contain at least one token")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if n_prompt >= cfg.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {cfg.max_model_len} tokens. "
                f"However, your prompt contains {n_prompt} input tokens."
            )
        max_tokens = min(max_tokens, cfg.max_model_len - n_prompt)
        if n_prompt + max_tokens > cfg.capacity_tokens:
            raise ValueError(
                f"request needs {n_prompt + max_tokens} KV tokens but the cache holds "
                f"{cfg.capacity_tokens} ({cfg.num_blocks} blocks of {cfg.block_size})"
            )
        return max_tokens

    def _kick_soon(self) -> None:
        """Wake the idle engine one loop iteration later (as the wall-clock task wakes
        from its event), so submits of the same instant join one step."""
        if not self._kicked and self._loop is not None:
            self._kicked = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kicked = False
        if self._loop is not None and self._step is None:
            self._plan_step(self.clock.now_ns())
            self._post()

    def _next_plan(self) -> tuple[sched.StepPlan, int] | None:
        """The next step's plan and its duration in ns; None when there is no work or
        nothing fits yet (the engine then waits for a submit). The first step after
        the engine was idle takes ``idle_wake_ms`` longer (``sim.cost``)."""
        sched_ = self._sched
        while sched_.has_work():
            plan = sched_.schedule()
            if plan.scheduled or plan.implicit:
                if plan.prefill_tokens or plan.host_load_tokens:
                    dur = cost.step_ns(self.config, plan.prefill_tokens, plan.decode_seqs,
                                       plan.kv_tokens, plan.prefill_attn, plan.host_load_tokens)
                else:  # decode only: ``step_ns`` with the constants bound
                    dur = self._decode_ns(plan.decode_seqs, plan.kv_tokens)
                if self._idle:
                    self._idle = False
                    dur += self._wake_ns
                return plan, dur
            if not plan.preempted:
                break
            # a lone request preempted itself: schedule again to re-admit it
        self._idle = True
        return None

    def _plan_step(self, t0: int) -> None:
        """Plan the next step at ``t0`` and register its end with the loop (or go idle
        until a submit), as one pass of ``_run``'s loop does. An implicit-only step with
        nothing waiting starts a *span* of steps planned at once, caught up by any read
        (``_catch_up``) and ended by a submit or abort (``_cut``): docs/virtual-time.md,
        "Spans".
        """
        nxt = self._next_plan()
        if nxt is None:
            self._plan = self._step = None
            return
        plan, dur = nxt
        self._plan = plan
        assert self._loop is not None
        end = t0 + dur
        if plan.implicit and not plan.scheduled and not self._sched.waiting and dur > 0:
            k = self._sched.span(SPAN_MAX)
            if k > 1:
                ends = self._ends = self._span_ends(end, k)
                self._done = 0
                self._arm_event()
                self._step = self._loop.call_step_at(ends[-2], self._span_cb)
                return
        self._step = self._loop.call_step_at(end, self._end_step_cb)

    def _span_ends(self, end: int, k: int) -> list[int]:
        """The end times of a span's ``k`` steps, the first ending at ``end``."""
        s = self._sched
        return self._ends_of(s.implicit_count, s.implicit_kv_tokens(0), k, end)

    def _arm_event(self) -> None:
        """``_event_s``: the end of the span's first step not yet applied whose
        application has an event (``Scheduler.next_event``); the last step's is
        ``_end_step``'s."""
        ends = self._ends
        assert ends is not None
        s = self._sched
        i = self._done + max(0, s.next_event() - s.tick)  # (every earlier one was applied)
        # in seconds, 1 µs early: ``_events_up`` compares it with the loop's float time
        # (whose ulp is ~1 ns after 70 days), so it never misses a step ``_catch_up`` applies
        self._event_s = (ends[i] - 1000) / 1e9 if i < len(ends) - 1 else _NEVER

    def _span_tail(self) -> bool:
        """At a span's last-but-one step end: apply the steps so far, register the last."""
        ends = self._ends
        assert ends is not None and self._loop is not None
        self._sched.advance(ends[self._done : -1])
        self._ends, self._event_s = None, _NEVER
        self._post()
        self._step = self._loop.call_step_at(ends[-1], self._end_step_cb)
        return False

    def _catch_up(self) -> None:
        """Apply the span's steps that ended before now, and the one ending now if the
        loop already ran the steps due now (docs/virtual-time.md, "Spans")."""
        ends = self._ends
        if ends is None:
            return
        j, last = self._done, len(ends) - 1
        now = self.clock.now_ns()
        assert self._loop is not None
        if self._loop.stepped_at_ns == now:
            now += 1
        if ends[j] < now:
            k = bisect.bisect_left(ends, now, j, last)
            self._sched.advance(ends[j:k])
            self._done = k
            self._arm_event()
            self._post()

    def _cut(self) -> None:
        """End the span after the step in flight (the engine changes now)."""
        if self._ends is None:
            return
        self._catch_up()
        ends, j = self._ends, self._done
        assert self._step is not None and self._loop is not None
        self._step.cancel()
        self._ends, self._event_s = None, _NEVER
        self._post()
        self._step = self._loop.call_step_at(ends[j], self._end_step_cb)

    def _end_step(self) -> bool:
        """The loop reached the step's end: apply it, plan the next; True if a
        consumer was woken (the loop lets it run before any further step)."""
        step, plan = self._step, self._plan
        assert step is not None and plan is not None
        t_ns = step.when_ns
        self.steps_ended += 1
        woke = False
        for seq in self._sched.complete(plan, t_ns):
            if _handle(seq)._notify():
                woke = True
        self._plan_step(t_ns)
        self._post()
        return woke

    async def _run(self) -> None:
        while True:
            t0 = self.clock.now_ns()
            nxt = self._next_plan()  # (after the last step's completions: no await between)
            self._post()
            if nxt is None:  # no work, or nothing fits yet: wait for a submit
                self._wake.clear()
                await self._wake.wait()
                continue
            plan, dur = nxt
            await self.clock.sleep_until(t0 + dur)
            for seq in self._sched.complete(plan, t0 + dur):
                _handle(seq)._notify()

    def stats(self) -> dict[str, Any]:
        """Counters (monotonic, tokens) and gauges, as plain numbers."""
        self._catch_up()
        s = self._sched
        out: dict[str, Any] = {
            k: getattr(s.counters, k) for k in sched.Counters.__dataclass_fields__
        }
        out.update(
            running=len(s.running),
            waiting=len(s.waiting),
            kv_usage=s.kv.usage,
            kv_blocks_active=s.kv.num_active,
            kv_blocks_cached=s.kv.cached_blocks(),
            kv_evictions=s.kv.evictions,
        )
        return out

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache; False (nothing done) while requests hold blocks."""
        self._catch_up()
        done = self._sched.kv.reset()
        self._post()
        return done


def _handle(seq: sched.Sequence) -> EngineRequest:
    handle = seq.handle
    assert isinstance(handle, EngineRequest)
    return handle
