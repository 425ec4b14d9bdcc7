"""The runner: arrival → admission → per round: context → codec via a sender → record → tool wait.

Executes a ``Plan`` against any ``Sender`` on any ``Clock``; no metrics, printing or
files: each finished record goes to a ``sink`` the moment it ends.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from workbench import redact
from workbench.backends.base import Codec, WireRequest, make_codec
from workbench.backends.stream import CONNECT_FAILED
from workbench.backends.waits import server_waits_ns
from workbench.clock import Clock
from workbench.config import RunConfig
from workbench.context.tokens import TokenPool, run_pool
from workbench.records import RequestRecord
from workbench.replay import graph
from workbench.replay.admission import AdmissionGate
from workbench.replay.measure import SelfMeasure
from workbench.replay.plan import Plan, RoundPlan, UnitPlan
from workbench.replay.queue import AdmissionQueue, Waiting, release_order
from workbench.replay.rounds import RoundMaker, UnitRun, wire_request_id
from workbench.segments import Segments

log = logging.getLogger(__name__)

NS_PER_MS = 1_000_000
WARMUP_MAX_ROUNDS = 3
GC_REFREEZE_EVERY = 1000


class Sender(Protocol):
    """Where the runner's requests go: an HTTP transport, or the engine in virtual time."""

    #: takes prompts as ``Segments`` (virtual time: no token id drawn, docs/virtual-time.md)
    takes_segments: bool

    @property
    def paced_turns(self) -> int:
        """Sends and stream ends that waited their turn (``executor.pace_ms``)."""
        ...

    @property
    def resent_stale(self) -> int:
        """Requests sent once more after a reused connection died before any byte of the
        answer (docs/wire-protocols.md, "Idle connections"; 0: not an HTTP client)."""
        ...

    @property
    def after_done(self) -> dict[str, int]:
        """What the HTTP client did about bodies that did not end with ``[DONE]``
        (``backends/overrun.AfterDone``; empty: not an HTTP client)."""
        ...

    async def send(
        self, codec: Codec, req: WireRequest, rec: RequestRecord
    ) -> list[int] | Segments | None: ...


RecordSink = Callable[[RequestRecord], None]
LifecycleSink = Callable[[dict[str, Any]], None]


