"""Virtual time sends prompts as ``Segments`` (issue 28, docs/virtual-time.md "Prompts
as segments"): the same tokens, the same cache hits, the same records as token ids.

Three checks on the bundled traces: (1) every ``Segments`` prompt a virtual run hands
the engine resolves to exactly the ids a token-id run sends; (2) a virtual run with
prompts as parts and one with token ids give equal records (the engine's block hashes
from parts find the same prefixes); (3) a live replay against the embedded engine over
HTTP and a virtual replay of the same plan have the same planned, sent and cached
tokens per request.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

import workbench.executors.virtual as virtual
import workbench.replay.engine_target as engine_target
from workbench.context.hashing import block_hashes
from workbench.context.tokens import TokenPool
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.replay.rounds import RoundMaker
from workbench.segments import OUTPUT, UNIT, Segments
from workbench.sim.server import serve_sim

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))
SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
CASES = [  # (trace, max_items, context policy)
    (MOONCAKE, 120, None),
    (SESSIONS, None, None),
    (SESSIONS, None, "prefix-preserving"),
]


def _cfg(trace: str, max_items: int | None, policy: str | None, **extra: object) -> dict:
    cfg: dict = {"trace": {"path": trace, "max_items": max_items},
                 "arrival": {"mode": "saturated", "max_concurrency": 1, "tool_wait_scale": 0.01}}
    if policy:
        cfg["context"] = policy
    cfg.update(extra)
    return cfg


class _Recording(engine_target.EngineSender):
    """The virtual sender, keeping each request's prompt (ids, or parts resolved)."""

    sent: ClassVar[dict[str, list[int]]] = {}
    maker: ClassVar[RoundMaker | None] = None

    async def send(self, codec, req, rec):  # type: ignore[no-untyped-def]
        if req.segments is not None:
            assert not req.prompt_ids  # parts go to the engine, no ids are drawn
            assert self.maker is not None
            _Recording.sent[req.request_id] = self.maker.resolve(req.segments)
        else:
            _Recording.sent[req.request_id] = list(req.prompt_ids)
        return await super().send(codec, req, rec)


def _run(monkeypatch: pytest.MonkeyPatch, cfg: dict, *, parts: bool) -> tuple[dict, list]:
    monkeypatch.setattr(_Recording, "takes_segments", parts)
    monkeypatch.setattr(_Recording, "sent", {})
    monkeypatch.setattr(_Recording, "maker", RoundMaker(
        run_id="t", backend="openai", policy=None, pool=TokenPool(), block_size=16,
        shared_prefix=False, max_model_len=None))  # fmt: skip
    monkeypatch.setattr(engine_target, "EngineSender", _Recording)
    result = virtual.simulate(cfg)
    return dict(_Recording.sent), result.records


@pytest.mark.parametrize(("trace", "max_items", "policy"), CASES)
def test_parts_resolve_to_the_token_ids_and_give_the_same_records(
    monkeypatch: pytest.MonkeyPatch, trace: str, max_items: int | None, policy: str | None
) -> None:
    cfg = _cfg(trace, max_items, policy, arrival={"mode": "trace-timed"})
    sent_ids, recs_ids = _run(monkeypatch, cfg, parts=False)
    sent_parts, recs_parts = _run(monkeypatch, cfg, parts=True)
    assert sent_parts.keys() == sent_ids.keys() and sent_ids
    for rid, ids in sent_ids.items():
        assert sent_parts[rid] == ids, rid
    # every field of every record, token times and the record block hashes included
    assert [r.to_dict() for r in recs_parts] == [
        {**r.to_dict(), "run_id": recs_parts[0].run_id} for r in recs_ids
    ]
    assert sum(r.cached_tokens or 0 for r in recs_parts) > 0  # the cache was exercised


@pytest.mark.parametrize(("trace", "max_items", "policy"),
                         [(MOONCAKE, 30, None), *CASES[1:]])  # fmt: skip
async def test_live_and_virtual_runs_plan_send_and_cache_the_same_tokens(
    trace: str, max_items: int | None, policy: str | None
) -> None:
    """One request at a time (so every earlier request's blocks are committed before the
    next is admitted, on the wall clock as in virtual time): per request the planned,
    sent and cached tokens of a live replay through HTTP equal a virtual replay's."""
    async with serve_sim(speedup=1000.0) as sim:
        cfg = _cfg(trace, max_items, policy, target=sim.base_url, backend="vllm-tokens")
        async with asyncio.timeout(300):
            live = await run_async(cfg)
    virt = await asyncio.to_thread(virtual.simulate, cfg, engine={"speedup": 1000.0})
    rows = {}
    for label, result in (("live", live), ("virtual", virt)):
        for r in result.records:
            assert r.status == "ok", (label, r.request_id, r.error)
            rows.setdefault(r.request_id, {})[label] = (
                r.planned_prefix_tokens, r.planned_input_tokens, r.planned_output_tokens,
                r.sent_prompt_tokens, r.prompt_tokens, r.cached_tokens,
                r.completion_tokens, r.extra.get("input_sequence_hashes"))
    assert len(rows) == len(live.records) > 0
    for rid, both in rows.items():
        assert both["live"] == both["virtual"], (trace, policy, rid)
    assert sum(r.cached_tokens or 0 for r in virt.records) > 0


