"""What the benchmark client sent and the serving engine's own defaults, replayed
(docs/hardware.md, "What the benchmark client sent" and "The engine a table ran on"):
``vllm bench serve``'s initial test run of the first prompt, a row's own count of
measured requests, and ``vllm serve``'s token budget and sequence cap by GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workbench.sim.config import EngineConfig
from workbench.sim.presets import fit
from workbench.sim.presets.bench import burst, closed_loop
from workbench.sim.presets.tables import OUTSIDE_DIR, load_tables

PRESET = "llama-3.1-8b/a100/tp1"


def test_the_test_run_leaves_the_first_measured_prompt_in_the_prefix_cache() -> None:
    """One client, two measured requests of 4,096 tokens: with the test run the first
    finds its prompt cached (all but its last block) and its TTFT falls to a short
    prefill's, so the mean is (a whole prefill + a cached one) / 2; with the prefix cache
    off the test run changes nothing."""
    cfg = EngineConfig.from_knobs(preset=PRESET)
    plain = closed_loop(cfg, 1, 4096, 8, requests=2)
    tested = closed_loop(cfg, 1, 4096, 8, requests=2, test_run=True)
    one = closed_loop(cfg, 1, 4096, 8, requests=1)
    hit = 2 * tested.ttft_ms - one.ttft_ms  # the cached request's TTFT
    assert plain.ttft_ms == pytest.approx(one.ttft_ms, rel=1e-6)
    assert 0 < hit < one.ttft_ms / 5
    assert tested.itl_ms == pytest.approx(plain.itl_ms, rel=0.01)
    off = dataclasses.replace(cfg, enable_prefix_caching=False)
    assert (closed_loop(off, 1, 4096, 8, requests=2, test_run=True).ttft_ms
            == pytest.approx(closed_loop(off, 1, 4096, 8, requests=2).ttft_ms, rel=1e-9))


def test_a_burst_after_its_test_run_is_timed_from_its_own_start() -> None:
    """A burst of one after the test run: its request is a prefix hit (TTFT far below a
    fresh one) and the batch's latency counts from the burst's send, not the test's."""
    cfg = EngineConfig.from_knobs(preset=PRESET)
    fresh, tested = burst(cfg, 1, 4096, 16), burst(cfg, 1, 4096, 16, test_run=True)
    assert tested.ttft_ms < fresh.ttft_ms / 5
    assert tested.latency_ms == pytest.approx(
        tested.ttft_ms + 15 * tested.tpot_ms, rel=1e-6)
    assert tested.latency_ms < fresh.latency_ms


def _table(tmp_path: Path, meta: str, body: str) -> fit.Table:
    (tmp_path / "t.tsv").write_text(
        f"# source: https://example.org/t\n# read: 2026-12-07\n# kind: closed_loop\n"
        f"# preset: {PRESET}\n{meta}{body}", encoding="utf-8")
    (table,) = load_tables(tmp_path)
    return table


def test_a_table_says_its_client_ran_a_test_and_each_rows_request_count(
        tmp_path: Path) -> None:
    """``# test_run: first_prompt`` replays every row after the test run; a ``requests``
    column measures that many requests at its row; a value either cannot read is refused
    naming the table."""
    body = "concurrency\tisl\tosl\trequests\tttft_ms\n1\t4096\t8\t2\t100\n1\t4096\t8\t1\t100\n"
    plain = _table(tmp_path, "", body)
    tested = dataclasses.replace(plain, meta={**plain.meta, "test_run": "first_prompt"})
    assert not plain.test_run and tested.test_run
    assert [plain.measured_requests(r) for r in plain.rows] == [2, 1]
    cfg = EngineConfig.from_knobs(preset=PRESET)
    two, one = fit.table_errors(tested)
    assert two.simulated == pytest.approx(
        closed_loop(cfg, 1, 4096, 8, requests=2, test_run=True).ttft_ms, rel=1e-9)
    assert one.simulated == pytest.approx(
        closed_loop(cfg, 1, 4096, 8, requests=1, test_run=True).ttft_ms, rel=1e-9)
    assert [r.simulated for r in fit.table_errors(plain)] == pytest.approx(
        [closed_loop(cfg, 1, 4096, 8, requests=1).ttft_ms] * 2, rel=1e-6)
    bad = dataclasses.replace(plain, meta={**plain.meta, "test_run": "warmup"})
    with pytest.raises(ValueError, match=r"t: '# test_run:' must be none or first_prompt"):
        fit.table_errors(bad)
    bad_row = dataclasses.replace(plain, rows=[{**plain.rows[0], "requests": "two"}])
    with pytest.raises(ValueError, match=r"t: a row's 'requests' must be a whole number"):
        fit.table_errors(bad_row)


