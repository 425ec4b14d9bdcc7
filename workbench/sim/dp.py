"""Attention data parallelism: one worker made of ``dp`` engine ranks stepping together.

Under attention-DP (SGLang ``--enable-dp-attention``, vLLM's data-parallel ranks of an
expert-parallel MoE model) every rank of a worker has its own scheduler, its own
running batch and its own KV cache, and the ranks run each forward step *together*:
the expert layers are collective, so a step ends on every rank when the slowest rank's
batch is done. Here a ``DPWorker`` holds ``dp`` ranks, each a ``Scheduler`` over a KV
cache of the engine's whole ``num_blocks`` (the capacity is per rank), and one step
loop on the shared clock:

1. every rank with work plans its step (``Scheduler.schedule``), as one engine does;
2. each plan's time comes from the cost model (``sim.cost.step_ns``), and the step
   takes the **longest** of them (the barrier; plus ``idle_wake_ms`` after idle);
3. every rank's step ends then: its tokens are stamped at the barrier's end
   (``Scheduler.complete``), and a rank that was faster waited the difference
   (``dp_barrier_wait_ns``, per rank, in ``stats()``).

A rank with nothing to run sits the step out (its dummy batch is never the slowest).
A request is placed on a rank when it is submitted, by ``placement`` (the registry
``DP_PLACEMENTS``): ``least-loaded`` (fewest ``4 × waiting + running``, vLLM's
data-parallel balancer score; ties to the lower rank) or ``round-robin`` (SGLang's
default). The worker has ``Engine``'s face (``load``, ``cached_prefix_blocks``,
``submit_prepared``, ``stats``...), so a router and ``sim.cluster`` see one worker.

The engine itself is used only through public calls: an unstarted ``Engine`` checks
and prepares each request (``Engine.validate``, ``Engine.prepare``), and each rank is
the engine's own ``Scheduler``, so a rank plans and applies steps exactly as one engine
does. Rules and figures: docs/cluster.md, "Attention data parallelism".
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from workbench.clock import Clock
from workbench.registry import Registry
from workbench.segments import Segments
from workbench.sim import cost
from workbench.sim import scheduler as sched
from workbench.sim.config import EngineConfig
from workbench.sim.engine import Engine, LoadBoard
from workbench.sim.handles import RequestOutput, SequenceHandle

DP_MAX = 64  # ranks per worker (a node's GPUs, several times over)
#: rank placements: (the ranks' schedulers, requests placed so far) -> the rank; adding one
#: is a function here with one ``@DP_PLACEMENTS.register(name)`` line
DP_PLACEMENTS: Registry[Callable[[list[sched.Scheduler], int], int]] = Registry("dp placement")


@DP_PLACEMENTS.register("least-loaded")
def least_loaded(ranks: list[sched.Scheduler], placed: int) -> int:
    """Fewest ``4 × waiting + running`` (vLLM's data-parallel balancer score), ties to
    the lower rank."""
    scores = [4 * len(s.waiting) + len(s.running) for s in ranks]
    return scores.index(min(scores))


@DP_PLACEMENTS.register("round-robin")
def round_robin(ranks: list[sched.Scheduler], placed: int) -> int:
    """Rank ``k mod R`` for the k-th request (SGLang's default)."""
    return placed % len(ranks)


def check_dp(dp: Any, placement: Any) -> None:
    """``ValueError`` naming the knob and its rule."""
    if type(dp) is not int or not 1 <= dp <= DP_MAX:
        raise ValueError(f"engine.dp must be an integer in [1, {DP_MAX}], got {dp!r}")
    if placement not in DP_PLACEMENTS.names():
        raise ValueError(f"engine.dp_placement must be one of {DP_PLACEMENTS.names()}, "
                         f"got {placement!r}")


class RankRequest(SequenceHandle):
    """A request on one rank of a ``DPWorker``: ``EngineRequest``'s face (its truth, its
    wait, its stream, its abort)."""

    def __init__(self, worker: DPWorker, rank: int, seq: sched.Sequence) -> None:
        self.worker, self.rank, self.seq = worker, rank, seq
        self.waiters: list[asyncio.Future[None]] = []
        seq.handle = self

    def abort(self) -> None:
        self.worker.abort(self)

    def notify(self) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        if self.seq.finished:
            self.seq.handle = None

    async def wait(self) -> RankRequest:
        if not self.seq.finished:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            await fut
        return self

    async def batches(self) -> AsyncIterator[list[RequestOutput]]:
        """Every output not yet seen, a list per wakeup (the HTTP server's stream)."""
        self.worker.ranks[self.rank].watch(self.seq)
        async for batch in super().batches():
            yield batch

    async def _progress(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        await fut


class DPWorker:
    """``dp`` ranks, one step loop, a barrier per step (module doc)."""

    def __init__(self, config: EngineConfig, clock: Clock, dp: int,
                 placement: str = "least-loaded", board: LoadBoard | None = None,
                 slot: int = 0) -> None:  # fmt: skip
        check_dp(dp, placement)
        self.config, self.clock = config, clock
        self._board, self._slot = board, slot  # a cluster's: this worker's load kept there
        self.dp, self.placement = dp, placement
        self.front = Engine(config, clock)  # checks and prepares requests; never started
        # every rank steps explicitly (each running request visited per step): the
        # barrier's step time needs each rank's own plan of every step
        self.ranks = [sched.Scheduler(config, implicit=False) for _ in range(dp)]
        self.barrier_wait_ns = [0] * dp  # per rank: Σ (step − its own plan's time)
        self.busy_steps = [0] * dp  # per rank: steps it had work in
        self.steps = 0  # barrier steps
        self.placed = [0] * dp  # requests placed on each rank
        self._place = DP_PLACEMENTS.get(placement)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = True
        self._wake_ns = cost.idle_wake_ns(config)

    # -- Engine's face --------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="workbench-sim-dp-worker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        now = self.clock.now_ns()
        for rank in self.ranks:
            for seq in [*rank.running, *rank.waiting]:
                rank.abort(seq, now)
                _notify(seq)
        self._post()

    def validate(self, prompt_ids: Sequence[int] | Segments, max_tokens: int) -> int:
        return self.front.validate(prompt_ids, max_tokens)

    def prepare(self, request_id: str, prompt_ids: Sequence[int] | Segments,
                max_tokens: int) -> sched.Sequence:  # fmt: skip
        return self.front.prepare(request_id, prompt_ids, max_tokens)

    def submit(self, request_id: str, prompt_ids: Sequence[int] | Segments,
               max_tokens: int) -> RankRequest:  # fmt: skip
        return self.submit_prepared(self.prepare(request_id, prompt_ids, max_tokens))

    def submit_prepared(self, seq: sched.Sequence,
                        routed: Sequence[int] | None = None) -> RankRequest:  # fmt: skip
        """Place the sequence on a rank (``placement``) and queue it there."""
        r = self.choose_rank()
        self.placed[r] += 1
        req = RankRequest(self, r, seq)
        self.ranks[r].add(seq)
        self._post()
        self._wake.set()
        return req

    def submit_transferred(self, request_id: str, prompt_ids: Sequence[int] | Segments,
                           max_tokens: int, kv_tokens: int) -> RankRequest:  # fmt: skip
        req = self.submit(request_id, prompt_ids, max_tokens)
        req.seq.preloaded = max(0, min(int(kv_tokens), req.seq.prompt_len))
        return req

    def choose_rank(self) -> int:
        return self._place(self.ranks, sum(self.placed))

    def load(self) -> tuple[int, int, float]:
        """(running, waiting, mean KV usage) over the ranks: what a router balances on."""
        run = sum(len(s.running) for s in self.ranks)
        wait = sum(len(s.waiting) for s in self.ranks)
        return run, wait, sum(s.kv.usage for s in self.ranks) / self.dp

    def catch_up(self) -> None:
        """``Engine.catch_up``: nothing to apply (no spans here)."""

    def _post(self) -> None:
        """Write this worker's load to its cluster's board (``Engine._post``; no spans
        here: its event slot stays inf), after every change of it."""
        if self._board is not None:
            self._board.loads[self._slot] = self.load()

    def cached_prefix_blocks(self, hashes: Sequence[int], limit: int | None = None) -> int:
        """The longest prefix any rank's cache holds (a router asks the worker)."""
        n = len(hashes) if limit is None else min(limit, len(hashes))
        return max(len(s.kv.longest_hit(hashes, n)) for s in self.ranks)

    def caches_block(self, block_hash: int) -> bool:
        return any(s.kv.holds(block_hash) for s in self.ranks)

    def found_prefix(self, hashes: Sequence[int], hit: list[int] | array[int]) -> None:
        """Never called: no compiled index here (``prefix_shard``)."""

    def prefix_shard(self) -> None:
        """No one index: each rank has its own (the router takes the Python rule)."""
        return None

    def abort(self, req: RankRequest) -> None:
        if self.ranks[req.rank].abort(req.seq, self.clock.now_ns()):
            self._post()
            req.notify()

    def stats(self) -> dict[str, Any]:
        """``Engine.stats`` summed over the ranks (KV usage: the mean), with the barrier's
        figures: ``dp_steps`` (barrier steps), ``dp_barrier_wait_ns`` (Σ over ranks and
        steps of the time a busy rank waited for the slowest)."""
        out: dict[str, Any] = {k: 0 for k in sched.Counters.__dataclass_fields__}
        for s in self.ranks:
            for k in out:
                out[k] += getattr(s.counters, k)
        out.update(
            running=sum(len(s.running) for s in self.ranks),
            waiting=sum(len(s.waiting) for s in self.ranks),
            kv_usage=sum(s.kv.usage for s in self.ranks) / self.dp,
            kv_blocks_active=sum(s.kv.num_active for s in self.ranks),
            kv_blocks_cached=sum(s.kv.cached_blocks() for s in self.ranks),
            kv_evictions=sum(s.kv.evictions for s in self.ranks),
            dp_steps=self.steps,
            dp_barrier_wait_ns=sum(self.barrier_wait_ns),
        )
        return out

    def rank_stats(self) -> list[dict[str, Any]]:
        """Per rank: requests placed, steps it had work in, time it waited at the barrier,
        its preemptions and its KV usage now."""
        return [{"rank": r, "requests": self.placed[r], "busy_steps": self.busy_steps[r],
                 "barrier_wait_ns": self.barrier_wait_ns[r],
                 "preemptions": s.counters.preemptions, "kv_usage": s.kv.usage}
                for r, s in enumerate(self.ranks)]  # fmt: skip

    def reset_prefix_cache(self) -> bool:
        if any(s.has_work() for s in self.ranks):
            return False
        done = all([s.kv.reset() for s in self.ranks])
        self._post()
        return done

    # -- the step loop --------------------------------------------------------------------
    def plan_step(self) -> list[tuple[int, sched.StepPlan, int]]:
        """Each rank's plan of the next step and its own time (ranks with work only)."""
        out = []
        cfg = self.config
        for r, s in enumerate(self.ranks):
            while s.has_work():
                plan = s.schedule()
                if plan.scheduled:
                    out.append((r, plan, cost.step_ns(
                        cfg, plan.prefill_tokens, plan.decode_seqs, plan.kv_tokens,
                        plan.prefill_attn, plan.host_load_tokens)))
                    break
                if not plan.preempted:
                    break
                # a lone request preempted itself: schedule again to re-admit it
        return out

    async def _run(self) -> None:
        clock = self.clock
        while True:
            t0 = clock.now_ns()
            plans = self.plan_step()  # (after the last step's completions: no await between)
            self._post()
            if not plans:  # no rank has work that fits: wait for a submit
                self._idle = True
                self._wake.clear()
                await self._wake.wait()
                continue
            step = max(d for _, _, d in plans)  # the barrier: the slowest rank's step
            if self._idle:
                self._idle = False
                step += self._wake_ns
            await clock.sleep_until(t0 + step)
            end = t0 + step
            self.steps += 1
            for r, plan, own in plans:
                self.busy_steps[r] += 1
                self.barrier_wait_ns[r] += step - own
                for seq in self.ranks[r].complete(plan, end):  # finished and watched ones
                    _notify(seq)


def _notify(seq: sched.Sequence) -> None:
    handle = seq.handle
    if isinstance(handle, RankRequest):
        handle.notify()
