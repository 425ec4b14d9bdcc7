"""The scheduler of the embedded engine (pure: no clock, no asyncio): vLLM's mixed steps,
or SGLang's prefill and decode batches apart (``mixed_batches`` false) with its admission
reserve (``admission_reserve``); TensorRT-LLM's admission of what can finish
(``guaranteed_no_evict``).

One ``schedule()`` call plans a step, one ``complete()`` call applies it after the step's
time has passed. The policy and the accounting: docs/embedded-engine.md, "Scheduling";
the steady decoders at the head of the running list advance in aggregate, visited only
at their events (``sim.decoders``): docs/virtual-time.md, "Implicit decode".
"""

from __future__ import annotations

import bisect
import heapq
import operator
from array import array
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from workbench.segments import OUTPUT, BlockKeyer, Segments
from workbench.sim.config import EngineConfig
from workbench.sim.decoders import NEVER, new_decoders
from workbench.sim.hosttier import host_tier
from workbench.sim.kvcache import ROOT_HASH, BlockManager, block_hashes
from workbench.sim.kvindex import NO_HASH
from workbench.tokenizer import output_tokens, request_base


@dataclass(eq=False, slots=True)
class Sequence:
    """Scheduler state of one request: its tokens, blocks and progress.

    ``tokens`` is the prompt then the whole pre-drawn output, of which the first ``length``
    exist so far; ``next_full`` is the token count at which the next block fills (commit).
    From ``Segments`` (virtual time) no token is kept: ``source`` keys the blocks.
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
    blocks: array[int] = field(default_factory=partial(array, "q"))  # int64s, as ``hashes``
    hashes: array[int] = field(default_factory=partial(array, "q"))  # int64s: no int a key
    committed: int = 0
    prefilling: bool = True
    cached_tokens: int = -1
    token_ns: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    finish_ns: int | None = None
    watched: bool = False
    preemptions: int = 0  # times this request was preempted (recomputed from scratch)
    handle: Any = None  # Any: mypyc's dataclasses reject `object` (docs/virtual-time.md)
    preloaded: int = 0  # prompt tokens whose KV came with the request (disaggregation)
    source: BlockKeyer | None = None  # prompt + output as parts (no tokens held)
    lazy: bool = False  # built from Segments: output ids drawn when asked for
    host_tokens: int = 0  # prompt tokens brought back from the host KV tier (first admission)
    tb: int = -1  # implicit decode: the step its fields stand at (-1: explicit; see Scheduler)
    slot: int = -1  # implicit decode: its slot in ``Scheduler._dec`` (``sim.decoders``)
    fin: int = -1  # implicit decode: the step of its last token (``Scheduler._fins``)
    rank: int = 0  # admission order: ``running`` is sorted by it
    # an earlier hit admission starts from (hit, epoch, evictions): a router's, or its
    # own committed blocks when it is preempted (an int64 array: ``Scheduler._routed_memo``)
    routed: tuple[list[int] | array[int], int, int] | None = None

    @property
    def output(self) -> list[int]:
        """Output ids generated so far."""
        if self.lazy:
            return output_tokens(self.base, self.num_out)
        return self.outputs[: self.num_out]

    def output_segments(self) -> Segments:
        """The output generated so far, as one part (drawn by nobody)."""
        return Segments([(OUTPUT, self.base, 0, self.num_out)], normal=True)

    def ensure_hashes(self, block_size: int, length: int = -1) -> None:
        """Extend the chained block hashes to every full block of the first ``length`` tokens
        (default: ``self.length``; an implicit decoder's fill passes its length now). From
        parts, the first call keys the whole prompt and output at once (the same keys)."""
        have = len(self.hashes)
        if length < 0:
            length = self.length
        if (have + 1) * block_size <= length:
            if self.source is not None:
                self.source.extend(self.hashes, self.prompt_len + self.max_tokens)
                return
            parent = self.hashes[-1] if have else ROOT_HASH
            self.hashes.extend(block_hashes(self.tokens, block_size, have, parent, length))


@dataclass(slots=True)
class _HeadMemo:
    """The blocked waiting head's prefix hit, its hashes (the sequence's own, only ever
    extended) and the cache's epoch and eviction count when it was found. The hit is an
    int64 array once the head is blocked, for the compiled checks of later steps;
    ``arrays`` (numpy) are made when evictions make it checked a second time."""

    seq: Sequence
    hit: list[int] | array[int]
    hashes: array[int]
    epoch: int = -1
    evictions: int = -1
    arrays: tuple[np.ndarray, np.ndarray] | None = None
    checked: bool = False

    def held(self, kv: BlockManager) -> int:
        """How much of the hit its blocks still hold (``BlockManager.held_prefix``)."""
        if self.arrays is None:
            if not self.checked:
                self.checked = True
                return kv.held_prefix(self.hit, self.hashes)
            n = len(self.hit)
            self.arrays = (np.asarray(self.hit, dtype=np.int64),
                           np.asarray(self.hashes[:n], dtype=np.int64))
        return kv.held_prefix(*self.arrays)


@dataclass(slots=True)
class StepPlan:
    """What one step computes: (sequence, new tokens) pairs and the cost inputs."""

    scheduled: list[Sequence] = field(default_factory=list)  # n is ``seq.step_tokens``
    prefill_tokens: int = 0
    decode_seqs: int = 0
    kv_tokens: int = 0
    preempted: int = 0
    prefill_attn: int = 0  # prefill chunks' (query, key) pairs: Σ n·(c + (n+1)/2)
    host_load_tokens: int = 0  # KV tokens brought back from host memory before this step
    implicit: int = 0  # the implicit decoders it advances, one token each (``Scheduler``)

    def add(self, seq: Sequence, n: int) -> None:
        seq.step_tokens = n
        self.scheduled.append(seq)
        c = seq.num_computed
        self.kv_tokens += c + n
        if seq.prefilling:
            self.prefill_tokens += n
            self.prefill_attn += n * c + n * (n + 1) // 2
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
    host_cache_hits_tokens: int = 0  # of prefix_cache_hits_tokens, from the host KV tier


class Scheduler:
    """Waiting + running queues over a ``BlockManager``."""

    def __init__(self, config: EngineConfig, implicit: bool = True) -> None:
        self.config = config
        self.bs = config.block_size
        self.kv = BlockManager(config.block_size, config.num_blocks, config.enable_prefix_caching)
        if config.enable_prefix_caching:
            self.kv.host = host_tier(config)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = Counters()
        #: span applications (``advance``) that took or committed blocks (tests read it)
        self.span_block_moves = 0
        self._memo: _HeadMemo | None = None  # the blocked waiting head's hit
        # implicit decode (the first ``_ns`` running requests): ``_tick`` counts steps,
        # ``_times`` holds their end times from step ``_t0`` on, ``_kv_off`` is
        # Σ(num_computed − tb) over them; their events are ``_dec``'s (``sim.decoders``)
        self.implicit = implicit
        self._ns = 0
        self._tick = 0
        self._t0 = 0
        self._times: list[int] = []
        self._trim_at = _TRIM_AT
        self._kv_off = 0
        self._dec = new_decoders(self.bs)
        # the implicit decoders' last steps, a heap of (fin, rank, seq): an entry is stale
        # once its request left (``fin`` -1) or came back with another last step
        self._fins: list[tuple[int, int, Sequence]] = []
        self._inflight: StepPlan | None = None  # planned, not yet completed
        self._admitted = 0  # admissions so far (each one's ``rank``)
        self._apart = not config.mixed_batches  # SGLang's batches (``_schedule_apart``)
        # SGLang's admission reserve (``_reserve_room``): the step it last restarted at
        # and the prefill batches since, whose steps do not lower the ratio
        self._reserve = config.admission_reserve > 0
        self._reserve_from = 0
        self._prefills = 0
        self._no_evict = config.guaranteed_no_evict  # TensorRT-LLM's (``_no_evict_room``)

    def new_sequence(
        self, request_id: str, prompt: list[int] | Segments, max_tokens: int, now_ns: int
    ) -> Sequence:
        base = request_base(request_id, self.config.seed)
        if isinstance(prompt, Segments):  # hashed on admission (or by a router), from parts
            seq = Sequence(request_id, [], len(prompt), max_tokens, now_ns, base, [])
            whole = prompt + Segments([(OUTPUT, base, 0, max_tokens)], normal=True)
            seq.source = BlockKeyer(whole, self.bs)
            seq.lazy = True
            seq.length = len(prompt)
            seq.next_full = self.bs
            return seq
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
        ns = self._ns
        if ns and ns == len(self.running) and not self.waiting:
            implicit = self._implicit_only(ns)
            if implicit is not None:
                return implicit
        if self._apart:
            return self._schedule_apart()
        plan = StepPlan()
        budget = self._schedule_running(plan, self.config.max_num_batched_tokens)
        if not plan.preempted:
            self._admit_waiting(plan, budget, self._room())
        self.counters.steps += 1
        self._inflight = plan
        return plan

    def _schedule_apart(self) -> StepPlan:
        """A step with prefill and decode batches kept apart (``mixed_batches`` false:
        SGLang's default, docs/embedded-engine.md "Scheduling"). A prefill batch runs
        whenever one forms: the chunked prompt's next chunk first, then waiting prompts
        in order, under the token budget and ``max_num_seqs``; the running decodes wait
        for the next step. Only when none forms (nothing waits, or the waiting head
        finds no room) does a decode batch run: every running request, one token each.
        At most one running request is mid-prompt, the last admitted: each admission
        either takes its prompt's rest or ends the batch with the budget spent."""
        plan = StepPlan()
        running = self.running
        if self.waiting or (running and running[-1].prefilling):
            budget = self.config.max_num_batched_tokens
            seq = running[-1] if running else None
            if seq is not None and seq.prefilling:  # the chunked prompt continues
                n = min(seq.length - seq.num_computed, budget)
                if self._grow(seq, n):
                    plan.add(seq, n)
                    budget -= n
                else:  # no block for its chunk: back to waiting, as the mixed pass would
                    running.pop()
                    self._preempt(seq)
                    plan.preempted += 1
            if not plan.preempted and budget > 0:
                self._admit_waiting(plan, budget, self._room())
            if plan.scheduled:  # a prefill batch: the implicit decoders sit it out
                self._flush()
                self._prefills += 1
                self.counters.steps += 1
                self._inflight = plan
                return plan
        ns = self._ns
        if ns and ns == len(running):
            implicit = self._implicit_only(ns)
            if implicit is not None:
                implicit.preempted = plan.preempted
                return implicit
        self._schedule_running(plan, self.config.max_num_batched_tokens)
        self.counters.steps += 1
        self._inflight = plan
        return plan

    def _room(self) -> list[float] | None:
        """What admission may take this step (``_admit_waiting``'s ``room``): SGLang's
        reserve in tokens, or TensorRT-LLM's blocks to completion; None for neither."""
        if self._no_evict:
            return [float(self._no_evict_room())]
        return [self._reserve_room()] if self._reserve else None

    def _no_evict_room(self) -> int:
        """The KV blocks TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler sees as
        free (``guaranteed_no_evict``; docs/embedded-engine.md "Scheduling"): the free
        and evictable blocks less, for each running request, the blocks its prompt and
        whole output (``max_tokens``) still need beyond those its computed tokens hold."""
        bs, tick = self.bs, self._tick
        held = 0
        for seq in self.running:
            computed = seq.num_computed + (tick - seq.tb if seq.tb >= 0 else 0)
            held += -(-(seq.prompt_len + seq.max_tokens) // bs) - -(-computed // bs)
        return self.kv.num_free - held

    def _reserve_room(self) -> float:
        """The KV tokens SGLang's admission sees as free (``admission_reserve`` > 0;
        docs/embedded-engine.md "Scheduling"): the free and evictable blocks' tokens less,
        for each running request, ``min(output left, RESERVE_CLIP)`` × the ratio. The
        ratio starts at ``admission_reserve``, falls linearly over ``RESERVE_DECAY_STEPS``
        decode steps to ``RESERVE_FLOOR`` of it and starts again once nothing runs."""
        tick = self._tick
        if not self.running:
            self._reserve_from, self._prefills = tick, 0
        start = self.config.admission_reserve
        floor = start * RESERVE_FLOOR
        decodes = tick - self._reserve_from - self._prefills
        ratio = max(start - (start - floor) * decodes / RESERVE_DECAY_STEPS, floor)
        held = 0
        for seq in self.running:
            out = seq.num_out + (tick - seq.tb if seq.tb >= 0 else 0)
            held += min(seq.max_tokens - out, RESERVE_CLIP)
        return self.kv.num_free * self.bs - held * ratio

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        """Running requests first, in order; a request that needs blocks preempts from
        the tail until it fits (or is itself preempted). Growth that fits what is free is
        only counted (``pending``) and taken in one allocation at the end or before a
        preemption: nothing is released in between, so it takes the same blocks as one
        allocation per request. The implicit decoders (the first ``_ns``) are accounted
        in aggregate (``_implicit_step``); the pass starts after them."""
        running = self.running
        scheduled = plan.scheduled
        kv_tokens = decodes = 0
        bs = self.bs
        pending: list[tuple[Sequence | None, int]] = []
        reserved = 0
        i = self._implicit_step(plan, budget, pending)
        if i:
            reserved = pending[0][1] if pending else 0
            budget -= i
            kv_tokens, decodes = self._kv_off + i * (self._tick + 1), i
        free = self.kv.num_free
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
                        victim = running.pop()  # never an implicit one: they come first
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

    # -- implicit decode (docs/virtual-time.md, "Implicit decode"): the first ``_ns``
    # running requests' fields stand at step ``tb``; their events are ``_dec``'s

    def _implicit_only(self, ns: int) -> StepPlan | None:
        """``schedule`` when every running request is implicit and nothing waits (a steady
        engine's common step): the same plan as the passes below, without them. None
        when they do not all fit (they turned explicit: the passes plan the step)."""
        k = self._dec.grow_due(self._tick)
        kv = self.kv
        if ns > self.config.max_num_batched_tokens or k > kv.num_free:
            self._flush()
            return None
        if k:
            got = kv.take(k)
            if got is None:  # pragma: no cover - invariant: counted against num_free
                raise RuntimeError(f"{k} counted blocks no longer free")
            self._dec.assign(got, 0, k)
        plan = StepPlan(decode_seqs=ns, kv_tokens=self._kv_off + ns * (self._tick + 1),
                        implicit=ns)  # fmt: skip
        self.counters.steps += 1
        self._inflight = plan
        return plan

    def _implicit_step(self, plan: StepPlan, budget: int,
                       pending: list[tuple[Sequence | None, int]]) -> int:
        """Account the implicit decoders in the step being planned (their count, returned):
        those needing a block are one ``pending`` entry ``(None, k)``. When they do not all
        fit (budget, or blocks: the explicit pass would preempt), they turn explicit first
        and 0 is returned."""
        ns = self._ns
        if not ns:
            return 0
        k = self._dec.grow_due(self._tick)
        if ns > budget or k > self.kv.num_free:
            self._flush()
            return 0
        if k:
            pending.append((None, k))
        plan.implicit = ns
        return ns

    def _sync(self, seq: Sequence, tick: int) -> None:
        """Bring an implicit request's fields to step ``tick`` (it stays implicit)."""
        d = tick - seq.tb
        if d:
            seq.num_computed += d
            seq.length += d
            seq.num_out += d
            t0 = self._t0
            seq.token_ns += self._times[seq.tb - t0 : tick - t0]
            seq.tb = tick

    def sync(self, seq: Sequence) -> None:
        """Make an implicit request's fields current (its handle reads them)."""
        if seq.tb >= 0:
            self._sync(seq, self._tick)

    def _disarm(self, seq: Sequence, tick: int) -> None:
        """An implicit request turns explicit: synced to ``tick``, its event fields back
        from ``_dec`` (its events turn stale)."""
        self._sync(seq, tick)
        seq.tb = seq.fin = -1
        seq.next_full, seq.committed, seq.capacity = self._dec.remove(seq.slot)
        seq.slot = -1

    @property
    def implicit_count(self) -> int:
        """How many running requests are implicit decoders."""
        return self._ns

    def implicit_kv_tokens(self, ahead: int) -> int:
        """The KV tokens the implicit decoders attend to in the step ``ahead`` steps
        after the one being planned (none of them joining or leaving in between)."""
        return self._kv_off + self._ns * (self._tick + ahead + 1)

    def span(self, limit: int) -> int:
        """How many steps from the one just planned (implicit-only, nothing waiting) run
        with no request finishing but in the last, every block they need surely free,
        up to ``limit``: ``advance`` applies all but the last (their fills and grows in
        step order), ``complete`` the last (docs/virtual-time.md, "Spans")."""
        tick, fins = self._tick, self._fins
        while fins and fins[0][2].fin != fins[0][0]:
            heapq.heappop(fins)  # stale: its request left
        k = min(limit, (fins[0][0] if fins else NEVER) - tick + 1)
        grows = self._dec.next_grow() - tick  # the first step planned with a grow
        if grows < k:
            # a decoder grows once every ``bs`` steps: in the k − 1 plans after this one
            # the ns decoders take at most ns·⌈(k − 1)/bs⌉ blocks, none freed meanwhile
            k = min(k, max(grows, self.kv.num_free // self._ns * self.bs + 1))
        return max(1, k)

    def next_event(self) -> int:
        """The first step whose end applies an event of the implicit decoders (a block
        filled then, or one needed by the next step's plan; maybe stale: none), or
        ``NEVER``."""
        dec = self._dec
        return min(dec.next_fill(), dec.next_grow() - 1)

    @property
    def tick(self) -> int:
        """The steps ended so far (the one being planned or in flight is this one)."""
        return self._tick

    def advance(self, ends: list[int]) -> None:
        """Apply span steps that ended at ``ends`` (``span``): their step times, and in
        step order the blocks filled at each step's end (committed) and the blocks the
        next step's plan needs (taken), as ``complete`` and ``schedule`` would."""
        n = len(ends)
        if not n:
            return
        self._times += ends
        tick = self._tick
        stop = tick + n  # steps tick .. stop-1 end; the plans of tick+1 .. stop are made
        dec, kv = self._dec, self.kv
        # in step order: each step's fills, then the next plan's grows, allocated as
        # ``kv.take`` would (``Decoders.run``); the filled blocks are committed in one
        # call, except where an allocation evicts a block holding a hash among them: the
        # commit goes first there (committed first, that hash stays findable), and so
        # with a host tier (it is handed the evicted hashes) or more grows than run takes
        moved = (kv.num_active, kv.cached_blocks())
        fb, fh = bytearray(), bytearray()
        evict = kv.host is None
        while True:
            ref, own, free, log, pos, nfree, head, tail = kv.block_state()
            at, nfree, head, evicted, k = dec.run(stop, fb, fh, ref, own, free, log, pos,
                                                  nfree, head, tail, NO_HASH, evict)
            kv.took(nfree, head, evicted)
            if at >= stop:
                break
            got = kv.commit_take(fb, fh, k)
            if fb:
                fb, fh = bytearray(), bytearray()
            if got is None:  # pragma: no cover - invariant: ``span``'s bound
                raise RuntimeError(f"{k} blocks a span counted on are not free")
            dec.assign(got, 0, k)
        if fb:
            self._commit_bytes(fb, fh)
        self._tick = stop
        if (kv.num_active, kv.cached_blocks()) != moved:
            self.span_block_moves += 1
        self.counters.steps += n
        self.counters.generation_tokens += self._ns * n

    def _absorb(self) -> None:
        """After a step: running requests right after the implicit ones that now only
        decode (and nothing watches) turn implicit, from the next step on."""
        running, ns, tick = self.running, self._ns, self._tick
        while ns < len(running):
            seq = running[ns]
            if seq.prefilling or seq.watched or seq.length - seq.num_computed != 1:
                break
            seq.tb = tick
            self._kv_off += seq.num_computed - tick
            fin = seq.fin = tick + seq.max_tokens - seq.num_out - 1
            heapq.heappush(self._fins, (fin, seq.rank, seq))
            # ``_dec`` takes its event fields and files its next fill (or finish) and grow
            seq.slot = self._dec.add(seq, seq.blocks, seq.hashes, seq.rank,
                                     seq.num_computed - tick, fin, seq.next_full,
                                     seq.committed, seq.capacity)  # fmt: skip
            ns += 1
        self._ns = ns
        if len(self._times) > self._trim_at:
            self._trim_times()

    def _trim_times(self) -> None:
        """Drop the step times no implicit request still needs; the next try waits until
        the list has doubled (O(1) a step, amortised)."""
        low = min((seq.tb for seq in self.running[: self._ns]), default=self._tick)
        if low - self._t0 > len(self._times) // 2:
            del self._times[: low - self._t0]
            self._t0 = low
        self._trim_at = max(_TRIM_AT, 2 * len(self._times))

    def _leave(self, seq: Sequence) -> None:
        """An implicit request turns explicit (it finishes, or is aborted): synced, its
        fields back from ``_dec``; the caller removes it from ``running``."""
        self._kv_off -= seq.num_computed - seq.tb  # the same before and after a sync
        self._disarm(seq, self._tick)
        self._ns -= 1
        if not self._ns:  # every filed event is stale now: drop them
            self._dec.clear()
            self._fins.clear()

    def _flush(self) -> None:
        """Every implicit request turns explicit (a step they do not all fit in, or a
        stream starts watching one). During a step, they join its plan as the explicit
        pass would have scheduled them: first, one token each."""
        ns = self._ns
        if not ns:
            return
        implicit = self.running[:ns]
        tick = self._tick
        for seq in implicit:
            self._disarm(seq, tick)
        self._ns = self._kv_off = 0
        self._dec.clear()
        self._fins.clear()
        plan = self._inflight
        if plan is not None and plan.implicit:
            for seq in implicit:
                seq.step_tokens = 1
            plan.scheduled[:0] = implicit
            plan.implicit = 0

    def watch(self, seq: Sequence) -> None:
        """A consumer waits on ``seq`` step by step: it (and every implicit request before
        it) turns explicit and is woken every step."""
        if seq.tb >= 0:
            self._flush()
        seq.watched = True

    def _take(self, pending: list[tuple[Sequence | None, int]], total: int) -> None:
        """Allocate the counted growth of ``pending`` requests at once (it fits). An entry
        ``(None, k)`` (the first, if any) is the implicit decoders needing a block: ``_dec``
        appends one to each, in running order (``_implicit_step``)."""
        got = self.kv.take(total)
        if got is None:  # pragma: no cover - invariant: counted against num_free
            raise RuntimeError(f"{total} counted blocks no longer free")
        if len(pending) == 1 and pending[0][0] is not None:
            pending[0][0].blocks += got
            return
        at = 0
        for seq, need in pending:
            if seq is None:
                self._dec.assign(got, at, need)
            else:
                seq.blocks += got[at : at + need]
            at += need

    def _grow(self, seq: Sequence, n: int) -> bool:
        need = -(-(seq.num_computed + n) // self.bs) - len(seq.blocks)
        if need <= 0:
            return True
        got = self.kv.take(need)
        if got is None:
            return False
        seq.blocks += got
        seq.capacity = len(seq.blocks) * self.bs
        return True

    def _preempt(self, seq: Sequence) -> None:
        assert seq.tb < 0, "implicit decoders come first: never a preemption victim"
        # its committed blocks stay findable until evicted: its re-admission checks which
        # still hold its hashes (evictions -1: always checked, a private duplicate among
        # them holds none) instead of looking its whole prefix up again
        own = seq.blocks[: min(seq.committed, (seq.length - 1) // self.bs)]
        seq.routed = (own, self.kv.epoch, -1) if own and self.kv.enable_caching else None
        self.kv.release(seq.blocks)
        seq.blocks = array("q")
        seq.capacity = 0
        seq.num_computed = 0
        seq.preloaded = 0  # its transferred KV is gone: recompute from here on
        seq.committed = 0
        seq.next_full = self.bs
        seq.prefilling = True
        self.waiting.appendleft(seq)
        seq.preemptions += 1
        self.counters.preemptions += 1

    def _admit_waiting(self, plan: StepPlan, budget: int, room: list[float] | None = None) -> None:
        """Waiting requests in order while the budget, ``max_num_seqs`` and the blocks
        allow. ``room`` (SGLang's reserve, ``_reserve_room``): a request's prompt left
        plus ``min(its output, RESERVE_CLIP)`` must be below it, and is taken from it;
        with ``guaranteed_no_evict`` (``_no_evict_room``) its blocks to completion must
        fit in it."""
        waiting, kv, bs = self.waiting, self.kv, self.bs
        while waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = waiting[0]
            hit, memo = self._head_hit(seq)
            on_host = 0 if kv.host is None else kv.host.extend(
                seq.hashes, len(hit), (seq.length - 1) // bs)
            cached = (len(hit) + on_host) * bs
            start = max(cached, seq.preloaded)  # transferred KV is not computed again
            if self._no_evict:  # its every block to completion, its hit's too
                need = -(-(seq.prompt_len + seq.max_tokens) // bs)
                if room is None or need > room[0]:
                    break
                room[0] -= need
            elif room is not None:
                need = seq.length - start + min(seq.max_tokens - seq.num_out, RESERVE_CLIP)
                if need >= room[0]:
                    break
                room[0] -= need
            n = min(seq.length - start, budget)
            if not self.config.enable_chunked_prefill and n < seq.length - start:
                if plan.prefill_tokens:  # whole prompts only: it waits for the next step
                    break
                n = seq.length - start  # longer than the whole budget: the step's only one
            need = -(-(start + n) // bs) - len(hit)
            if not kv.can_allocate(need, hit):
                if memo is None:  # retried every step: its hit as int64s (``_HeadMemo``)
                    memo = _HeadMemo(seq, hit if isinstance(hit, array) else array("q", hit),
                                     seq.hashes)
                memo.epoch, memo.evictions = kv.epoch, kv.evictions
                self._memo = memo
                break
            kv.acquire(hit)
            blocks = seq.blocks = array("q", hit)
            if need > 0:
                blocks += kv.take(need) or array("q")
            seq.capacity = len(seq.blocks) * bs
            seq.num_computed = start
            if seq.preloaded:  # the one token left to compute is its first decode
                seq.prefilling = False
            seq.committed = len(hit)
            seq.next_full = (len(hit) + 1) * bs
            if on_host:  # the blocks after the device hit come back from host memory
                assert kv.host is not None
                kv.host.touch(seq.hashes[len(hit) : len(hit) + on_host])
                plan.host_load_tokens += on_host * bs
            if seq.cached_tokens < 0:
                seq.host_tokens = on_host * bs
                self.counters.host_cache_hits_tokens += on_host * bs
                self._count_admission(seq, cached)
            waiting.popleft()
            seq.rank = self._admitted
            self._admitted += 1
            self.running.append(seq)
            plan.add(seq, n)
            budget -= n

    def _head_hit(self, seq: Sequence) -> tuple[list[int] | array[int], _HeadMemo | None]:
        """Prefix hit of the waiting head, and last step's memo when the hit is the same.
        Last step's hit is reused as far as its blocks still hold its hashes: only the
        blocks after that are looked up."""
        kv = self.kv
        seq.ensure_hashes(self.bs)
        memo, self._memo = self._memo, None
        limit = (seq.length - 1) // self.bs
        if memo is None or memo.seq is not seq or memo.epoch != kv.epoch:
            memo = self._routed_memo(seq)
            if memo is None:
                return kv.longest_hit(seq.hashes, limit), None
        keep = len(memo.hit)
        if memo.evictions != kv.evictions:
            keep = memo.held(kv)
        hit = kv.longest_hit(seq.hashes, limit, memo.hit if keep == len(memo.hit)
                             else memo.hit[:keep])  # fmt: skip
        if len(hit) == len(memo.hit) == keep:
            return memo.hit, memo
        return hit, None

    def _routed_memo(self, seq: Sequence) -> _HeadMemo | None:
        """``seq``'s earlier hit (``Sequence.routed``) as a memo, once."""
        routed, seq.routed = seq.routed, None
        if routed is None or routed[1] != self.kv.epoch:
            return None
        hit = routed[0]
        return _HeadMemo(seq, hit, seq.hashes, routed[1], routed[2])

    def _count_admission(self, seq: Sequence, cached: int) -> None:
        seq.cached_tokens = cached
        c = self.counters
        c.prefix_cache_queries_tokens += seq.prompt_len
        c.prefix_cache_hits_tokens += cached
        c.prompt_tokens += seq.prompt_len

    def complete(self, plan: StepPlan, t_ns: int) -> list[Sequence]:
        """Apply a planned step that ended at ``t_ns``: every sequence that got a token has
        ``t_ns`` appended to its ``token_ns``. Returned are those a consumer must hear
        about: the finished and the ``watched`` ones. Implicit decoders are visited only
        at an event (a filled block, their last token), first, in running order."""
        self._inflight = None
        tick = self._tick
        self._times.append(t_ns)
        self._tick = tick + 1
        if plan.implicit and not plan.scheduled:
            return self._complete_implicit(tick, t_ns)
        wake: list[Sequence] = []
        bs, kv = self.bs, self.kv
        emitted = self._ns if plan.implicit else 0
        # the step's filled blocks, committed in one call, in order, before the finished
        # requests are released (the same as committing before each release:
        # docs/virtual-time.md, "Implicit decode", Order)
        fill_blocks: array[int] = array("q")
        fill_hashes: array[int] = array("q")
        done: list[Sequence] = []
        if emitted:  # the implicit decoders' fills and finishes, in running order
            fb, fh = bytearray(), bytearray()
            done = self._dec.fill(tick, fb, fh)
            if done:
                wake += done
            if fb:
                fill_blocks.frombytes(fb)
                fill_hashes.frombytes(fh)
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
                    done.append(seq)
                    wake.append(seq)
                elif seq.watched:
                    wake.append(seq)
        if fill_blocks:
            kv.commit(fill_blocks, fill_hashes, 0, len(fill_blocks))
        self._step_done(done, emitted, t_ns)
        return wake

    def _complete_implicit(self, tick: int, t_ns: int) -> list[Sequence]:
        """``complete`` of a step only implicit decoders ran (``_implicit_only``): their
        events, the filled blocks committed as the C fill wrote them (int64 bytes)."""
        emitted = self._ns
        fb, fh = bytearray(), bytearray()
        done: list[Sequence] = self._dec.fill(tick, fb, fh)
        if fb:
            self._commit_bytes(fb, fh)
        self._step_done(done, emitted, t_ns)
        return done

    def _step_done(self, done: list[Sequence], emitted: int, t_ns: int) -> None:
        """A step's end after its commit: its finished requests released (in order), its
        tokens counted, the next steady decoders turned implicit."""
        for seq in done:
            self._finish(seq, "length", t_ns)
        self.counters.generation_tokens += emitted
        if self.implicit:
            self._absorb()

    def _commit_bytes(self, blocks: bytearray, hashes: bytearray) -> None:
        """Commit filled blocks as ``Decoders.fill`` wrote them (int64s, in order)."""
        self.kv.commit(memoryview(blocks).cast("q"), memoryview(hashes).cast("q"), 0,
                       len(blocks) >> 3)  # fmt: skip

    def _finish(self, seq: Sequence, reason: str, t_ns: int) -> None:
        if seq.tb >= 0:
            self._leave(seq)
        running = self.running  # in admission order: found by its rank, not by a scan
        i = bisect.bisect_left(running, seq.rank, key=_rank)
        if i == len(running) or running[i] is not seq:  # pragma: no cover - invariant
            raise RuntimeError(f"{seq.request_id} is not where its rank puts it in running")
        del running[i]
        self.kv.release(seq.blocks)
        seq.blocks = array("q")
        _retire(seq, reason, t_ns)
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
            _retire(seq, "abort", t_ns)
        self.counters.requests_aborted += 1
        return True


def _retire(seq: Sequence, reason: str, t_ns: int) -> None:
    """Mark ``seq`` finished; it keeps only its output (memory of long replays)."""
    seq.finished, seq.finish_reason, seq.finish_ns = True, reason, t_ns
    seq.tokens, seq.hashes, seq.source, seq.routed = [], array("q"), None, None
    del seq.outputs[seq.num_out :]


_rank = operator.attrgetter("rank")  # running order (a C-level sort key)
# SGLang's admission reserve (``Scheduler._reserve_room``; docs/embedded-engine.md,
# "Scheduling"): the output a request is charged at most (SGLANG_CLIP_MAX_NEW_TOKENS_
# ESTIMATION), the ratio's floor as a share of its start and the decode steps it takes
# to fall there (default_min_new_token_ratio_factor, default_new_token_ratio_decay_steps)
RESERVE_CLIP = 4096
RESERVE_FLOOR = 0.14
RESERVE_DECAY_STEPS = 600
_TRIM_AT = 4096  # step times kept before the implicit decoders' unneeded ones are dropped