def test_block_keys_match_token_hashes_exactly_where_tokens_are_equal() -> None:
    """The engine's keys from parts are equal exactly where chained token hashes are,
    for prompts built as a conversation grows (carried prefixes, cut outputs)."""
    pool = TokenPool()
    resolve = RoundMaker(run_id="t", backend="openai", policy=None, pool=pool, block_size=16,
                         shared_prefix=False, max_model_len=None).resolve
    a = Segments([pool.fresh_part("s", 40)])
    out = Segments([(OUTPUT, 7, 0, 25)])
    b = (a + out).head(50) + Segments([pool.fresh_part("s", 30)])
    c = a + Segments([(OUTPUT, 7, 0, 30)]) + Segments([(UNIT, a.parts[0][1], 999, 3)])
    d = Segments([pool.fresh_part("t", 90)])
    prompts = [a, b, c, d, a.head(33), b.head(70)]
    for bs in (1, 4, 16):
        for x in prompts:
            for y in prompts:
                kx, ky = x.block_keys(bs), y.block_keys(bs)
                hx, hy = block_hashes(resolve(x), bs), block_hashes(resolve(y), bs)
                n = min(len(kx), len(ky))
                same_keys = [kx[i] == ky[i] for i in range(n)]
                same_tokens = [hx[i] == hy[i] for i in range(n)]
                assert same_keys == same_tokens, (bs, x, y)
    key = a.parts[0][1]  # normal form: a stream continued is one part
    assert a + Segments([(UNIT, key, 40, 10)]) == Segments([(UNIT, key, 0, 50)])
    assert len(b) == 80 and b.common_prefix(a + out) == 50


def test_streamed_scale_path_writes_what_a_kept_run_holds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """bench/bench_scale.py's path at small scale: a synthetic agentic trace on a
    prefix-aware cluster, prompts as parts, records straight to disk (none in memory):
    the records on disk are the records a run that keeps them holds, and the
    conversations hit the cache."""
    import dataclasses

    import numpy as np

    from workbench.storage.rundir import load_records
    from workbench.workloads.synthetic import parse_synthetic, synthetic_workload

    trace = tmp_path / "synthetic.jsonl"
    trace.write_text("")
    spec = parse_synthetic("synthetic:sessions=24,rounds=uniform:2..6,input=lognormal:300,0.8,"
                           "output=fixed:20,tool_wait=uniform:10..500")
    workload = dataclasses.replace(
        synthetic_workload(spec, np.random.default_rng(1)), source=str(trace))
    engine = {"workers": 4, "router": "prefix-aware"}

    def cfg(keep: bool, name: str) -> dict:
        return {"trace": {"path": str(trace)}, "out_dir": str(tmp_path), "run_id": name,
                "arrival": {"mode": "saturated", "max_concurrency": 8},
                "executor": {"keep_records": keep, "block_hashes": False}}

    streamed = virtual.simulate(cfg(False, "streamed"), engine=engine, workload=workload)
    kept = virtual.simulate(cfg(True, "kept"), engine=engine, workload=workload)
    assert streamed.records == [] and streamed.manifest.records_kept is False
    on_disk = load_records(tmp_path / "streamed")
    assert len(on_disk) == workload.n_rounds == len(kept.records)
    strip = lambda r: {**r.to_dict(), "run_id": None}  # noqa: E731
    assert sorted(map(strip, on_disk), key=lambda d: d["request_id"]) == sorted(
        map(strip, kept.records), key=lambda d: d["request_id"])
    assert sum(r.cached_tokens or 0 for r in on_disk) > 0


