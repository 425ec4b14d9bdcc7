"""The engine with its compiled parts and with their Python twins (``WORKBENCH_COMPILED=0``)
makes the same decisions step by step and the same records (issue 44; docs/virtual-time.md,
"Compiled kernels" and "The implicit decoders' events compiled"). The switch is read at
import, so the twin runs in a child process with the variable set, exactly as a user sets
it, and both sides print what they saw."""

from __future__ import annotations

import dataclasses
import json
import random
from array import array
from typing import Any

import pytest

from tests.twin import in_child
from workbench.kernels import compiled, native
from workbench.segments import BLOCK, OUTPUT, UNIT, BlockKeyer, Segments
from workbench.sim import decoders, kvindex
from workbench.sim.config import EngineConfig
from workbench.sim.scheduler import Scheduler

CASES: dict[str, dict[str, Any]] = {
    "roomy": {"num_blocks": 4000},
    "preempting": {"num_blocks": 80, "max_num_seqs": 24, "max_num_batched_tokens": 512},
    "budget-below-seqs": {"num_blocks": 500, "max_num_seqs": 40, "max_num_batched_tokens": 30},
    "no-prefix-cache": {"num_blocks": 800, "enable_prefix_caching": False},
    "host-tier": {"num_blocks": 120, "host_kv_gb": 0.5, "host_kv_gbps": 20.0},
}


def prompt(rng: random.Random, i: int) -> Segments:
    """Leading hash-id blocks shared with other prompts, then the request's own tokens."""
    parts = [(BLOCK, k, 0, 16) for k in range(rng.randrange(0, 12))]
    parts.append((UNIT, i, 0, rng.randrange(1, 300)))
    return Segments(parts)


def _ids(rng: random.Random, i: int) -> list[int]:
    """``prompt`` as token ids: its keys hashed from the tokens, output blocks as they fill
    (``Sequence.ensure_hashes``), not keyed from parts."""
    ids = [t for k in range(rng.randrange(0, 12)) for t in range(16 * k, 16 * k + 16)]
    return ids + [1000 + 7 * i + j for j in range(rng.randrange(1, 300))]


