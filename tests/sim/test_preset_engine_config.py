"""Replaying a published table with the engine it ran on (docs/hardware.md, "The engine a
table ran on"): whole-prompt scheduling (TensorRT-LLM without chunked context), a table's
``# engine_config:`` knobs, per-row lengths and the fit's partial exclusions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import workbench.sim.presets as presets
from workbench.errors import ConfigError
from workbench.sim.config import EngineConfig
from workbench.sim.presets import fit
from workbench.sim.presets.bench import burst
from workbench.sim.presets.tables import load_tables
from workbench.sim.scheduler import Scheduler


def _first_step(chunked: bool, prompts: list[int]) -> list[int]:
    """The prompt tokens each request gets in the first step of an idle engine."""
    sched = Scheduler(EngineConfig(enable_chunked_prefill=chunked))
    seqs = [sched.new_sequence(f"r{i}", list(range(i * 100_000, i * 100_000 + n)), 4, 0)
            for i, n in enumerate(prompts)]
    for seq in seqs:
        sched.add(seq)
    plan = sched.schedule()
    return [seq.step_tokens if seq in plan.scheduled else 0 for seq in seqs]


def test_whole_prompts_wait_for_a_step_with_room_instead_of_being_chunked() -> None:
    # vLLM (the default) fills the 8,192-token budget, chunking the third prompt
    assert _first_step(True, [3000, 3000, 3000]) == [3000, 3000, 2192]
    # without chunking the third waits whole for the next step (TensorRT-LLM's default)
    assert _first_step(False, [3000, 3000, 3000]) == [3000, 3000, 0]
    # a prompt longer than the whole budget runs alone, whole, in one step
    assert _first_step(False, [20_000, 100]) == [20_000, 0]
    assert _first_step(True, [20_000, 100]) == [8192, 0]
    with pytest.raises(ConfigError, match=r"target\.engine\.enable_chunked_prefill: expected "
                                          r"true or false, got 'no'"):
        EngineConfig(enable_chunked_prefill="no")  # type: ignore[arg-type]


def _table(tmp_path: Path, meta: str, body: str) -> fit.Table:
    (tmp_path / "t.tsv").write_text(f"# source: https://example.org/t\n# read: 2026-12-02\n"
                                    f"{meta}{body}", encoding="utf-8")
    (table,) = load_tables(tmp_path)
    return table


def _with_switch(tmp_path: Path, meta: str, rows: str, line: str, value: str,
                 switch: str) -> tuple[fit.Table, fit.Table]:
    """The table of ``meta`` and ``rows``, and the same with ``# line: value``: the
    switch off in the first, on (and alone) in the second."""
    off = _table(tmp_path, meta, rows)
    on = dataclasses.replace(off, meta={**off.meta, line: value})
    assert not getattr(off, switch) and getattr(on, switch)
    assert on.switches == {switch: 1.0} and off.switches == {}
    return off, on


def test_a_table_replays_with_its_engine_config_and_per_row_lengths(tmp_path: Path) -> None:
    meta = ("# kind: closed_loop\n# preset: llama-3.1-8b/h100/tp1\n"
            "# engine_config: enable_chunked_prefill=false max_num_batched_tokens=16384\n"
            "# fit_exclude: ttft_ms above 1 client: a reason in words\n")
    body = "concurrency\tisl\tosl\tttft_ms\titl_ms\n1\t128\t64\t20\t8\n2\t2048\t64\t90\t8\n"
    table = _table(tmp_path, meta, body)
    assert table.engine_knobs == {"enable_chunked_prefill": False,
                                  "max_num_batched_tokens": 16384}
    rows = fit.table_errors(table)
    # the lengths come from each row; a column the table lacks is not compared
    assert [(r.key, r.metric) for r in rows] == [
        ("1x128/64", "ttft_ms"), ("1x128/64", "itl_ms"),
        ("2x2048/64", "ttft_ms"), ("2x2048/64", "itl_ms")]
    ttft = {r.key: r.simulated for r in rows if r.metric == "ttft_ms"}
    assert ttft["2x2048/64"] > ttft["1x128/64"] > 0  # the longer prompts take longer
    # the fit leaves out only the TTFT measured with more than one client
    quick = fit.table_errors(table, quick=True)
    assert [(r.key, r.metric) for r in quick] == [
        ("1x128/64", "ttft_ms"), ("1x128/64", "itl_ms"), ("2x2048/64", "itl_ms")]


def test_a_bad_engine_config_pair_is_refused_by_table_and_pair(tmp_path: Path) -> None:
    meta = "# kind: closed_loop\n# preset: llama-3.1-8b/h100/tp1\n# engine_config: chunked\n"
    table = _table(tmp_path, meta, "concurrency\tisl\tosl\titl_ms\n1\t8\t8\t8\n")
    with pytest.raises(ValueError, match=r"t: '# engine_config:' expects knob=value pairs, "
                                         r"got 'chunked'"):
        _ = table.engine_knobs
    unknown = dataclasses.replace(table, meta={**table.meta, "engine_config": "chunks=1"})
    with pytest.raises(ValueError,
                       match=r"t: '# engine_config:' unknown engine knob \['chunks'\]"):
        fit.table_errors(unknown)


def test_the_in_flight_tensorrt_llm_tables_replay_whole_prompts() -> None:
    """Every table measured on TensorRT-LLM's in-flight batching (NIM's TensorRT-LLM
    backend, ``trtllm-bench``) replays without chunked prefill, its default; every
    table's knobs make a valid engine with its presets."""
    trt = 0
    for table in load_tables():
        knobs = table.engine_knobs
        engine = table.meta.get("engine", "")
        if "backend tensorrtllm" in engine or "trtllm-bench" in engine:
            trt += 1
            assert knobs["scheduler"] == "trtllm", table.name
            assert EngineConfig.from_knobs(**knobs).enable_chunked_prefill is False
        for preset in table.presets:
            EngineConfig.from_knobs(preset=preset, **knobs)
    assert trt >= 8