def test_the_vllm_benchmark_tables_say_their_client_ran_a_test() -> None:
    """Every table measured with ``vllm bench serve`` or vLLM's ``benchmark_serving.py``
    (GPUStack's bursts, the Tenstorrent sweep) carries the line; the Tenstorrent rows
    measure the requests the report counts (N Req: 8, 4, 4, 4, 4, 2, 2)."""
    tables = {t.name: t for t in load_tables() + load_tables(OUTSIDE_DIR)}
    vllm_bench = {n for n in tables if n.startswith(("gpustack_", "tt-inference-server_"))}
    assert len(vllm_bench) == 5
    assert {n for n, t in tables.items() if t.test_run} == vllm_bench
    tt = tables["tt-inference-server_qwen3-30b-a3b_1xa100_c1-sweep"]
    assert [tt.measured_requests(r) for r in tt.rows] == [8, 4, 4, 4, 4, 2, 2]


@pytest.mark.parametrize(("preset", "tokens", "seqs"), [
    ("qwen3-32b/a100/tp1", 2048, 256),  # an A100: the small defaults whatever its memory
    ("qwen3-32b/h100/tp1", 8192, 1024),  # 79.6 GiB, not an A100
    ("llama-3.1-8b/h200/tp1", 8192, 1024),
    ("llama-3.1-8b/l40s/tp1", 2048, 256),  # 45 GiB: under 70
])
def test_vllm_serve_sets_its_budget_and_cap_by_gpu(preset: str, tokens: int,
                                                    seqs: int) -> None:
    cfg = EngineConfig.from_knobs(preset=preset, scheduler="vllm-serve")
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (tokens, seqs)
    assert cfg.enable_chunked_prefill
    own = EngineConfig.from_knobs(preset=preset, scheduler="vllm-serve",
                                  max_num_batched_tokens=4096, max_num_seqs=64)
    assert (own.max_num_batched_tokens, own.max_num_seqs) == (4096, 64)
    # without a preset the GPU is unknown: vllm's knobs
    assert EngineConfig.from_knobs(scheduler="vllm-serve") == EngineConfig()


def test_perf_analyzer_keeps_the_first_three_windows_in_a_row_that_saw_an_end() -> None:
    """perf_analyzer's result is the first ``stability_window`` (3) consecutive
    measurement windows from the load's start in each of which a request ended; within
    ``max_trials`` (10) windows, else none."""
    from workbench.sim.presets.bench import stable_windows

    w = 12
    assert stable_windows([1, 13, 25], w) == (0, 36)
    assert stable_windows([13, 14, 25, 37], w) == (12, 48)  # nothing ended in the first
    assert stable_windows([13, 37, 61, 85], w) == (0, 0)  # never three in a row
    assert stable_windows([13, 37, 61, 85, 97, 109], w) == (84, 120)
    assert stable_windows([1, 13, 200], w) == (0, 0)  # past max_trials: not yet


def test_genai_perf_tables_measure_their_start_up_round(tmp_path: Path) -> None:
    """``# measurement: perf_analyzer`` replays a row through ``perf_analyzer_windows``:
    every client sends at once at time 0 and the start-up round is measured, so under a
    prefill-bound load the mean TTFT is above the steady state's; a value the line cannot
    read is refused naming the table."""
    from workbench.sim.presets.bench import perf_analyzer_windows

    cfg = EngineConfig.from_knobs(preset=PRESET, scheduler="trtllm")
    windows = perf_analyzer_windows(cfg, 32, 2000, 64)
    steady = closed_loop(cfg, 32, 2000, 64)
    assert windows.requests >= 32 and windows.ttft_ms > 1.5 * steady.ttft_ms
    body = "concurrency\tttft_ms\n32\t100\n"
    meta = "# isl: 2000\n# osl: 64\n# scheduler: trtllm\n"
    plain = _table(tmp_path, meta, body)
    measured = dataclasses.replace(plain, meta={**plain.meta, "measurement": "perf_analyzer"})
    assert not plain.perf_analyzer and measured.perf_analyzer
    (row,) = fit.table_errors(measured)
    assert row.simulated == pytest.approx(windows.ttft_ms, rel=1e-9)
    bad = dataclasses.replace(plain, meta={**plain.meta, "measurement": "windows"})
    with pytest.raises(ValueError, match=r"t: '# measurement:' must be steady or perf_analyzer"):
        fit.table_errors(bad)
    genai_perf = [t for t in load_tables() if t.perf_analyzer]
    assert len(genai_perf) == 7 and all(t.name.startswith("nim-dli_") for t in genai_perf)