def drive(knobs: dict[str, Any], seed: int, ids: bool = False, implicit: bool = True, *,
          watch_at: int = -1, abort_at: int = -1) -> dict[str, Any]:
    """Requests arriving over the first steps, stepped to the end as ``Engine`` steps them:
    each step's plan (who, how many tokens, the cost inputs) and the cache after it, every
    request's outcome, the counters and the cache's end state. ``ids``: prompts as token
    ids; ``implicit``: the scheduler's implicit decode (``Scheduler(implicit=...)``); at
    step ``watch_at`` a stream starts on a running request, at ``abort_at`` a client goes
    away (``events`` says which request, if one was running)."""
    rng = random.Random(seed)
    sched = Scheduler(EngineConfig(**knobs), implicit=implicit)
    arrivals = sorted((rng.randrange(0, 300), i) for i in range(70))
    seqs = []
    steps: list[list[Any]] = []
    events: list[tuple[int, str, str]] = []
    t = step = 0
    while (arrivals or sched.has_work()) and step < 100_000:
        while arrivals and arrivals[0][0] <= step:
            _, i = arrivals.pop(0)
            tokens = _ids(rng, i) if ids else prompt(rng, i)
            seq = sched.new_sequence(f"r{i}", tokens, rng.randrange(1, 90), t)
            sched.add(seq)
            seqs.append(seq)
        plan = sched.schedule()
        while not (plan.scheduled or plan.implicit) and plan.preempted and sched.has_work():
            plan = sched.schedule()
        if plan.scheduled or plan.implicit:
            if step == watch_at and sched.running:  # a stream starts mid-step
                watched = sched.running[len(sched.running) // 2]
                sched.watch(watched)
                events.append((step, "watch", watched.request_id))
            if step == abort_at and sched.running:  # a client goes away mid-step
                events.append((step, "abort", sched.running[0].request_id))
                sched.abort(sched.running[0], t)
            t += 1000 + plan.kv_tokens % 97
            steps.append([[(s.request_id, s.step_tokens) for s in plan.scheduled],
                          plan.implicit, plan.prefill_tokens, plan.decode_seqs, plan.kv_tokens,
                          plan.preempted, plan.prefill_attn, plan.host_load_tokens])  # fmt: skip
            sched.complete(plan, t)
            kv = sched.kv
            steps[-1] += [kv.num_free, kv.num_active, kv.evictions, kv.cached_blocks()]
        step += 1
    assert not sched.has_work()
    return {
        "steps": steps,
        "requests": [(s.request_id, s.token_ns, s.cached_tokens, s.host_tokens, s.preemptions,
                      s.finish_ns, s.finish_reason, s.num_out) for s in seqs],
        "counters": dataclasses.asdict(sched.counters),
        "kv": (sorted(sched.kv.index().items()), sched.kv.lru_order()),
        "events": events,
    }


def _in_child(expr: str, compiled: bool) -> Any:
    """``expr`` evaluated in a fresh interpreter that imported this file, as JSON."""
    return in_child(__file__, expr, compiled)


def test_the_compiled_parts_are_built_here() -> None:
    # else both sides below would run the twins and compare nothing
    assert native is not None and kvindex.COMPILED and decoders.COMPILED


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_and_python_engines_decide_every_step_alike(name: str) -> None:
    here = json.loads(json.dumps(drive(CASES[name], 7)))
    assert here == _in_child(f"drive({CASES[name]!r}, 7)", compiled=False)
    assert len(here["steps"]) > 50


@pytest.mark.parametrize("name", ["roomy", "preempting"])
def test_compiled_and_python_engines_alike_on_token_id_prompts(name: str) -> None:
    here = json.loads(json.dumps(drive(CASES[name], 5, ids=True)))
    assert here == _in_child(f"drive({CASES[name]!r}, 5, ids=True)", compiled=False)
    assert any(s[0] == [] and s[1] for s in here["steps"])  # implicit-only steps


def test_the_cases_reach_preemption_eviction_and_the_host_tier() -> None:
    runs = {name: drive(knobs, 7) for name, knobs in CASES.items()}
    assert runs["preempting"]["counters"]["preemptions"] > 0
    assert any(s[10] for s in runs["preempting"]["steps"])  # evictions
    assert any(s[7] for s in runs["host-tier"]["steps"])  # KV brought back from the host


def digest(case: str) -> str:
    """A ``bench/digest_matrix.py`` case's canonical digest (the whole replay, records
    included), run here."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "digest_matrix.py"
    spec = importlib.util.spec_from_file_location("digest_matrix", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    line: str = mod.run(case)
    return line.split()[1]


# preemption, a prefix-aware and a round-robin cluster, disaggregation, attention-DP ranks,
# the host tier, SGLang's batches, the idle wake: the paths of the mypyc-compiled step loop
# (the engine's planning, spans and step ends among them) as well
@pytest.mark.parametrize("case", ["moon-tight", "moon-cluster-pa", "moon-cluster-rr",
                                  "moon-disagg", "moon-dp", "moon-host", "moon-sglang",
                                  "moon-wake"])
def test_compiled_and_python_replays_give_the_same_canonical_digest(case: str) -> None:
    assert digest(case) == _in_child(f"digest({case!r})", compiled=False)


def engine_runs(seed: int) -> dict[str, Any]:
    """An engine and a 3-worker prefix-aware cluster in virtual time through ``Engine``'s
    own paths: spans planned, caught up by stats and a router's reads, cut by submits and
    aborts, streams woken step by step (tests/sim/test_sim_implicit_decode.py's runs), with
    the engines' counts of real steps and of span applications that moved blocks."""
    from tests.sim.test_sim_implicit_decode import _cluster_run, _engine_run

    one = _engine_run(True, True, EngineConfig(num_blocks=90, max_num_seqs=8), seed)
    cluster, steps, moved = _cluster_run(True, True, {"num_blocks": 160, "max_num_seqs": 6},
                                         seed)  # fmt: skip
    return json.loads(json.dumps({"engine": one, "cluster": cluster, "steps": steps,
                                  "moved": moved}))  # fmt: skip


def test_compiled_and_python_engines_run_spans_streams_and_aborts_alike() -> None:
    here = engine_runs(3)
    assert here == _in_child("engine_runs(3)", compiled=False)
    cluster = here["cluster"]
    assert here["moved"] > 0 and here["steps"] < cluster["stats"]["steps"]  # spans ran
    assert any(r[3] == "abort" for r in cluster["requests"].values())


def _decoder_ops(seed: int) -> list[Any]:
    """A random run of ``Decoders`` calls as the scheduler makes them (decoders joining
    and leaving, grows taken and assigned, fills applied step after step), each answer
    recorded; run on the compiled ``Decoders`` here and on ``PyDecoders`` in the child."""
    from workbench.sim.decoders import new_decoders

    rng, bs = random.Random(seed), 16
    dec = new_decoders(bs)
    live: dict[int, Any] = {}
    out: list[Any] = []
    rank = next_block = 0
    for tick in range(3000):
        k = dec.grow_due(tick)
        got = array("q", range(next_block, next_block + k + 2))
        next_block += k + 2
        dec.assign(got, 1, k)
        fb, fh = bytearray(), bytearray()
        done = dec.fill(tick, fb, fh)
        out.append([tick, k, fb.hex(), fh.hex(), [s.request_id for s in done],
                    dec.next_grow(), dec.next_fill()])  # fmt: skip
        for seq in done:
            out.append(["left", seq.request_id, dec.remove(live.pop(seq.request_id))])
        if live and rng.random() < 0.03:  # an abort, or a watch flushing one
            rid = rng.choice(sorted(live))
            out.append(["removed", rid, dec.remove(live.pop(rid))])
        if rng.random() < 0.005:
            for rid in sorted(live):
                dec.remove(live.pop(rid))
            dec.clear()
        if rng.random() < 0.3:  # a request turns implicit after step ``tick``
            computed = rng.randrange(1, 400)
            left = rng.randrange(1, 120)
            cap = -(-computed // bs) * bs + bs * rng.randrange(0, 2)
            seq = Scheduler(EngineConfig()).new_sequence(f"q{rank}", [1] * computed, left, 0)
            seq.blocks = array("q", range(10**6 + 1000 * rank, 10**6 + 1000 * rank + cap // bs))
            seq.hashes = array("q", [rng.randrange(1 << 62) for _ in range(cap // bs)])
            committed = computed // bs
            live[seq.request_id] = dec.add(seq, seq.blocks, seq.hashes, rank,
                                           computed - (tick + 1), tick + left,
                                           (committed + 1) * bs, committed, cap)  # fmt: skip
            rank += 1
    return out


def test_compiled_and_python_decoders_answer_every_call_alike() -> None:
    here = json.loads(json.dumps(_decoder_ops(11)))
    assert here == _in_child("_decoder_ops(11)", compiled=False)
    assert sum(1 for row in here if row[0] == "left") > 100


def test_block_keyer_extends_an_int64_array_with_the_keys_upto_returns() -> None:
    rng = random.Random(3)
    for _ in range(200):
        parts = [(rng.choice([UNIT, BLOCK, OUTPUT]), rng.randrange(1 << 63), rng.randrange(99),
                  rng.randrange(1, 90)) for _ in range(rng.randrange(1, 7))]  # fmt: skip
        seg, bs = Segments(parts), rng.randrange(1, 40)
        stops = [*sorted(rng.randrange(len(seg) + 1) for _ in range(5)), len(seg)]
        a, b, out = BlockKeyer(seg, bs), BlockKeyer(seg, bs), array("q")
        want: list[int] = []
        for stop in stops:
            want += a.upto(stop)
            b.extend(out, stop)
            assert out.tolist() == want
        assert want == seg.block_keys(bs)


def test_decoders_holding_requests_in_a_cycle_are_collected() -> None:
    """A slot holds its sequence, and a sequence may reach back to the decoders (handle,
    engine, scheduler): the cyclic GC must see through the compiled object too."""
    import gc
    import weakref

    from workbench.sim.decoders import new_decoders

    class Holder:
        dec: Any = None

    dec, held = new_decoders(16), Holder()
    held.dec = dec
    ref = weakref.ref(held)
    dec.add(held, array("q", [1]), array("q", [2]), 0, 0, 100, 16, 0, 16)
    del dec, held
    gc.collect()
    assert ref() is None


def retried_hits(knobs: dict[str, Any], seed: int) -> dict[str, int]:
    """``drive`` with the hits a blocked waiting head is retried from (last step's memo)
    and the own hits preempted requests keep counted by type: the retried checks read them
    as int64 arrays, compiled and in the twins alike (docs/virtual-time.md, "Per-block
    costs")."""
    kinds: dict[str, int] = {}
    head_hit, preempt = Scheduler._head_hit, Scheduler._preempt

    def count(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    def retried(self: Scheduler, seq: Any) -> Any:
        memo = self._memo
        if memo is not None and memo.seq is seq:
            count("retried " + type(memo.hit).__name__)
        return head_hit(self, seq)

    def preempted(self: Scheduler, seq: Any) -> None:
        preempt(self, seq)
        if seq.routed is not None:
            count("preempted " + type(seq.routed[0]).__name__)

    Scheduler._head_hit = retried  # type: ignore[method-assign]
    Scheduler._preempt = preempted  # type: ignore[method-assign]
    try:
        drive(knobs, seed)
    finally:
        Scheduler._head_hit = head_hit  # type: ignore[method-assign]
        Scheduler._preempt = preempt  # type: ignore[method-assign]
    return kinds


def test_blocked_heads_and_preempted_requests_keep_their_hits_as_int64_arrays() -> None:
    # counted by patching Scheduler's methods: the mypyc-compiled Scheduler calls its own
    # methods natively and never sees a patch, so the count is of the Python scheduler, in
    # the twin, and here too with the C kernels where the set is not compiled
    twin = _in_child(f"retried_hits({CASES['preempting']!r}, 7)", compiled=False)
    assert set(twin) == {"retried array", "preempted array"}
    assert min(twin.values()) > 10
    if not compiled():
        assert retried_hits(CASES["preempting"], 7) == twin