def test_one_registered_knob_picks_an_engines_scheduling() -> None:
    """``scheduler=NAME`` (``presets.schedulers``) lays the engine's knobs under the
    caller's own; an unknown name is refused naming the registered ones; every table's
    scheduler is registered."""
    from workbench.sim.presets.schedulers import SCHEDULERS, WHOLE_BATCH_TOKENS

    assert EngineConfig.from_knobs(scheduler="vllm") == EngineConfig()
    trt = EngineConfig.from_knobs(scheduler="trtllm")
    assert not trt.enable_chunked_prefill and trt.max_num_batched_tokens == 8192
    own = EngineConfig.from_knobs(scheduler="trtllm", max_num_batched_tokens=2048)
    assert own.max_num_batched_tokens == 2048 and not own.enable_chunked_prefill
    static = EngineConfig.from_knobs(scheduler="trtllm-static")
    assert static.max_num_batched_tokens == WHOLE_BATCH_TOKENS
    with pytest.raises(ValueError, match=r"unknown scheduler .lmdeploy.*sglang.*trtllm-static"):
        EngineConfig.from_knobs(scheduler="lmdeploy")
    for table in load_tables():
        name = table.meta.get("scheduler")
        assert name is None or name in SCHEDULERS, table.name


def test_a_static_batch_prefills_the_whole_batch_in_one_pass() -> None:
    """TensorRT-LLM's static-batch benchmark: every context of the batch in the first
    step, so every request's first token comes together; in-flight batching with an
    8,192-token budget spreads them over several steps."""

    preset = "llama-3.1-8b/h100/tp1"
    static = burst(EngineConfig.from_knobs(preset=preset, scheduler="trtllm-static"),
                   16, 2048, 8)
    flight = burst(EngineConfig.from_knobs(preset=preset, scheduler="trtllm"), 16, 2048, 8)
    # 16 × 2,048 = 32,768 prompt tokens: one pass, against four 8,192-token steps
    assert static.ttft_ms > 0 and flight.ttft_ms < static.ttft_ms
    one = Scheduler(EngineConfig.from_knobs(scheduler="trtllm-static"))
    seqs = [one.new_sequence(f"r{i}", list(range(i * 100_000, i * 100_000 + 2048)), 4, 0)
            for i in range(16)]
    for seq in seqs:
        one.add(seq)
    plan = one.schedule()
    assert all(seq in plan.scheduled and seq.step_tokens == 2048 for seq in seqs)


