"""SGLang's scheduling (docs/embedded-engine.md "Scheduling", docs/hardware.md "The engine
a table ran on"): prefill and decode batches kept apart (``mixed_batches=False``: a step
is a prefill batch whenever one forms, else a decode batch of every running request), the
admission reserve (``admission_reserve``), and ``scheduler=sglang`` with its chunk and KV
pool by the GPU's memory. The implicit decoders sit a prefill batch out and come back, with
the compiled parts and their Python twins alike; a manifest records the knobs only when
set."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.test_sim_compiled_twin import drive
from tests.twin import in_child
from workbench.sim.config import EngineConfig
from workbench.sim.scheduler import Scheduler, Sequence

APART = {"mixed_batches": False}


class Stepper:
    """A scheduler stepped by hand: each step's (request, tokens) pairs, the implicit
    decoders it advanced, and its end time (1, 2, 3, ...)."""

    def __init__(self, **knobs: Any) -> None:
        self.sched = Scheduler(EngineConfig(**knobs))
        self.t = 0

    def add(self, i: int, prompt: int, out: int) -> Sequence:
        seq = self.sched.new_sequence(f"r{i}", list(range(i * 100_000, i * 100_000 + prompt)),
                                      out, self.t)  # fmt: skip
        self.sched.add(seq)
        return seq

    def times(self, seq: Sequence) -> list[int]:
        """``seq``'s token end times so far (an implicit decoder's brought up to date)."""
        self.sched.sync(seq)
        return seq.token_ns

    def step(self) -> tuple[list[tuple[str, int]], int]:
        plan = self.sched.schedule()
        self.t += 1
        got = [(s.request_id, s.step_tokens) for s in plan.scheduled], plan.implicit
        if plan.prefill_tokens and not self.sched.config.mixed_batches:
            assert plan.decode_seqs == plan.implicit == 0  # a prefill batch: no decode
        self.sched.complete(plan, self.t)
        return got


def test_a_prefill_batch_holds_no_decodes_and_the_decodes_resume_after_it() -> None:
    s = Stepper(**APART)
    a = s.add(0, 100, 6)
    assert s.step() == ([("r0", 100)], 0)  # its prefill, first token
    assert s.step() == ([], 1)  # decode batches: r0 alone, implicit
    b = s.add(1, 300, 3)
    assert s.step() == ([("r1", 300)], 0)  # a prompt waits: a prefill batch, r0 waits
    assert s.step() == ([], 2)  # then both decode together
    assert s.step() == ([], 2)
    assert s.times(a)[:4] == [1, 2, 4, 5] and s.times(b) == [3, 4, 5]
    # mixed (the default): the prompt joins r0's decode in one step
    m = Stepper()
    m.add(0, 100, 6)
    m.step()
    m.step()
    m.add(1, 300, 3)
    assert m.step() == ([("r1", 300)], 1)  # r0 decodes (implicit) in the same step


def test_a_chunked_prompt_continues_first_and_the_decodes_wait_for_its_last_chunk() -> None:
    s = Stepper(**APART)
    a = s.add(0, 100, 8)
    s.step()
    s.step()
    b = s.add(1, 20_000, 3)
    c = s.add(2, 1000, 3)
    assert s.step() == ([("r1", 8192)], 0)
    assert s.step() == ([("r1", 8192)], 0)
    # the last chunk first, then the waiting prompt fills what the budget leaves
    assert s.step() == ([("r1", 3616), ("r2", 1000)], 0)
    assert s.step() == ([], 3)
    assert s.times(a)[:3] == [1, 2, 6] and s.times(b)[0] == s.times(c)[0] == 5


def test_the_budget_bounds_a_prefill_batch_and_max_num_seqs_its_requests() -> None:
    s = Stepper(**APART)
    for i in range(3):
        s.add(i, 3000, 2)
    assert s.step() == ([("r0", 3000), ("r1", 3000), ("r2", 2192)], 0)
    assert s.step() == ([("r2", 808)], 0)  # the chunked one's rest: nothing else waits
    assert s.step() == ([], 3)
    few = Stepper(max_num_seqs=2, **APART)
    for i in range(3):
        few.add(i, 10, 2)
    assert few.step() == ([("r0", 10), ("r1", 10)], 0)
    # r2 waits for a free seat: no prefill batch forms, so the decodes run
    assert few.step() == ([], 2)
    assert few.step() == ([("r2", 10)], 0)


def test_no_room_for_the_waiting_head_runs_a_decode_batch() -> None:
    s = Stepper(num_blocks=10, block_size=16, **APART)  # 160 tokens of KV
    s.add(0, 100, 30)
    s.step()
    s.add(1, 100, 2)  # needs 7 blocks: only 3 are free
    for _ in range(3):
        assert s.step() == ([], 1)  # r0 decodes; r1 waits for blocks
    assert s.sched.waiting


def test_admission_reserves_the_running_requests_outputs_to_come() -> None:
    """``admission_reserve`` (SGLang's new_token_ratio): a waiting request is admitted
    only while its prompt and output fit below the free KV tokens less each running
    request's output left × the ratio, which falls from its start to 14 % of it over 600
    decode steps (docs/embedded-engine.md "Scheduling")."""
    s = Stepper(num_blocks=64, admission_reserve=0.7, **APART)  # 1,024 tokens of KV
    a = s.add(0, 96, 800)
    s.step()  # a's prefill: 6 blocks, one token out
    free = 58 * 16
    assert s.sched._reserve_room() == pytest.approx(free - 0.7 * 799)
    s.add(1, 96, 300)  # 96 + 300 = 396 >= 928 - 559.3: it waits
    assert s.step() == ([], 1)
    # one decode step later (which took a 7th block) the ratio is 0.7 - 0.602/600 and
    # a has 798 tokens to go
    ratio = 0.7 - (0.7 - 0.7 * 0.14) / 600
    assert s.sched._reserve_room() == pytest.approx(free - 16 - ratio * 798)
    waited = 1
    while s.step()[0] == [] and waited < 800:
        waited += 1
    assert 1 < waited < 800 and s.times(a)[-1] < 800  # admitted while a still decodes
    # without the reserve it is admitted at once
    plain = Stepper(num_blocks=64, **APART)
    plain.add(0, 96, 800)
    plain.step()
    plain.add(1, 96, 300)
    assert plain.step() == ([("r1", 96)], 0)


def test_sglang_is_registered_with_its_chunk_by_gpu_memory() -> None:
    cfg = EngineConfig.from_knobs(scheduler="sglang")
    assert not cfg.mixed_batches and cfg.enable_chunked_prefill
    assert cfg.admission_reserve == 0.7 and EngineConfig().admission_reserve == 0.0
    assert cfg.max_num_batched_tokens == 8192
    chunk = {gpu: EngineConfig.from_knobs(scheduler="sglang", preset=p).max_num_batched_tokens
             for gpu, p in (("h100", "llama-3.1-8b/h100/tp1"), ("a100", "llama-3.1-8b/a100/tp1"),
                            ("h200", "llama-3.1-8b/h200/tp1"), ("l40s", "mixtral-8x7b/l40s/tp4"),
                            ("mi300x", "llama-3.1-70b/mi300x/tp8/fp8"),
                            ("b200", "llama-3.1-8b/b200/tp1"))}  # fmt: skip
    assert chunk == {"h100": 8192, "a100": 8192, "h200": 8192, "l40s": 4096,
                     "mi300x": 16384, "b200": 16384}
    own = EngineConfig.from_knobs(scheduler="sglang", preset="llama-3.1-8b/b200/tp1",
                                  max_num_batched_tokens=2048, mixed_batches=True)
    assert own.max_num_batched_tokens == 2048 and own.mixed_batches
    assert EngineConfig().mixed_batches  # the default stays vLLM's mixed steps


def test_sglang_sizes_its_kv_pool_by_its_static_memory_fraction() -> None:
    """SGLang's ``--mem-fraction-static`` default (docs/hardware.md, "The engine a table
    ran on"): Qwen3-32B on one H100 (81,560 MiB) reserves 512 + 8,192 × 1.5 + 256 × 2 +
    1/8 × 1,024 = 13,440 MiB, so 0.835 of the GPU holds the weights and the KV pool; the
    vLLM preset's 0.9 utilization less 2 GB leaves more. A chunk the caller sets sizes the
    reserve (the 10 GiB floor of a GPU above 60 GiB then), and the caller's own
    ``num_blocks`` wins."""
    from workbench.sim.presets import resolve

    p = resolve("qwen3-32b/h100/tp1")
    mib = p.gpu.usable_gb * 1e9 / 2**20
    assert round((mib - 13_440) / mib, 3) == 0.835
    block = p.kv_bytes_per_token_gpu * 16
    want = int((0.835 * mib * 2**20 - p.weight_bytes) // block)
    cfg = EngineConfig.from_knobs(scheduler="sglang", preset="qwen3-32b/h100/tp1")
    assert cfg.num_blocks == want == 1403
    assert EngineConfig.from_knobs(preset="qwen3-32b/h100/tp1").num_blocks == 2251
    small = EngineConfig.from_knobs(scheduler="sglang", preset="qwen3-32b/h100/tp1",
                                    max_num_batched_tokens=2048)
    frac = round((mib - 10 * 1024) / mib, 3)
    assert small.num_blocks == int((frac * mib * 2**20 - p.weight_bytes) // block)
    assert EngineConfig.from_knobs(scheduler="sglang", preset="qwen3-32b/h100/tp1",
                                   num_blocks=500).num_blocks == 500


CASES = {"roomy": {"num_blocks": 4000, **APART},
         "preempting": {"num_blocks": 80, "max_num_seqs": 24, "max_num_batched_tokens": 512,
                        **APART},
         "reserving": {"num_blocks": 300, "admission_reserve": 0.7, **APART}}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_apart_steps_are_the_same_with_and_without_implicit_decode(name: str) -> None:
    """The implicit decoders (``sim.decoders``) sit each prefill batch out as explicit
    requests and rejoin after it: every step, token time and counter as the scheduler
    that keeps every request explicit gives."""
    fast, plain = drive(CASES[name], 7), drive(CASES[name], 7, implicit=False)
    assert fast["requests"] == plain["requests"] and fast["counters"] == plain["counters"]
    # a step: (scheduled, implicit, prefill tokens, decodes, ...) as ``drive`` records it;
    # who is scheduled explicitly is what implicit decode changes
    assert [s[2:] for s in fast["steps"]] == [s[2:] for s in plain["steps"]]
    prefill = [s for s in fast["steps"] if s[2]]
    assert prefill and all(s[3] == 0 for s in prefill)  # no decode in a prefill batch
    assert any(s[1] and not s[0] and s[3] > 1 for s in fast["steps"])  # implicit-only decodes
    if name == "preempting":
        assert fast["counters"]["preemptions"] > 0


def replay(engine: dict[str, Any]) -> list[Any]:
    """A virtual replay of the bundled Mooncake head with SGLang's scheduling: its
    canonical digest and its mean TTFT and ITL."""
    from workbench.data import path as data_path
    from workbench.executors.virtual import simulate
    from workbench.report.canonical import run_digest

    moon = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    result = simulate({"trace": {"path": moon, "max_items": 200}}, engine=engine)
    return [run_digest(result)]


SGLANG_TIGHT = {"scheduler": "sglang", "num_blocks": 3000, "max_num_seqs": 64,
                "max_num_batched_tokens": 2048}


def test_compiled_and_python_engines_replay_the_apart_mode_alike() -> None:
    here = replay(SGLANG_TIGHT)
    assert here == in_child(__file__, f"replay({SGLANG_TIGHT!r})", compiled=False)
    mixed = replay({k: v for k, v in SGLANG_TIGHT.items() if k != "scheduler"})
    assert here != mixed  # the mode changes the replay


def test_the_apart_replay_serves_every_request_and_stalls_decodes_for_prompts() -> None:
    """The same replay, mixed and apart: the same requests complete their output;
    apart, a decode waits out each prefill batch, so the slowest gap between two tokens
    of a request is longer than mixed steps give."""
    from workbench.data import path as data_path
    from workbench.executors.virtual import simulate

    moon = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    cfg = {"trace": {"path": moon, "max_items": 100}}
    mixed = {k: v for k, v in SGLANG_TIGHT.items() if k != "scheduler"}
    gaps, served = {}, {}
    for name, engine in (("apart", SGLANG_TIGHT), ("mixed", mixed)):
        records = simulate(cfg, engine=engine).records
        assert len(records) == 100
        # the same requests served in full (the few refused are longer than the KV)
        served[name] = sorted(r.request_id for r in records if r.http_status == 200
                        and r.completion_tokens == r.planned_output_tokens)
        gaps[name] = max(b - a for r in records
                         for a, b in zip(r.token_times_ns, r.token_times_ns[1:], strict=False))
    assert served["apart"] == served["mixed"] and len(served["apart"]) >= 90
    assert gaps["apart"] > gaps["mixed"]


def test_a_manifest_records_the_knob_only_when_it_is_set() -> None:
    """``mixed_batches`` at its default is left out of ``EngineConfig.to_dict`` (what a
    run's manifest records), so the canonical digests of runs that leave it alone stay
    those of before the knob; set, it is recorded; either reads back as the same config."""
    for cfg in (EngineConfig(), EngineConfig.from_knobs(scheduler="sglang")):
        d = cfg.to_dict()
        assert ("mixed_batches" in d) == (not cfg.mixed_batches)
        assert ("admission_reserve" in d) == (cfg.admission_reserve > 0)
        assert EngineConfig(**{**d, "faults": cfg.faults}) == cfg
