"""TensorRT-LLM's capacity scheduler (docs/hardware.md "The engine a table ran on",
docs/embedded-engine.md "Scheduling"): ``guaranteed_no_evict`` admits a waiting request
only while the free KV blocks cover its prompt and whole output plus what every running
request still needs to finish (GUARANTEED_NO_EVICT, TensorRT-LLM's default), so a started
request is never preempted; ``scheduler=trtllm`` sets it. The implicit decoders, the
compiled parts and their Python twins agree; a manifest records the knob only when set."""

from __future__ import annotations

import pytest

from tests.sim.test_sglang_scheduling import Stepper
from tests.sim.test_sim_compiled_twin import drive
from tests.twin import in_child
from workbench.sim.config import EngineConfig

TRT = {"guaranteed_no_evict": True, "enable_chunked_prefill": False}


def test_admission_waits_until_the_blocks_to_completion_fit() -> None:
    """16 blocks of 16. r0 (100 + 60 tokens) holds 10 blocks to completion, so 6 stay
    for newcomers whatever r0 has computed so far; r1 (100 + 70: 11 blocks) waits until
    r0 finishes; r2 (50 + 46: 6 blocks) fits at once, 50 + 47 (7 blocks) would not.
    Nobody is preempted."""
    s = Stepper(num_blocks=16, **TRT)
    s.add(0, 100, 60)
    assert s.step() == ([("r0", 100)], 0)  # 7 blocks taken, 9 free
    assert s.sched._no_evict_room() == 16 - 10 == 9 - (10 - 7)
    s.add(1, 100, 70)
    steps = 1
    while s.sched.running and s.sched.waiting:
        assert s.sched._no_evict_room() == 6  # r0's growth comes out of its reservation
        s.step()
        steps += 1
    assert steps == 60 and s.sched._no_evict_room() == 16  # r0's prefill and 59 decodes
    assert s.step() == ([("r1", 100)], 0)  # r1 in the first step after them
    assert s.sched.counters.preemptions == 0
    for out, admitted in ((46, True), (47, False)):
        fits = Stepper(num_blocks=16, **TRT)
        fits.add(0, 100, 60)
        fits.step()
        fits.add(2, 50, out)
        assert (fits.step()[0] == [("r2", 50)]) == admitted


def test_without_it_the_same_requests_start_at_once_and_one_is_preempted() -> None:
    s = Stepper(num_blocks=16, enable_chunked_prefill=False)
    s.add(0, 100, 60)
    s.step()
    s.add(1, 100, 70)
    assert s.step()[0] == [("r1", 100)]  # 7 of the 9 free blocks: in at once
    while s.sched.has_work():
        s.step()
    assert s.sched.counters.preemptions > 0  # 10 + 11 blocks to finish: 16 hold


def test_a_request_larger_than_the_whole_cache_is_never_admitted_alone() -> None:
    """TensorRT-LLM refuses what cannot finish; here it waits (the engine's request
    validation refuses prompts longer than the KV before this point)."""
    s = Stepper(num_blocks=4, **TRT)
    s.add(0, 40, 40)  # 5 blocks to completion of 4
    for _ in range(3):
        assert s.step() == ([], 0)
    assert s.sched.waiting and not s.sched.running


CASES = {"roomy": {"num_blocks": 4000, **TRT},
         "tight": {"num_blocks": 80, "max_num_seqs": 24, "max_num_batched_tokens": 512,
                   **TRT},
         "chunked": {"num_blocks": 80, "max_num_seqs": 24, "max_num_batched_tokens": 512,
                     "guaranteed_no_evict": True}}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_steps_are_the_same_with_and_without_implicit_decode(name: str) -> None:
    fast, plain = drive(CASES[name], 7), drive(CASES[name], 7, implicit=False)
    assert fast["requests"] == plain["requests"] and fast["counters"] == plain["counters"]
    assert [s[2:] for s in fast["steps"]] == [s[2:] for s in plain["steps"]]
    assert fast["counters"]["preemptions"] == 0
    if name != "roomy":  # the same load without the policy preempts
        loose = {k: v for k, v in CASES[name].items() if k != "guaranteed_no_evict"}
        assert drive(loose, 7)["counters"]["preemptions"] > 0


def replay(engine: dict[str, object]) -> list[object]:
    """A virtual replay of the bundled Mooncake head: its canonical digest."""
    from workbench.data import path as data_path
    from workbench.executors.virtual import simulate
    from workbench.report.canonical import run_digest

    moon = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    return [run_digest(simulate({"trace": {"path": moon, "max_items": 200}}, engine=engine))]


TRT_TIGHT = {"scheduler": "trtllm", "num_blocks": 3000, "max_num_seqs": 64}


def test_compiled_and_python_engines_replay_the_no_evict_mode_alike() -> None:
    here = replay(TRT_TIGHT)
    assert here == in_child(__file__, f"replay({TRT_TIGHT!r})", compiled=False)
    loose = replay({**TRT_TIGHT, "guaranteed_no_evict": False})
    assert here != loose  # the policy changes the replay


def test_trtllm_sets_it_and_a_manifest_records_it_only_when_set() -> None:
    cfg = EngineConfig.from_knobs(scheduler="trtllm")
    assert cfg.guaranteed_no_evict and not cfg.enable_chunked_prefill
    assert not EngineConfig().guaranteed_no_evict
    assert not EngineConfig.from_knobs(scheduler="trtllm-static").guaranteed_no_evict
    assert not EngineConfig.from_knobs(scheduler="trtllm",
                                       guaranteed_no_evict=False).guaranteed_no_evict
    for c in (EngineConfig(), cfg):
        d = c.to_dict()
        assert ("guaranteed_no_evict" in d) == c.guaranteed_no_evict
        assert EngineConfig(**{**d, "faults": c.faults}) == c