def test_a_table_of_an_engine_with_unsplit_decode_attention_replays_with_it(
        tmp_path: Path) -> None:
    """``# decode_attention: unsplit`` replays the table with the switch on (the shipped
    factors keep it off); ``# requests: N`` measures N requests a row; a value either
    line cannot read is refused naming the table and the line."""
    rows = "concurrency\tisl\tosl\titl_ms\n1\t4000\t32\t10\n"
    meta = "# kind: closed_loop\n# preset: llama-3.1-70b/h100/tp8\n# requests: 2\n"
    split, unsplit = _with_switch(tmp_path, meta, rows, "decode_attention", "unsplit",
                                  "unsplit_attention")
    assert split.measured_requests() == 2 and not presets.FACTORS.unsplit_attention
    shared = dataclasses.replace(presets.FACTORS, attn_block_share=0.017)
    with fit.using(shared):
        (a,), (b,) = fit.table_errors(split), fit.table_errors(unsplit)
        p = presets.resolve("llama-3.1-70b/h100/tp8")
    on = dataclasses.replace(shared, unsplit_attention=1.0)
    unsplit_step = presets.Preset(p.model, p.gpu, p.tp, p.fp8, on).step_ms(0, 1, 4016)
    gap = unsplit_step - p.step_ms(0, 1, 4016)  # a decode step mid-way through the output
    assert b.simulated - a.simulated == pytest.approx(gap, rel=0.02) and gap > 1.0
    bad = dataclasses.replace(split, meta={**split.meta, "decode_attention": "maybe"})
    with pytest.raises(ValueError, match=r"t: '# decode_attention:' must be split or unsplit"):
        fit.table_errors(bad)
    bad = dataclasses.replace(split, meta={**split.meta, "requests": "two"})
    with pytest.raises(ValueError, match=r"t: '# requests:' must be a whole number"):
        fit.table_errors(bad)


def test_a_table_of_a_collapsed_moe_router_replays_with_it(tmp_path: Path) -> None:
    """``# moe_routing: collapsed`` replays the table with ``collapsed_routing`` on (the
    shipped factors keep it off): a static batch of 16 Mixtral decodes reads two experts a
    step, not nearly all eight, so the batch's latency drops by exactly those steps'
    expert reads; a value the line cannot read is refused naming the table and the line."""
    rows = "preset\tbatch\tisl\tosl\tlatency_ms\nmixtral-8x7b/a100/tp2\t16\t128\t4\t100\n"
    meta = "# kind: burst\n# scheduler: trtllm-static\n"
    free, collapsed = _with_switch(tmp_path, meta, rows, "moe_routing", "collapsed",
                                   "collapsed_routing")
    assert not presets.FACTORS.collapsed_routing
    (a,), (b,) = fit.table_errors(free), fit.table_errors(collapsed)
    p = presets.resolve("mixtral-8x7b/a100/tp2")
    on = presets.Preset(p.model, p.gpu, p.tp, p.fp8,
                        dataclasses.replace(p.factors, collapsed_routing=1.0))
    # three decode steps after the one-pass prefill (which is compute-bound either way)
    gap = sum(p.step_ms(0, 16, 16 * (128 + i)) - on.step_ms(0, 16, 16 * (128 + i))
              for i in range(1, 4))
    assert a.simulated - b.simulated == pytest.approx(gap, rel=0.02) and gap > 30.0
    assert "collapsed_routing" in fit.SWITCHES and "collapsed_routing" not in fit.uses(free)
    bad = dataclasses.replace(free, meta={**free.meta, "moe_routing": "sometimes"})
    with pytest.raises(ValueError,
                       match=r"t: '# moe_routing:' must be independent or collapsed"):
        fit.table_errors(bad)


