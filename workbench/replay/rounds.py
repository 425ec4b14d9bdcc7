"""What one round sends: its record, its prompt (``context[:p] + fresh(i)``, a shortfall
when the context is short; docs/context-policy.md), the context guard, its block hashes.
``UnitRun`` is one unit's live state. Pure bookkeeping: no clock, no I/O."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from workbench.context.hashing import block_hashes, chain_hashes
from workbench.context.policy import POLICIES
from workbench.context.tokens import TokenPool
from workbench.kernels import native as _native
from workbench.records import RequestRecord
from workbench.replay.plan import RoundPlan, UnitPlan
from workbench.segments import BLOCK, OUTPUT, Part, Segments
from workbench.tokenizer import output_tokens

Prompt = list[int] | Segments  # Segments only for a sender that takes them (virtual time)
_MEMO_MAX = 1 << 20  # memoized hash-id block hashes (``_hash_memo``), then start over
_DRAW_BLOCKS = 32  # new blocks drawn and hashed at a time: bounds the arrays of a long prompt

#: a warm-up record's request id is the measured one's with this prefix
WARMUP_PREFIX = "warmup:"


def wire_request_id(rec: RequestRecord) -> str:
    """The id a request goes out with: a warm-up request is the measured run's request,
    sent early, so it carries the measured id (a server that derives anything from the
    id, as the embedded engine derives its output ids, answers both alike)."""
    return rec.request_id.removeprefix(WARMUP_PREFIX) if rec.warmup else rec.request_id


@dataclass
class UnitRun:
    """Mutable state of one unit while it runs (becomes a lifecycle record)."""

    plan: UnitPlan
    loop_idx: int
    routing_slot: int
    released_ns: int
    admitted_ns: int
    scheduled_ns: int = 0
    warmup: bool = False
    rounds_done: int = 0
    reason: str = "completed"
    context: Prompt = field(default_factory=list)
    ready_ns: int = 0  # when the next round became due (self-measured release lag)
    last_prompt: Prompt = field(default_factory=list)  # with last_hashes: incremental hashing
    last_hashes: list[int] = field(default_factory=list)
    # session graphs (replay.graph): the parent's unit id (None: a root), the root's, and
    # the children started so far by the parent round that waits for them (None: none)
    parent_id: str | None = None
    task_id: str | None = None
    offspring: dict[int | None, list[asyncio.Future[None]]] = field(default_factory=dict)
    own_end_ns: int | None = None  # its own last round ended (a task may go on after)

    @property
    def stream(self) -> str:
        """The unit's token stream: the same for its warm-up and its measured run, so
        the warm-up sends the tokens the measured run will send (docs/arrival.md)."""
        loop = f"~{self.loop_idx}" if self.loop_idx else ""
        return f"{self.plan.ordinal}:{self.plan.unit.unit_id}{loop}"


class RoundMaker:
    """Records and prompts for one run's rounds (``Runner`` holds one)."""

    def __init__(
        self,
        *,
        run_id: str,
        backend: str,
        policy: str | None,
        pool: TokenPool,
        block_size: int,
        shared_prefix: bool,
        max_model_len: int | None,
    ) -> None:
        self.run_id = run_id
        self.backend = backend
        self.policy = policy
        self.carries_ids = policy is not None and POLICIES.get(policy).needs_output_ids
        self.pool = pool
        self.block_size = block_size
        self.shared_prefix = shared_prefix
        self.max_model_len = max_model_len
        #: build prompts as ``Segments`` (the sender says it takes them: virtual time)
        self.segments = False
        #: a hash-id block's packed key -> (previous hash, its length, its hash), shared by
        #: the runs of this process that draw the same tokens (``_hash_memo``)
        self._memo = _hash_memo(pool, block_size)

    def needs_output_ids(self, rp: RoundPlan) -> bool:
        """A session round carried by a policy that ``needs_output_ids``
        (``prefix-preserving``) needs the real output ids (docs/context-policy.md)."""
        return self.carries_ids and rp.round.hash_ids is None

    def record(
        self, run: UnitRun, rp: RoundPlan, scheduled_ns: int | None, now_ns: int
    ) -> RequestRecord:
        """The round's record before it is sent (later rounds are scheduled when due)."""
        rid = rp.round.request_id + (f"~{run.loop_idx}" if run.loop_idx else "")
        if run.warmup:
            rid = WARMUP_PREFIX + rid
        return RequestRecord(
            run_id=self.run_id,
            request_id=rid,
            unit_ordinal=run.plan.ordinal,
            session_id=run.plan.unit.unit_id,
            round_idx=rp.round.round_idx,
            backend=self.backend,
            policy=self.policy,
            planned_prefix_tokens=rp.prefix_len,
            planned_input_tokens=rp.input_len,
            planned_output_tokens=rp.output_len,
            folded_prefix_tokens=rp.folded_prefix_tokens,
            scheduled_ns=scheduled_ns if scheduled_ns is not None else now_ns,
            released_ns=run.released_ns if scheduled_ns is not None else now_ns,
            admitted_ns=run.admitted_ns,
            routing_slot=run.routing_slot,
            warmup=run.warmup,
        )

    def prompt(self, run: UnitRun, k: int, rp: RoundPlan, rec: RequestRecord) -> Prompt:
        """``context[:p] + fresh(i)``; a short context becomes extra fresh input (shortfall).
        With ``segments`` the same tokens as ``Segments`` (none generated)."""
        r = rp.round
        if r.hash_ids is not None:
            rec.derived_prefix = rp.prefix_len
            if self.segments:
                return self.pool.segments_from_hash_ids(
                    r.hash_ids, rp.prompt_len, self.block_size, fill_stream=run.stream
                )
            return self.pool.prompt_from_hash_ids(
                list(r.hash_ids), rp.prompt_len, self.block_size, fill_stream=run.stream
            )
        if r.reset_before:
            run.context = []
        derived = min(rp.prefix_len, len(run.context))
        rec.derived_prefix = derived
        rec.prefix_shortfall_tokens = rp.prefix_len - derived
        fresh_n = rp.input_len + rec.prefix_shortfall_tokens
        if self.segments:
            return self._segment_prompt(run, k, rp, derived, fresh_n)
        if k == 0 and self.shared_prefix and rp.folded_prefix_tokens:
            key = _shared_key(run)
            head = self.pool.shared_prefix(key, rp.folded_prefix_tokens)
            return head + self.pool.fresh(run.stream, fresh_n - len(head))
        assert isinstance(run.context, list)
        return run.context[:derived] + self.pool.fresh(run.stream, fresh_n)

    def _segment_prompt(
        self, run: UnitRun, k: int, rp: RoundPlan, derived: int, fresh_n: int
    ) -> Segments:
        """``prompt``'s session branch as ``Segments``: the same parts of the same sources."""
        pool = self.pool
        if k == 0 and self.shared_prefix and rp.folded_prefix_tokens:
            head = pool.prefix_part(_shared_key(run), rp.folded_prefix_tokens)
            return Segments([head, pool.fresh_part(run.stream, fresh_n - head[3])])
        ctx = run.context if isinstance(run.context, Segments) else Segments()
        return ctx.head(derived) + Segments([pool.fresh_part(run.stream, fresh_n)])

    def carry(self, prompt: Prompt, out_ids: list[int] | Segments | None) -> Prompt:
        """The conversation after a round: its prompt, then what the server returned."""
        if out_ids is None:
            return prompt
        if isinstance(prompt, Segments) and isinstance(out_ids, Segments):
            return prompt + out_ids
        return self.resolve(prompt) + self.resolve(out_ids)

    def guarded(self, rec: RequestRecord, prompt_len: int, output_len: int) -> bool:
        """Context guard: ``prompt + output >= max_model_len`` is skipped (one token headroom)."""
        limit = self.max_model_len
        if limit is not None and prompt_len + output_len >= limit:
            rec.status = "skipped"
            rec.error = (
                f"context guard: prompt {prompt_len} + output {output_len} >= "
                f"max_model_len {limit}; session ended"
            )
            return True
        return False

    def hashes(self, run: UnitRun, prompt: Prompt) -> list[int]:
        """Block hashes of ``prompt``, reusing the unit's last prompt's hashes for the
        full blocks the two share (a carried conversation prefix): O(new tokens)."""
        if isinstance(prompt, Segments):
            return self._segment_hashes(run, prompt)
        bs = self.block_size
        known: list[int] = []
        if run.last_hashes and isinstance(run.last_prompt, list):
            k = min(len(prompt), len(run.last_prompt)) // bs
            n = k * bs
            if k and prompt[:n] == run.last_prompt[:n]:
                known = run.last_hashes[:k]
        packed = self.pool.array_of(prompt)  # a hash-id prompt's ids, still as an array
        hashes = block_hashes(prompt if packed is None else packed, bs, known=known)
        run.last_prompt, run.last_hashes = prompt, hashes
        return hashes

    def _segment_hashes(self, run: UnitRun, prompt: Segments) -> list[int]:
        """``hashes`` of a ``Segments`` prompt, the same values: leading blocks shared with
        the unit's last prompt, then whole hash-id blocks from the memo (previous hash,
        length, hash) up to the first it lacks; the rest drawn ``_DRAW_BLOCKS`` blocks at a
        time (``TokenPool.heads_array`` or ``_draw``) and hashed in one chain."""
        bs, n = self.block_size, len(prompt)
        out: list[int] = []
        last = run.last_prompt
        if run.last_hashes and isinstance(last, Segments):
            out = run.last_hashes[: prompt.common_prefix(last) // bs]
        memo = self._memo
        if len(memo) > _MEMO_MAX:
            memo.clear()
        k = _native or _Twins  # the kernels, or their twins (``_Twins``)
        whole = k.whole_parts(prompt.parts, n, bs, BLOCK)
        nb = len(whole)
        j = k.memo_prefix(whole, len(out), memo, out[-1] if out else None, out)
        for lo in range(j, nb, _DRAW_BLOCKS):  # a chunk's arrays stay in the CPU's cache
            hi = min(lo + _DRAW_BLOCKS, nb)
            keys = [p[1] for p in whole[lo:hi] if p is not None]
            prev = out[-1] if out else None
            if len(keys) == hi - lo:  # whole hash-id blocks
                out += self.pool.chain_heads(prev, keys, bs, min(hi * bs, n) - lo * bs)
            else:
                out += chain_hashes(prev, self._draw(prompt, lo * bs, min(hi * bs, n)), bs)
        k.memo_store(whole, out, j, memo)
        run.last_prompt, run.last_hashes = prompt, out
        return out

    def _draw(self, prompt: Segments, lo: int, hi: int) -> np.ndarray:
        """Tokens ``lo .. hi-1`` of ``prompt`` as one array (the pool's parts of each run
        between engine outputs drawn in one pass): ``uint32``, as record hashing packs
        them, when they are all the pool's (in range by construction)."""
        parts = list(prompt.slices(lo, hi))
        if all(part[0] != OUTPUT for part in parts):
            return self.pool.resolve_parts_array(parts, np.uint32)
        arrays: list[np.ndarray] = []
        run: list[Part] = []
        for part in parts:
            if part[0] != OUTPUT:
                run.append(part)
                continue
            if run:
                arrays.append(self.pool.resolve_parts_array(run))
                run = []
            arrays.append(np.asarray(output_tokens(part[1], part[3], part[2]), dtype=np.int64))
        if run:
            arrays.append(self.pool.resolve_parts_array(run))
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

    def _resolve(self, kind: int, key: int, start: int, n: int) -> list[int]:
        """Token ids of a part: the pool's sources, or an engine's output (``tokenizer``)."""
        if kind == OUTPUT:
            return output_tokens(key, n, start)
        return self.pool.resolve(kind, key, start, n)

    def resolve(self, prompt: Prompt) -> list[int]:
        """The token ids of a prompt (a live replay's, for ``Segments`` ones)."""
        return prompt.tokens(self._resolve) if isinstance(prompt, Segments) else prompt


_Memo = dict[int, tuple[int | None, int, int]]
_MEMOS: dict[tuple[int, int, int, str, int], _Memo] = {}


def _hash_memo(pool: TokenPool, block_size: int) -> _Memo:
    """The hash-id block memo of ``RoundMaker._segment_hashes`` for these tokens (vocabulary,
    seed, salt) and ``block_size``: one per process, kept after the run for the next one
    over the same trace (docs/virtual-time.md, "Prompts as segments"); other tokens replace it."""
    key = (pool.vocab_lo, pool.vocab_hi, pool.seed, pool.salt, block_size)
    memo = _MEMOS.get(key)
    if memo is None:
        _MEMOS.clear()
        memo = _MEMOS[key] = {}
    return memo


def drop_hash_memos() -> None:
    """Forget the hash-id block memos (``_hash_memo``): for a process that runs no more
    replays, e.g. ``workbench simulate`` before its digest reads the records back
    (docs/virtual-time.md, "The digest streamed")."""
    _MEMOS.clear()


class _Twins:
    """The Python twins of the kernels ``whole_parts``, ``memo_prefix`` and ``memo_store``
    (workbench/kernels.c; docs/virtual-time.md, "Compiled kernels"): the record hashes'
    Python per block around ``TokenPool.chain_heads``."""

    @staticmethod
    def whole_parts(parts: tuple[Part, ...], n: int, bs: int, kind: int) -> list[Part | None]:
        """Record block index → the ``kind`` (hash-id) part that is exactly that block, of
        a prompt of ``n`` tokens (None: none is)."""
        out: list[Part | None] = [None] * -(-n // bs)
        off = 0
        for part in parts:
            m = part[3]
            if part[0] == kind and off % bs == 0 and part[2] == 0 and (
                m == bs or (0 < m < bs and off + m == n)
            ):
                out[off // bs] = part
            off += m
        return out

    @staticmethod
    def memo_prefix(whole: list[Part | None], j: int, memo: _Memo, prev: int | None,
                    out: list[int]) -> int:  # fmt: skip
        """From block ``j``, the hashes the memo holds of whole parts chained on ``prev``
        appended to ``out``; the first block it has none for."""
        while j < len(whole):
            part = whole[j]
            if part is None:
                break
            seen = memo.get(part[1])
            if seen is None or seen[0] != prev or seen[1] != part[3]:
                break
            out.append(prev := seen[2])
            j += 1
        return j

    @staticmethod
    def memo_store(whole: list[Part | None], out: list[int], j: int, memo: _Memo) -> None:
        """The memo's entry (previous hash, length, hash) of each whole part from ``j``."""
        prev = out[j - 1] if j else None
        for part, h in zip(whole[j:], out[j:], strict=True):
            if part is not None:
                memo[part[1]] = (prev, part[3], h)
            prev = h


def _shared_key(run: UnitRun) -> str:
    meta = run.plan.unit.meta
    return "|".join(str(meta.get(k, "")) for k in ("provider", "model", "project"))
