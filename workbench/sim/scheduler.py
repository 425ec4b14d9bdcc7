"""The vLLM-style scheduler of the embedded engine (pure: no clock, no asyncio).

One ``schedule()`` call plans a step, one ``complete()`` call applies it after
the step's time has passed. Following vLLM v1: running requests first (decode
tokens and the rest of chunked prefills), then waiting requests in FCFS order
while the token budget (``max_num_batched_tokens``) and ``max_num_seqs`` allow;
no admission in a step that had to preempt. When a running request needs a
block and none is free, the most recently admitted running request is
preempted (recompute: its blocks are freed and it re-enters the head of the
waiting queue with its generated tokens, to be prefilled again, mostly from
the prefix cache).

Cost: the work per step is one short pass over the running requests (a
decode request costs a few attribute updates and one timestamp append) plus
work proportional to what changed: new blocks (hashed, then allocated and
committed by ``kvcache`` in array operations, one allocation and one commit per
step for all running requests), admissions, preemptions and finishes.
A request's output ids are drawn up front (their count is pinned to
``max_tokens``), so nothing is generated or appended per token beyond its
timestamp.

Accounting decision: prefix-cache queries/hits and prompt tokens are counted
once per request, at its first admission, so the counters always equal the sum
of the per-request usage the server reports (vLLM re-counts on re-admission).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from workbench.sim.config import EngineConfig
from workbench.sim.kvcache import ROOT_HASH, BlockManager, block_hashes
from workbench.tokenizer import output_tokens, request_base


@dataclass(eq=False, slots=True)
class Sequence:
    """Scheduler state of one request: its tokens, blocks and progress.

    ``tokens`` is the prompt followed by the request's whole (pre-drawn)
    output; only its first ``length`` tokens exist so far (the prompt plus the
    ``num_out`` generated ones). ``capacity`` is ``len(blocks) * block_size``
    and ``next_full`` the token count at which the next block fills (commit).
    """

    request_id: str
    tokens: list[int]
    prompt_len: int
    max_tokens: int
    arrival_ns: int
    base: int
    outputs: list[int] = field(default_factory=list)
    length: int = 0
    num_out: int = 0
    num_computed: int = 0
    capacity: int = 0
    next_full: int = 0
    step_tokens: int = 0
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    committed: int = 0
    prefilling: bool = True
    cached_tokens: int = -1
    token_ns: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    finish_ns: int | None = None
    watched: bool = False
    preemptions: int = 0  # times this request was preempted (recomputed from scratch)
    handle: object = None
    preloaded: int = 0  # prompt tokens whose KV came with the request (disaggregation)

    @property
    def output(self) -> list[int]:
        """Output ids generated so far."""
        return self.outputs[: self.num_out]

    def ensure_hashes(self, block_size: int) -> None:
        """Extend the chained block hashes to every full block of the first ``length`` tokens."""
        have = len(self.hashes)
        if (have + 1) * block_size <= self.length:
            parent = self.hashes[-1] if have else ROOT_HASH
            self.hashes.extend(block_hashes(self.tokens, block_size, have, parent, self.length))


@dataclass(slots=True)
class _HeadMemo:
    """The blocked waiting head's prefix hit (list and array), its hashes, and the
    cache's epoch and eviction count when it was found."""

    seq: Sequence
    hit: list[int]
    blocks: np.ndarray
    hashes: np.ndarray
    epoch: int = -1
    evictions: int = -1


@dataclass(slots=True)
class StepPlan:
    """What one step computes: (sequence, new tokens) pairs and the cost inputs."""

    scheduled: list[Sequence] = field(default_factory=list)  # n is ``seq.step_tokens``
    prefill_tokens: int = 0
    decode_seqs: int = 0
    kv_tokens: int = 0
    preempted: int = 0

    def add(self, seq: Sequence, n: int) -> None:
        seq.step_tokens = n
        self.scheduled.append(seq)
        self.kv_tokens += seq.num_computed + n
        if seq.prefilling:
            self.prefill_tokens += n
        else:
            self.decode_seqs += 1


@dataclass(slots=True)
class Counters:
    """Monotonic engine counters (tokens unless named otherwise)."""

    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0
    requests_submitted: int = 0
    requests_aborted: int = 0
    preemptions: int = 0
    steps: int = 0