def test_a_compiled_static_loop_pays_no_request_overhead() -> None:
    """The rule ``STATIC_LOOP_REQUEST_OVERHEAD_MS`` (docs/hardware.md, "Fixed time by
    engine"): a preset's engine charges the fitted ``request_overhead_ms`` before a
    serving engine sees a request, none before a compiled static loop does (its batch is
    built in memory), so a static batch's first token comes exactly that much sooner;
    the caller's own knob still wins."""
    preset = "llama-2-7b/a100/tp1"
    f = presets.FACTORS
    assert f.request_overhead_ms > 0 and not f.static_loop
    serving = EngineConfig.from_knobs(preset=preset, scheduler="trtllm-static")
    assert serving.request_overhead_ms == f.request_overhead_ms
    with fit.using(dataclasses.replace(f, static_loop=1.0, static_step_ms=f.step_overhead_ms)):
        static = EngineConfig.from_knobs(preset=preset, scheduler="trtllm-static")
        assert static.request_overhead_ms == presets.STATIC_LOOP_REQUEST_OVERHEAD_MS == 0.0
        assert EngineConfig.from_knobs(preset=preset, scheduler="trtllm-static",
                                       request_overhead_ms=3.0).request_overhead_ms == 3.0
        a, b = burst(serving, 2, 128, 4), burst(static, 2, 128, 4)
    assert a.ttft_ms - b.ttft_ms == pytest.approx(f.request_overhead_ms, abs=1e-6)
    assert a.latency_ms - b.latency_ms == pytest.approx(f.request_overhead_ms, abs=1e-6)


def test_a_table_of_a_compiled_static_loop_replays_with_its_fixed_step(tmp_path: Path) -> None:
    """``# step_loop: static`` replays the table with ``static_loop`` on (the shipped
    factors keep it off): each of a static batch's steps (one whole-batch prefill, then a
    decode per output token after the first) pays ``static_step_ms`` in place of
    ``step_overhead_ms``, and its requests pay no ``request_overhead_ms`` (no front end),
    so the batch's latency moves by exactly steps × their difference plus the request
    overhead; the fit searches the factors the table uses and leaves the others alone; a
    value the line cannot read is refused naming the table and the line."""
    rows = "preset\tbatch\tisl\tosl\tlatency_ms\nllama-2-7b/h100/tp1\t4\t128\t5\t100\n"
    meta = "# kind: burst\n# scheduler: trtllm-static\n"
    serving, static = _with_switch(tmp_path, meta, rows, "step_loop", "static", "static_loop")
    # the shipped factors with the two fixed steps apart (the 2026-12-07 fit made them equal)
    f = dataclasses.replace(presets.FACTORS, static_step_ms=1.25)
    assert not f.static_loop and f.static_step_ms != f.step_overhead_ms and f.seq_us > 0
    with fit.using(f):
        (a,), (b,) = fit.table_errors(serving), fit.table_errors(static)
    steps = 5  # the prefill (and first token), then four decodes
    host = 4 * 4 * f.seq_us * 1e-3  # the serving engine's four decodes of four sequences
    assert f.request_overhead_ms > 0
    assert a.simulated - b.simulated == pytest.approx(
        steps * (f.step_overhead_ms - f.static_step_ms) + f.request_overhead_ms + host,
        abs=1e-3)
    assert "static_loop" in fit.SWITCHES
    fixed = {"step_overhead_ms", "static_step_ms", "request_overhead_ms", "seq_us"}
    assert fixed & fit.uses(serving) == {"step_overhead_ms", "request_overhead_ms", "seq_us"}
    assert fixed & fit.uses(static) == {"static_step_ms"}
    bad = dataclasses.replace(serving, meta={**serving.meta, "step_loop": "compiled"})
    with pytest.raises(ValueError, match=r"t: '# step_loop:' must be serving or static"):
        fit.table_errors(bad)