@pytest.mark.parametrize("compiled", [True, False])
def test_record_hashes_of_parts_equal_hashes_of_their_tokens(monkeypatch, compiled) -> None:  # type: ignore[no-untyped-def]
    """``RoundMaker.hashes`` of ``Segments`` prompts (the memo of hash-id blocks' chains,
    runs of new whole blocks hashed in one call, the general draw a few blocks at a time
    for other parts) gives exactly ``block_hashes`` of the resolved tokens: repeated and
    reordered hash ids (the memo hit, missed on another parent or length, refilled), a
    cut last block, an unhashed fill, a carried conversation with an engine output, whole
    hash-id blocks after other parts, salted or not; compiled kernels or their twins."""
    import workbench.context.hashing as hashing
    import workbench.context.tokens as tokens
    import workbench.replay.rounds as rounds
    from workbench.replay.rounds import UnitRun

    if not compiled:
        monkeypatch.setattr(tokens, "_kernels", None)
        monkeypatch.setattr(hashing, "_kernels", None)
    monkeypatch.setattr(rounds, "_DRAW_BLOCKS", 2)
    monkeypatch.setattr(rounds, "_MEMOS", {})  # the misses too: no earlier test's memo
    for salt in ("", "run-3"):
        pool = TokenPool(salt=salt)
        maker = RoundMaker(run_id="t", backend="openai", policy=None, pool=pool, block_size=16,
                           shared_prefix=False, max_model_len=None)
        run = UnitRun(None, 0, 0, 0, 0)  # type: ignore[arg-type]  # (no plan needed)
        rows = [([1, 2, 3, 4, 5], 80), ([1, 2, 3, 4, 5, 6, 7], 100), ([1, 2, 3], 40),
                ([9, 2, 3], 48), ([1, 2, 3, 4, 5, 6, 7], 112), ([1, 2], 40), ([8], 16),
                ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 150)]
        for ids, n in rows:
            seg = pool.segments_from_hash_ids(ids, n, 16, fill_stream="f")
            assert maker.hashes(run, seg) == block_hashes(maker.resolve(seg), 16), (ids, n)
        grown = seg + Segments([(OUTPUT, 5, 0, 20)]) + Segments([pool.fresh_part("f", 7)])
        mixed = (Segments([pool.fresh_part("g", 48)])
                 + pool.segments_from_hash_ids([11, 12, 13], 48, 16)
                 + Segments([(OUTPUT, 5, 0, 16)]) + pool.segments_from_hash_ids([14, 15], 30, 16))
        for prompt in (grown, grown.head(170), Segments([pool.fresh_part("h", 50)])):
            assert maker.hashes(run, prompt) == block_hashes(maker.resolve(prompt), 16)
        for prompt in (mixed, mixed.head(100), mixed):
            run.last_hashes = []  # no shared head: each block's own path (the memo's last)
            assert maker.hashes(run, prompt) == block_hashes(maker.resolve(prompt), 16)


def test_a_processs_runs_over_the_same_tokens_share_the_record_hash_memo(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A sweep's next point over the same trace (another rate) draws no hash-id block's
    tokens: its record hashes come from the memo the first run left, and equal them. A
    run drawing other tokens (another seed) starts its own memo: its hashes equal those
    of a run in a fresh process, never the first memo's."""
    import workbench.replay.rounds as rounds

    def hashes(records: list) -> dict[str, list[int]]:
        return {r.request_id: r.extra["input_sequence_hashes"] for r in records}

    monkeypatch.setattr(rounds, "_MEMOS", {})
    cfg = _cfg(MOONCAKE, 60, None)
    first = hashes(virtual.simulate(cfg).records)
    drawn: list[int] = []
    real = TokenPool.chain_heads

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append(1)
        return real(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(TokenPool, "chain_heads", counted)
        again = hashes(virtual.simulate({**cfg, "arrival": {"rate": 3.0}}).records)
    assert not drawn and again == first and len(first) == 60
    reseeded = hashes(virtual.simulate({**cfg, "seed": 7}).records)
    monkeypatch.setattr(rounds, "_MEMOS", {})  # as in a fresh process
    assert hashes(virtual.simulate({**cfg, "seed": 7}).records) == reseeded
    assert all(reseeded[k] != v for k, v in first.items())


def test_heads_array_equals_the_parts_drawn_one_by_one() -> None:
    """``TokenPool.heads_array`` (hash-id blocks as one grid) gives the tokens of each
    source's first ``width`` positions, cut to ``n``, on any vocabulary range."""
    import numpy as np

    from workbench.segments import BLOCK

    for kw in ({}, {"salt": "x"}, {"vocab_lo": 5, "vocab_hi": 2**32 - 1, "seed": 3}):
        pool = TokenPool(**kw)  # type: ignore[arg-type]
        keys = [2**64 - 1, 0, 12345 << 32 | 99, 2**63 + 7]
        for width, n in ((16, 64), (16, 50), (1, 3), (512, 1537)):
            ks = keys[: -(-n // width)]
            want = np.concatenate([pool.resolve_array(BLOCK, k, 0, width) for k in ks])[:n]
            for dtype in (np.int64, np.uint32):
                got = pool.heads_array(ks, width, n, dtype)
                assert got.dtype == dtype and np.array_equal(got, want)