class Scheduler:
    """Waiting + running queues over a ``BlockManager``."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.bs = config.block_size
        self.kv = BlockManager(config.block_size, config.num_blocks, config.enable_prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = Counters()
        self._memo: _HeadMemo | None = None  # the blocked waiting head's hit

    def new_sequence(
        self, request_id: str, prompt: list[int], max_tokens: int, now_ns: int
    ) -> Sequence:
        base = request_base(request_id, self.config.seed)
        outputs = output_tokens(base, max_tokens)
        seq = Sequence(request_id, prompt + outputs, len(prompt), max_tokens, now_ns, base, outputs)
        seq.length = len(prompt)
        seq.next_full = self.bs
        seq.ensure_hashes(self.bs)
        return seq

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        self.counters.requests_submitted += 1

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self._schedule_running(plan, self.config.max_num_batched_tokens)
        if not plan.preempted:
            self._admit_waiting(plan, budget)
        self.counters.steps += 1
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        """Running requests first, in order; a request that needs blocks preempts from
        the tail until it fits (or is itself preempted).

        Growth is batched: while the blocks the requests so far need fit in what is
        free, they are only counted (``pending``) and taken in one ``allocate`` when
        the pass ends or before anything is preempted. Nothing is released in
        between, so one allocation of their sum takes the same blocks (the free
        ones, then the same LRU victims in the same order) as one per request.
        """
        running, i = self.running, 0
        scheduled = plan.scheduled
        kv_tokens = decodes = 0
        bs = self.bs
        pending: list[tuple[Sequence, int]] = []
        reserved, free = 0, self.kv.num_free
        while i < len(running) and budget > 0:
            seq = running[i]
            c = seq.num_computed
            n = seq.length - c
            if n > budget:
                n = budget
            if c + n > seq.capacity:
                need = -(-(c + n) // bs) - len(seq.blocks)
                if reserved + need <= free:
                    pending.append((seq, need))
                    reserved += need
                    seq.capacity = (len(seq.blocks) + need) * bs
                else:
                    if pending:
                        self._take(pending, reserved)
                        pending, reserved = [], 0
                    while not self._grow(seq, n):
                        victim = running.pop()
                        self._preempt(victim)
                        plan.preempted += 1
                        if victim is seq:
                            plan.kv_tokens += kv_tokens
                            plan.decode_seqs += decodes
                            return budget
                    free = self.kv.num_free
            if seq.prefilling:
                plan.add(seq, n)
            else:  # decode (n == 1): the common case, inlined
                seq.step_tokens = n
                scheduled.append(seq)
                kv_tokens += c + n
                decodes += 1
            budget -= n
            i += 1
        if pending:
            self._take(pending, reserved)
        plan.kv_tokens += kv_tokens
        plan.decode_seqs += decodes
        return budget

    def _take(self, pending: list[tuple[Sequence, int]], total: int) -> None:
        """Allocate the counted growth of ``pending`` requests at once (it fits)."""
        got = self.kv.allocate(total)
        if got is None:  # pragma: no cover - invariant: counted against num_free
            raise RuntimeError(f"{total} counted blocks no longer free")
        at = 0
        for seq, need in pending:
            seq.blocks.extend(got[at : at + need])
            at += need

    def _grow(self, seq: Sequence, n: int) -> bool:
        need = -(-(seq.num_computed + n) // self.bs) - len(seq.blocks)
        if need <= 0:
            return True
        got = self.kv.allocate(need)
        if got is None:
            return False
        seq.blocks.extend(got)
        seq.capacity = len(seq.blocks) * self.bs
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.kv.release(seq.blocks)
        seq.blocks = []
        seq.capacity = 0
        seq.num_computed = 0
        seq.preloaded = 0  # its transferred KV is gone: recompute from here on
        seq.committed = 0
        seq.next_full = self.bs
        seq.prefilling = True
        self.waiting.appendleft(seq)
        seq.preemptions += 1
        self.counters.preemptions += 1

    def _admit_waiting(self, plan: StepPlan, budget: int) -> None:
        waiting, kv, bs = self.waiting, self.kv, self.bs
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = waiting[0]
            hit, memo = self._head_hit(seq)
            cached = len(hit) * bs
            start = max(cached, seq.preloaded)  # transferred KV is not computed again
            n = min(seq.length - start, budget)
            need = -(-(start + n) // bs) - len(hit)
            if not kv.can_allocate(need, hit if memo is None else memo.blocks):
                if memo is None:
                    memo = _HeadMemo(seq, hit, np.asarray(hit, dtype=np.int64),
                                     np.asarray(seq.hashes[: len(hit)], dtype=np.int64))
                memo.epoch, memo.evictions = kv.epoch, kv.evictions
                self._memo = memo
                break
            kv.acquire(hit)
            seq.blocks = hit + (kv.allocate(need) or [])
            seq.capacity = len(seq.blocks) * bs
            seq.num_computed = start
            if seq.preloaded:  # the one token left to compute is its first decode
                seq.prefilling = False
            seq.committed = len(hit)
            seq.next_full = (len(hit) + 1) * bs
            if seq.cached_tokens < 0:
                self._count_admission(seq, cached)
            waiting.popleft()
            self.running.append(seq)
            plan.add(seq, n)
            budget -= n

    def _head_hit(self, seq: Sequence) -> tuple[list[int], _HeadMemo | None]:
        """Prefix hit of the waiting head, and last step's memo when the hit is the same.

        Last step's hit is reused as far as its blocks still hold its hashes (all of
        it when nothing was evicted since): only the blocks after that are looked up.
        """
        kv = self.kv
        seq.ensure_hashes(self.bs)
        memo, self._memo = self._memo, None
        limit = (seq.length - 1) // self.bs
        if memo is None or memo.seq is not seq or memo.epoch != kv.epoch:
            return kv.longest_hit(seq.hashes, limit), None
        keep = len(memo.hit)
        if memo.evictions != kv.evictions:
            keep = kv.held_prefix(memo.blocks, memo.hashes)
        hit = kv.longest_hit(seq.hashes, limit, memo.hit[:keep])
        if len(hit) == len(memo.hit) == keep:
            return memo.hit, memo
        return hit, None

    def _count_admission(self, seq: Sequence, cached: int) -> None:
        seq.cached_tokens = cached
        c = self.counters
        c.prefix_cache_queries_tokens += seq.prompt_len
        c.prefix_cache_hits_tokens += cached
        c.prompt_tokens += seq.prompt_len

    def complete(self, plan: StepPlan, t_ns: int) -> list[Sequence]:
        """Apply a planned step that ended at ``t_ns``.

        Every sequence that got a token has ``t_ns`` appended to its
        ``token_ns``; returned are only those a consumer must hear about:
        the ones that finished and the ``watched`` ones (a stream is waiting).
        """
        wake: list[Sequence] = []
        bs, kv = self.bs, self.kv
        emitted = 0
        # the step's filled blocks, committed in one call (in order: of two requests
        # filling the same block, the first one's stays cached) before any release
        fill_blocks: list[int] = []
        fill_hashes: list[int] = []
        for seq in plan.scheduled:
            if seq.finished:  # aborted while the step ran
                continue
            computed = seq.num_computed = seq.num_computed + seq.step_tokens
            if computed >= seq.next_full:
                full = computed // bs
                seq.ensure_hashes(bs)
                fill_blocks += seq.blocks[seq.committed : full]
                fill_hashes += seq.hashes[seq.committed : full]
                seq.committed = full
                seq.next_full = (full + 1) * bs
            if computed >= seq.length:
                k = seq.num_out = seq.num_out + 1
                seq.length = computed + 1
                seq.token_ns.append(t_ns)
                seq.prefilling = False
                emitted += 1
                if k >= seq.max_tokens:
                    if fill_blocks:  # its blocks are cached before they are freed
                        kv.commit(fill_blocks, fill_hashes, 0, len(fill_blocks))
                        fill_blocks, fill_hashes = [], []
                    self._finish(seq, "length", t_ns)
                    wake.append(seq)
                elif seq.watched:
                    wake.append(seq)
        if fill_blocks:
            kv.commit(fill_blocks, fill_hashes, 0, len(fill_blocks))
        self.counters.generation_tokens += emitted
        return wake

    def _finish(self, seq: Sequence, reason: str, t_ns: int) -> None:
        seq.finished = True
        seq.finish_reason = reason
        seq.finish_ns = t_ns
        self.running.remove(seq)
        self.kv.release(seq.blocks)
        seq.blocks = []
        seq.tokens = []  # a finished request keeps only its output (memory of long replays)
        seq.hashes = []
        del seq.outputs[seq.num_out :]
        if reason == "length":
            self.counters.requests += 1

    def abort(self, seq: Sequence, t_ns: int) -> bool:
        """Drop a request wherever it is; False if it had already finished."""
        if seq.finished:
            return False
        if seq in self.running:
            self._finish(seq, "abort", t_ns)
        else:
            self.waiting.remove(seq)
            seq.finished, seq.finish_reason, seq.finish_ns = True, "abort", t_ns
            seq.tokens, seq.hashes = [], []
            del seq.outputs[seq.num_out :]
        self.counters.requests_aborted += 1
        return True