def merge_warmup(reports: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One warm-up report from the shards' (counts summed, the longest duration)."""
    got = [r for r in reports if r]
    if not got:
        return None
    out = dict(got[0])
    for r in got[1:]:
        for key in ("units", "rounds", "requests", "ok", "failed"):
            out[key] += r[key]
        out["duration_s"] = max(out["duration_s"], r["duration_s"])
        out["stopped"] = out["stopped"] or r["stopped"]
    return out


class Runner:
    """Executes one plan. ``stop()`` ends it cleanly: in-flight requests are cancelled
    (recorded as such), finished ones are already in the sink."""

    def __init__(
        self,
        cfg: RunConfig,
        plan: Plan,
        *,
        run_id: str,
        codec: Codec,
        sender: Sender,
        clock: Clock,
        pool: TokenPool,
        sink: RecordSink,
        lifecycle_sink: LifecycleSink | None = None,
        block_size: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.plan = plan
        self.run_id = run_id
        self.codec = codec
        self.sender = sender
        self.clock = clock
        self.pool = pool
        self.sink = sink
        self.lifecycle_sink = lifecycle_sink or (lambda _d: None)
        self.block_size = block_size or 512
        self.rounds = RoundMaker(
            run_id=run_id, backend=codec.name, policy=plan.policy, pool=pool,
            block_size=self.block_size, shared_prefix=cfg.context.shared_prefix,
            max_model_len=cfg.context.max_model_len,
        )  # fmt: skip
        # a sender that takes prompts as Segments gets them (virtual time: no token drawn),
        # unless the codec sends chat messages: their text is built from the ids
        self.rounds.segments = sender.takes_segments and not codec.sends_messages
        self.gate = AdmissionGate(cfg.arrival.max_concurrency)
        self.streams = graph.StreamCap(cfg.arrival.max_streams)
        self.stopped = asyncio.Event()
        self.stop_reason: str | None = None
        self.stop_detail: str | None = None  # the stop in words (``server_refused``)
        self._refused: list[str] = []  # connect failures in a row (CONNECT_FAILED values)
        self._refused_since = ""  # the wall-clock time of the first of them (HH:MM:SS)
        self._draining = False  # no round starts; the run stops once none is in flight
        self._sending = 0  # requests in the sender now
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()  # set whenever no unit task is running
        self._idle.set()
        self._deadline_ns: int | None = None
        self._instant_ends = (0, -1)  # consecutive units that ended in no time, and when
        self.t0_ns = 0
        self.measure = SelfMeasure()
        self.measure.cap = cfg.arrival.max_concurrency
        self._slot_freed_ns = 0
        self._queue: AdmissionQueue | None = None
        self.record_hashes = True
        self.slot_offset = 0  # a shard's first routing slot (slots stay unique across shards)
        self.warmed_up = False
        self.warmup_report: dict[str, Any] | None = None  # what the warm-up did
        self._warm: dict[str, int] | None = None  # its counts while it plays
        self.freeze_gc = False  # live replays: gc.freeze() for the measured run
        self._finished = 0

    # -- control ------------------------------------------------------------------------
    def stop(self, reason: str = "stopped") -> None:
        if not self.stopped.is_set():
            self.stop_reason = reason
            self.stopped.set()

    def client_raw(self) -> dict[str, Any]:
        """The self-measurement's plain data, with the sends and stream ends that had to
        wait their turn (``backends/pace.py``; 0 for a sender without a pacer) and what
        the HTTP client did about bodies held after ``[DONE]``."""
        raw = self.measure.raw()
        raw["paced_turns"] = self.sender.paced_turns
        raw["after_done"] = self.sender.after_done
        raw["resent_stale"] = self.sender.resent_stale
        return raw

    async def execute(self, t0_ns: int | None = None) -> None:
        """Warm-up (excluded from results), then the measured run; ``t0_ns`` pins the time
        origin (a run's shards share one epoch)."""
        if self.cfg.arrival.warmup and not self.warmed_up:
            await self._warmup()
        if self.freeze_gc:
            # everything alive now leaves the collector's reach: a full collection over it
            # paused the loop ~70 ms mid-run (release lag, TTFT bias)
            gc.collect()
            gc.freeze()
        self.measure.start()
        try:
            if not self.stopped.is_set():  # a stop or the fuse during the warm-up: no run
                await self._measured(t0_ns)
        finally:
            self.measure.stop()
            if self.freeze_gc:
                gc.unfreeze()

    async def _measured(self, t0_ns: int | None) -> None:
        self.t0_ns = t0_ns if t0_ns is not None else self.clock.now_ns()
        a = self.cfg.arrival
        if self.cfg.loops_until_deadline:
            assert a.duration_s is not None
            self._deadline_ns = self.t0_ns + int(a.duration_s * 1e9)
        fuse = asyncio.ensure_future(self._fuse()) if a.fuse_s else None
        dispatcher = asyncio.ensure_future(self._dispatch())
        stop_wait = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait({dispatcher, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not self.stopped.is_set():
                await self._wait_running_units()
        finally:
            await self._cancel_all([dispatcher, stop_wait, *([fuse] if fuse else [])])

    async def _wait_running_units(self) -> None:
        """Wait for running units, but give up at once if someone calls ``stop``."""
        if self._idle.is_set() or self.stopped.is_set():
            return
        # one wait on two events, not one per finishing unit over every pending unit
        # (that was quadratic: 3,000 pending units cost ~4 M callback registrations)
        waits = [asyncio.ensure_future(self._idle.wait()),
                 asyncio.ensure_future(self.stopped.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _cancel_all(self, extra: list[asyncio.Future[Any]]) -> None:
        pending = [*extra, *self._tasks]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _fuse(self) -> None:
        assert self.cfg.arrival.fuse_s is not None
        await self.clock.sleep_until(self.t0_ns + int(self.cfg.arrival.fuse_s * 1e9))
        log.warning("runaway fuse: stopping the run after %.1f s", self.cfg.arrival.fuse_s)
        self.stop("fuse")

    # -- dispatch -----------------------------------------------------------------------
    async def _dispatch(self) -> None:
        """Admit units in release order (``replay.queue``). No unit is held across an
        ``await`` (a hand-off may take the head meanwhile), and a burst of due units is
        admitted without yielding (a ``sleep(0)`` each paced releases at one per iteration)."""
        closed = self.cfg.arrival.registered_mode.closed_loop
        q = self._queue = AdmissionQueue(
            self.plan.units, self.t0_ns, closed_loop=closed, loops=self._deadline_ns is not None
        )
        while (w := q.peek()) is not None:
            if self._draining:  # a dead server: no unit starts (``_count_refused``)
                return
            if w.scheduled_ns is not None and w.scheduled_ns > self.clock.now_ns():
                await self.clock.sleep_until(w.scheduled_ns)
                continue
            if self._closed_loop_over():
                return
            slot = self.gate.try_acquire()
            if slot is None:
                await self.gate.changed()
                continue
            self._spawn(self._unit(self._admit(w, slot)))

    def _check_progress(self, run: UnitRun) -> None:
        """Stop a looping closed loop (``"stalled"``) once as many units in a row as the plan
        holds ended in no time at one clock reading: nothing would move a virtual clock
        and the deadline would never come (docs/arrival.md)."""
        if self._deadline_ns is None:
            return
        now = self.clock.now_ns()
        count, at = self._instant_ends
        if run.admitted_ns != now:
            self._instant_ends = (0, now)
            return
        count = count + 1 if at == now else 1
        self._instant_ends = (count, now)
        if count >= len(self.plan.units) and not self.stopped.is_set():
            log.warning("closed loop stalled: %d units in a row ended in no time; stopping "
                        "the run", count)
            self.stop("stalled")

    def _closed_loop_over(self) -> bool:
        return self._deadline_ns is not None and self.clock.now_ns() >= self._deadline_ns

    def _admit(self, w: Waiting, slot: int) -> UnitRun:
        """Pop the queue's head ``w`` into ``slot``; the caller runs it (new task or hand-off)."""
        assert self._queue is not None
        now = self.clock.now_ns()
        released = self._queue.pop(now)
        scheduled = w.scheduled_ns if w.scheduled_ns is not None else now
        ready = max(scheduled, self._slot_freed_ns) if w.scheduled_ns is not None else (
            self._slot_freed_ns or now
        )
        return UnitRun(
            w.plan, w.loop_idx, slot + self.slot_offset, released, now,
            scheduled_ns=scheduled, ready_ns=ready,
            task_id=w.plan.unit.unit_id if w.plan.children else None,
        )  # fmt: skip

    def _hand_off(self, slot: int) -> UnitRun | None:
        """A unit ended holding ``slot``: when the gate is full (``slot`` is the lowest free
        index), hand it straight to the next due unit, started in this task in this loop
        iteration (two iterations later, release lag and in-flight count drifted off
        target under load); otherwise the slot goes back to the gate."""
        q = self._queue
        now = self.clock.now_ns()
        self._slot_freed_ns = now
        if q is not None and self.gate.full and not (self.stopped.is_set() or self._draining):
            w = q.peek()
            if w is not None and q.due(w, now) and not self._closed_loop_over():
                return self._admit(w, slot)
        self.gate.release(slot)
        return None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)  # (ensure_future's checks: none)
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()

    async def warmup(self) -> None:
        """Play the warm-up now (a shard does it before the start barrier)."""
        if self.cfg.arrival.warmup and not self.warmed_up:
            await self._warmup()
        self.warmed_up = True

    async def _warmup(self) -> None:
        """The first <= 3 rounds of the first ``warmup`` units in release order, all at once,
        with the tokens the measured run will send, out of the metrics; bounded by the
        fuse and ``stop``, told in ``warmup_report`` (docs/arrival.md)."""
        n = self.cfg.arrival.warmup
        started = self.clock.now_ns()
        units = release_order(self.plan.units)[:n]
        runs = []
        for up in units:
            short = UnitPlan(up.ordinal, up.unit, 0.0, up.rounds[:WARMUP_MAX_ROUNDS])
            runs.append(UnitRun(short, 0, up.ordinal, started, started, started, warmup=True))
        self._warm = {"requests": 0, "ok": 0, "failed": 0}
        played = asyncio.gather(*(self._unit(run) for run in runs))
        waits: list[asyncio.Future[Any]] = [played, asyncio.ensure_future(self.stopped.wait())]
        fuse_s = self.cfg.arrival.fuse_s
        if fuse_s:
            waits.append(asyncio.ensure_future(
                self.clock.sleep_until(started + int(fuse_s * 1e9))))
        completed = False
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            completed = played.done()
            if not completed and not self.stopped.is_set():
                log.warning("runaway fuse: the warm-up ran %.1f s; stopping the run", fuse_s)
                self.stop("fuse")
        finally:
            await self._cancel_all(waits)
            for run in runs:  # the measured run starts each stream over, at its token 0
                self.pool.forget(run.stream)
        self.warmup_report = {
            "units": len(runs),
            "rounds_per_unit_max": WARMUP_MAX_ROUNDS,
            "rounds": sum(len(r.plan.rounds) for r in runs),
            **self._warm,
            "duration_s": (self.clock.now_ns() - started) / 1e9,
            "stopped": None if completed else self.stop_reason or "cancelled",
        }
        self._warm = None

    # -- one unit -----------------------------------------------------------------------
    async def _unit(self, run: UnitRun) -> None:
        """Play ``run``, then whatever unit its slot is handed to, in this one task."""
        nxt: UnitRun | None = run
        while nxt is not None:
            run, nxt = nxt, None
            try:
                await self._play_unit(run)
                await graph.join_all(run)  # an agent task holds its slot until all end
            except BaseException:
                if not run.warmup:
                    self._slot_freed_ns = self.clock.now_ns()
                    self.gate.release(run.routing_slot - self.slot_offset)
                self._emit_lifecycle(run)
                raise
            self._emit_lifecycle(run)
            self.pool.forget(run.stream)
            if not run.warmup:
                self._check_progress(run)
                nxt = self._hand_off(run.routing_slot - self.slot_offset)

    async def _play_unit(self, run: UnitRun) -> None:
        children = bool(run.plan.children)
        try:
            for k, rp in enumerate(run.plan.rounds):
                if self.stopped.is_set() or self._draining:  # no round starts
                    run.reason = "cancelled"
                    break
                if self._past_deadline():
                    run.reason = "truncated"
                    break
                if run.offspring and await graph.join(run, k):
                    run.ready_ns = max(run.ready_ns, self.clock.now_ns())
                if k and self._over_budget(run):
                    break
                sent = self._spawn_children(run, k, "round_start") if children else None
                scheduled = run.scheduled_ns if k == 0 else None
                try:
                    rec = await self._round(run, k, rp, scheduled, sent)
                except Exception as exc:  # building the request failed (memory, a bug)
                    self._unbuilt(run, rp, scheduled, exc)
                    break
                finally:
                    if sent is not None:  # never went out: its children go now
                        sent.settle(self.clock.now_ns())
                if rec.status == "skipped":
                    run.reason = "context_guard"
                    break
                if rec.status != "ok" and self.cfg.arrival.stop_session_on_error:
                    run.reason = "error"
                    break
                run.rounds_done += 1
                if children:
                    self._spawn_children(run, k, "round_end")
                if k + 1 < len(run.plan.rounds) and not self._over_budget(run):
                    await self._tool_wait(run, rp)
        except asyncio.CancelledError:
            run.reason = "cancelled"
            raise
        finally:
            run.own_end_ns = self.clock.now_ns()

    def _spawn_children(self, run: UnitRun, k: int, trigger: str) -> graph.RoundSent | None:
        """Start the children whose trigger is round ``k``'s start or end (replay.graph);
        for ``round_start`` the ``RoundSent`` they wait on (None: no such child)."""
        sent = None
        for cp in run.plan.children:
            sp = cp.spawn
            if sp.round_idx != k or sp.trigger != trigger:
                continue
            now = self.clock.now_ns()
            child = graph.child_run(run, cp, now, self.cfg.arrival.tool_wait_scale)
            if trigger == "round_start":
                sent = sent or graph.RoundSent()
            task = self._spawn(self._child(child, sent))
            run.offspring.setdefault(sp.join_round, []).append(task)
        return sent

    async def _child(self, run: UnitRun, sent: graph.RoundSent | None) -> None:
        """One sub-agent: its spawn delay (after its parent's round request went out,
        ``sent``, for a ``round_start`` child), its rounds, then its children's ends."""
        try:
            if run.scheduled_ns > self.clock.now_ns():  # a lower bound when ``sent``
                await self.clock.sleep_until(run.scheduled_ns)
            if sent is not None:
                await graph.wait_sent(run, sent, run.scheduled_ns - run.released_ns,
                                      self.clock)
            run.admitted_ns = self.clock.now_ns()
            await self._play_unit(run)
            await graph.join_all(run)
        except asyncio.CancelledError:
            run.reason = "cancelled"
            raise
        finally:
            self._emit_lifecycle(run)
            self.pool.forget(run.stream)

    def _unbuilt(
        self, run: UnitRun, rp: RoundPlan, scheduled: int | None, exc: Exception
    ) -> None:
        """A round that could not even be built is recorded as an error, never lost."""
        log.exception("round %s of unit %s could not be built", rp.round.request_id,
                      run.plan.unit.unit_id)
        rec = self.rounds.record(run, rp, scheduled, self.clock.now_ns())
        rec.status, rec.error = "error", f"request not built: {type(exc).__name__}: {exc}"
        run.reason = "error"
        self._finish(rec)

    def _over_budget(self, run: UnitRun) -> bool:
        """``arrival.session_budget_s`` spent since the unit's admission: it is truncated
        (reason ``budget``); a tool wait is not cut, the next round is not started."""
        budget = self.cfg.arrival.session_budget_s
        if budget is None or run.warmup:
            return False
        if self.clock.now_ns() - run.admitted_ns < budget * 1e9:
            return False
        run.reason = "budget"
        return True

    def _past_deadline(self) -> bool:
        return (
            self._deadline_ns is not None
            and self.cfg.arrival.drain == "truncate"
            and self.clock.now_ns() >= self._deadline_ns
        )

    async def _tool_wait(self, run: UnitRun, rp: RoundPlan) -> None:
        wait_ms = rp.round.tool_wait_after_ms * self.cfg.arrival.tool_wait_scale
        due = self.clock.now_ns()
        if wait_ms > 0:
            due += round(wait_ms * NS_PER_MS)
            await self.clock.sleep_until(due)
        run.ready_ns = due

    def _emit_lifecycle(self, run: UnitRun) -> None:
        self.lifecycle_sink(
            {
                "run_id": self.run_id,
                "unit_ordinal": run.plan.ordinal,
                "unit_id": run.plan.unit.unit_id,
                "kind": run.plan.unit.kind,
                "loop": run.loop_idx,
                "warmup": run.warmup,
                "routing_slot": run.routing_slot,
                "released_ns": run.released_ns,
                "admitted_ns": run.admitted_ns,
                "end_ns": self.clock.now_ns(),
                "rounds_total": len(run.plan.rounds),
                "rounds_done": run.rounds_done,
                "truncated": run.rounds_done < len(run.plan.rounds),
                "reason": run.reason,
                # a graph unit: its task, parent, depth and its own end (``end_ns``: its tree's)
                **({} if run.task_id is None
                   else {**graph.record_fields(run), "own_end_ns": run.own_end_ns}),
            }
        )

    # -- one round ----------------------------------------------------------------------
    async def _round(
        self, run: UnitRun, k: int, rp: RoundPlan, scheduled_ns: int | None,
        sent: graph.RoundSent | None = None,
    ) -> RequestRecord:
        make = self.rounds
        rec = make.record(run, rp, scheduled_ns, self.clock.now_ns())
        prompt = make.prompt(run, k, rp, rec)
        rec.sent_prompt_tokens = len(prompt)
        if make.guarded(rec, len(prompt), rp.output_len):
            self._finish(rec)
            return rec
        ids, parts = ((), prompt) if isinstance(prompt, Segments) else (prompt, None)
        req = WireRequest(
            wire_request_id(rec), ids, rp.output_len, session_id=run.plan.unit.unit_id,
            routing_slot=run.routing_slot, new_conversation=k == 0 or rp.round.reset_before,
            segments=parts, on_sent=sent,
        )
        if run.task_id is not None:
            rec.extra.update(graph.record_fields(run, k))
        if self.record_hashes:
            rec.extra["input_sequence_hashes"] = make.hashes(run, prompt)
        rec.extra["tool_wait_ms"] = rp.round.tool_wait_after_ms * self.cfg.arrival.tool_wait_scale
        try:
            if await self.streams.acquire():  # waited for a stream (arrival.max_streams)
                run.ready_ns = self.clock.now_ns()
        except asyncio.CancelledError:  # stopped while waiting for a stream: never sent
            rec.status, rec.error = "cancelled", "run cancelled (waiting for a stream)"
            self._finish(rec)
            raise
        measure = None if run.warmup else self.measure
        if measure is not None:
            now = self.clock.now_ns()
            ready = run.ready_ns or now
            measure.dispatched(now)
        self._sending += 1
        try:
            out_ids = await self.sender.send(self.codec, req, rec)
        except asyncio.CancelledError:
            if rec.status == "ok" and rec.end_ns is None:  # the sender did not close it
                rec.status = "cancelled"
            if rec.status == "cancelled":  # (a response that had ended stays ok)
                rec.error = rec.error or "run cancelled"
            self._finish(rec)
            raise
        except Exception as exc:  # a bug in a sender must not end the run
            log.exception("sender failed on %s", rec.request_id)
            rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"
            out_ids = None
        finally:
            self._sending -= 1
            self.streams.release()
            if measure is not None:
                if rec.extra.get(CONNECT_FAILED):  # never on the wire: no release lag
                    measure.not_connected += 1
                else:
                    # the server's waits (held connection, connect, first attempt): not the
                    # client's
                    measure.lag(rec.dispatch_ns or now, ready, server_waits_ns(rec))
                measure.ended(self.clock.now_ns())
        self._count_refused(rec)
        if self._draining and not self._sending:  # the last request in flight ended
            self.stop("server_refused")
        if out_ids is None and rec.status == "ok" and make.needs_output_ids(rp):
            # docs/context-policy.md: a round whose output ids cannot be trusted fails; it never
            # continues from a context that lacks what the model really said
            rec.status = "error"
            rec.error = (
                "the server streamed no output token ids (a text-only stream), which "
                "prefix-preserving needs to carry the conversation; use policy "
                "'trace-reported', or a server/backend that returns token ids "
                "(vLLM: return_token_ids; vllm-tokens; sglang-tokens)"
            )
        rounds = run.plan.rounds
        if k + 1 < len(rounds) and rounds[k + 1].round.hash_ids is None:
            # only a next session round reads the conversation (a hash-id round's prompt
            # is its hash ids'): not carried past the last round or into a hash-id one
            run.context = make.carry(prompt, out_ids)
        self._finish(rec)
        return rec

    def _count_refused(self, rec: RequestRecord) -> None:
        """Once ``arrival.stop_after_refused`` requests in a row could not connect (a dead
        server, docs/measurement-rules.md "A server that dies"), no round starts and the
        run stops (``server_refused``) when the requests still in flight have ended; a
        request that reached the server starts the count over."""
        failed = rec.extra.get(CONNECT_FAILED)
        if not failed:
            if rec.status != "cancelled":
                self._refused.clear()
            return
        if not self._refused:
            self._refused_since = time.strftime("%H:%M:%S")
        self._refused.append(str(failed))
        bound = self.cfg.arrival.stop_after_refused
        if bound is None or len(self._refused) < bound or self._draining:
            return
        verb = ("refused" if all(f == "refused" for f in self._refused)
                else "refused or timed out")
        self.stop_detail = redact.text(  # (a URL's credentials are registered secrets)
            f"server at {self.cfg.target.url or 'the target'} {verb} {len(self._refused)} "
            f"connections in a row since {self._refused_since}")
        log.warning("%s; no further request is sent, the run stops when the %s in flight "
                    "end", self.stop_detail, self._sending)
        self._draining = True

    def _finish(self, rec: RequestRecord) -> None:
        if rec.end_ns is None:
            rec.end_ns = self.clock.now_ns()
        if rec.warmup and self._warm is not None:
            self._warm["requests"] += 1
            self._warm["ok" if rec.status == "ok" else "failed"] += 1
        # server text can echo a key: never kept, shown or written (redact.py)
        if rec.error:
            rec.error = redact.text(rec.error)
        if rec.server_request_id:  # (a 200 stream's id, echoed by some gateways)
            rec.server_request_id = redact.text(rec.server_request_id)
        self.sink(rec)
        self._finished += 1
        if self.freeze_gc and self._finished % GC_REFREEZE_EVERY == 0:
            gc.freeze()  # finished records are long-lived: keep full collections off them



def build_runner(
    cfg: RunConfig,
    plan: Plan,
    *,
    run_id: str,
    sender: Sender,
    clock: Clock,
    sink: RecordSink,
    lifecycle_sink: LifecycleSink | None = None,
    block_size: int | None = None,
    slot_offset: int = 0,
    codec: Codec | None = None,
    pool: TokenPool | None = None,
) -> Runner:
    """The one place a run's ``Runner`` is built, for every executor. The codec (fresh per
    runner: the chat codec keeps state) and the token pool come from ``cfg.backend`` unless
    given; ``slot_offset`` is a shard's first routing slot."""
    b = cfg.backend
    runner = Runner(
        cfg, plan, run_id=run_id,
        codec=codec if codec is not None else make_codec(b.name, **b.codec_options()),
        sender=sender, clock=clock,
        pool=pool if pool is not None else run_pool(cfg.seed, b.token_salt, run_id),
        sink=sink, lifecycle_sink=lifecycle_sink, block_size=block_size,
    )  # fmt: skip
    runner.record_hashes = cfg.executor.block_hashes
    runner.freeze_gc = cfg.executor.gc_freeze
    runner.slot_offset = slot_offset
    return runner
