"""Compare: the latency change of a run against the baseline, with its bootstrap
interval and significance, on real runs against the embedded engine (HTTP, its own
process); virtual-time runs labelled as such."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.data import path as data_path
from workbench.report import compare

TRACE = str(data_path("tracelab/multi_session_large.csv"))


def _cfg(tmp_path: Path, run_id: str, **engine: float) -> wb.RunConfig:
    return wb.RunConfig.from_dict({
        "trace": {"path": TRACE, "max_items": 6},  # 6 sessions, 37 requests
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0},
        "target": {"url": "sim", "engine": {"speedup": 50.0, **engine}},
        "out_dir": str(tmp_path), "run_id": run_id,
    })


async def test_a_real_slowdown_is_significant_and_a_run_against_itself_is_identical(tmp_path):
    base = await wb.run_async(_cfg(tmp_path, "base"))
    # 2.5 s of fixed overhead per request at 50x: every TTFT 50 ms later
    slow = await wb.run_async(_cfg(tmp_path, "slow", request_overhead_ms=2500.0))
    runs = compare.load_runs([base.run_dir, slow.run_dir, base.run_dir], ["base", "slow", "same"])
    changes = compare.change_table(runs, n_boot=500, seed=1)
    assert set(changes["run"]) == {"slow", "same"} and set(changes["stat"]) == {"p50", "p90"}
    ttft = changes[(changes["metric"] == "TTFT (ms)") & (changes["run"] == "slow")]
    for _, row in ttft.iterrows():
        assert 0 < row["change lo"] <= row["change"] <= row["change hi"]
    # the same 6 sessions in both runs: paired; a p50 needs 5 of them, a p90 29
    assert list(ttft["design"]) == ["paired", "paired"]
    assert list(ttft["significant"]) == [True, None]
    assert list(ttft["verdict"]) == ["significant",
                                     "too few sessions (6 and 6; a p90 needs 29 in each)"]
    for _, row in ttft.iterrows():
        # the one percentile (linear method) may differ from numpy's in the last bit
        assert row["value"] == pytest.approx(np.percentile(
            wb.to_frame(slow).query("status == 'ok'")["ttft_ms"], int(row["stat"][1:])),
            rel=1e-12)
    same = changes[changes["run"] == "same"]
    assert (same["change"] == 0).all() and not same["significant"].any()
    # a run against itself: every value equal, said so, not "not significant" over a
    # [0, 0] interval (docs/metrics.md, "Compare", "Identical runs")
    assert ((same["change lo"] == 0) & (same["change hi"] == 0)).all()
    assert set(same["verdict"]) == {compare.IDENTICAL}
    # seeded: the same interval twice
    again = compare.change_table(runs, n_boot=500, seed=1)
    assert again[["change lo", "change hi"]].equals(changes[["change lo", "change hi"]])
    lines = compare.compare_headline(runs, changes).lines
    # the first line names the knob: the engine's fixed overhead per request
    assert lines[0] == "What differs: target.engine.request_overhead_ms (– → 2500.0 → –)"
    assert lines[1].startswith("base (baseline): ")
    # 6 sessions of several rounds: the intervals resample sessions, paired, and say so
    assert lines[3].startswith("  slow vs base (intervals by session, paired): TTFT p50 +")
    assert "] significant, p90 " in lines[3] and "too few sessions (6 and 6" in lines[3]
    assert set(changes["resampled"]) == {"sessions (6 and 6)"}
    assert lines[5].startswith("  same vs base: identical runs: every TTFT and TPOT value")
    # the slow run's step times are its engine config's (its request overhead), not default
    assert compare.runs_table(runs)["timing"].tolist() == [
        f"wall clock, simulated engine, 50× real time, {how}" for how in (
            "default step times, not a GPU's",
            "step times from its engine config, no stated error",
            "default step times, not a GPU's")]


def test_runs_without_labels_are_named_by_what_differs(tmp_path):
    from workbench.executors.virtual import simulate

    a = simulate(_cfg(tmp_path, "20261206T034817Z-openai-aaaaaa"))
    b = simulate(_cfg(tmp_path, "20261206T034818Z-openai-bbbbbb", num_blocks=512))
    runs = compare.load_runs([a.run_dir, b.run_dir])
    assert list(runs) == ["num_blocks=–", "num_blocks=512"]  # not 30-character run ids
    assert compare.runs_table(runs)["run_id"].tolist() == [a.run_id, b.run_id]
    same = compare.load_runs([a.run_dir, a.run_dir])
    assert list(same) == ["run 1", "run 2"]
    assert compare.differs_line(same).startswith("What differs: nothing in the four axes")
    assert compare.compare_headline(same).lines[0] == compare.differs_line(same)


def test_virtual_time_runs_are_labelled(tmp_path):
    from workbench.executors.virtual import simulate

    run = simulate(_cfg(tmp_path, "v"))
    runs = compare.load_runs([run.run_dir])
    assert compare.runs_table(runs)["timing"].tolist() == [
        "virtual time (simulated engine, 50× real time, default step times, not a GPU's)"]
    assert "Every run is in virtual time (simulated ms)" in compare.latency_caption(runs)
    two = compare.load_runs([run.run_dir, run.run_dir], ["a", "b"])
    assert wb.plot(two, "cdf").get_suptitle() == (
        "Latency CDFs of ok requests: a vs b · virtual time (simulated engine, 50× real time, "
        "default step times, not a GPU's)")


def test_example_runs_can_be_made_again_in_the_same_folder(tmp_path):
    """The compare notebook's Run All twice (or a report rendered again) makes its two
    example runs again under the same out_dir: they replace the earlier ones."""
    small = "tracelab/multi_session_example.csv"
    first = compare.example_runs(tmp_path, trace=small, num_blocks=(64, 4096))
    again = compare.example_runs(tmp_path, trace=small, num_blocks=(64, 4096))
    assert first == again and len(again) == 2
    runs = compare.load_runs(again)
    assert [r.manifest.status for r in runs.values()] == ["completed", "completed"]


def test_an_engine_without_knobs_is_not_a_setting_that_differs(tmp_path):
    """A run given no engine knob stores ``target.engine`` as ``{}``: the absence of every
    knob, not a value of its own (the compare report said ``target.engine ({} → –)`` and
    labelled a run ``engine={}, max_num_batched_tokens=–``)."""
    from workbench.executors.virtual import simulate

    def cfg(run_id: str, engine: dict) -> wb.RunConfig:
        return wb.RunConfig.from_dict({
            "trace": {"path": TRACE, "max_items": 2},
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0},
            "target": {"url": "sim", "engine": engine},
            "out_dir": str(tmp_path), "run_id": run_id,
        })

    a = simulate(cfg("plain", {}))
    b = simulate(cfg("small", {"max_num_batched_tokens": 512}))
    runs = compare.load_runs([a.run_dir, b.run_dir])
    assert list(runs) == ["max_num_batched_tokens=–", "max_num_batched_tokens=512"]
    assert compare.differs_line(runs) == (
        "What differs: target.engine.max_num_batched_tokens (– → 512)")


def test_runs_that_differ_only_in_seed_are_read_as_noise(tmp_path):
    """Another seed is other random draws of the same settings: whatever the bootstrap
    calls significant between them is run-to-run noise the interval does not cover."""
    from workbench.executors.virtual import simulate

    def cfg(run_id: str, seed: int) -> wb.RunConfig:
        c = _cfg(tmp_path, run_id).to_dict()
        c["seed"] = seed
        return wb.RunConfig.from_dict(c)

    runs = compare.load_runs([simulate(cfg("s0", 0)).run_dir, simulate(cfg("s1", 1)).run_dir])
    assert compare.differs_line(runs) == (
        "What differs: only seed (0 → 1), other random draws of the same settings: every "
        "change below is run-to-run noise, and one marked significant shows that noise is "
        "wider than its interval")
