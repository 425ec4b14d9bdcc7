"""Every published measurement table against its preset, row by row (docs/hardware.md).

Each table of ``workbench/data/measurements`` is replayed on the embedded engine in
virtual time with the preset it names (``presets.fit.table_errors``); the error of every
row is printed (``pytest -s``), and each table's median absolute error per metric class
is held to the bound docs/hardware.md states for that table ("Every table"). The
leave-one-source-out figures the presets state (``fitted_factors.json``, quoted on every
plan figure) are re-derived from each fold's factors; a fold is checked to never see its
own source; the fit itself is checked to find better factors than a bad start.
"""

import dataclasses
import json
from statistics import median

import pytest

import workbench.sim.presets as presets
from workbench.sim.presets import fit
from workbench.sim.presets.stated import fit_record, held_out, measured, stated_error
from workbench.sim.presets.tables import KINDS

TABLES = {t.name: t for t in fit.load_tables()}
ROWS: dict[str, list[fit.RowError]] = {}
RECORD = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))

#: per table, metric class -> the median absolute error docs/hardware.md states for it
#: (the fitted factors; "fit" tables set them, "held out" ones did not)
BOUNDS: dict[str, dict[str, float]] = {
    "azure-ai-benchmarking-guide_llama-3.1-70b-405b_8xmi300x-fp8-tp8_vllm-throughput":
        {"throughput": 0.27},
    "azure-ai-benchmarking-guide_llama-3.1-70b_8xh100-fp8-tp8_trtllm-0.15-throughput":
        {"throughput": 0.21},
    "gpustack_qwen3-32b_1xa100-bf16-tp1_vllm-0.11.0-burst":
        {"ttft": 0.04, "itl": 0.01, "throughput": 0.06},
    "gpustack_qwen3-32b_1xh100-bf16-tp1_vllm-0.11.0-burst":
        {"ttft": 0.44, "itl": 0.36, "throughput": 0.75},
    "nemo-framework_llama-2-7b_h100-a100-tp1-8_trtllm-128in-20out":
        {"latency": 0.10},
    "nim-1.8.0_llama-3.3-70b_2xh100-fp8-tp2_5000in-500out":
        {"ttft": 0.33, "itl": 0.04, "throughput": 0.03},
    "nim-1.8.0_llama-3.3-70b_2xh100-fp8-tp2_500in-2000out":
        {"ttft": 0.11, "itl": 0.08, "throughput": 0.07},
    "nim-dli_llama-3-70b_4xa100-fp16-tp4_2000in-200out":
        {"ttft": 0.29, "itl": 0.07, "throughput": 0.19},
    "nim-dli_llama-3-70b_4xa100-fp16-tp4_one-client-sweep":
        {"ttft": 0.19, "itl": 0.03, "throughput": 0.03},
    "nim-dli_llama-3-70b_4xh100-fp16-tp4_one-client-sweep":
        {"ttft": 0.20, "itl": 0.08, "throughput": 0.07},
    "nim-dli_llama-3-70b_4xh100-fp8-tp4_2000in-200out":
        {"ttft": 0.30, "itl": 0.08, "throughput": 0.07},
    "nim-dli_llama-3-70b_4xh100-fp8-tp4_one-client-sweep":
        {"ttft": 0.29, "itl": 0.02, "throughput": 0.02},
    "nim-dli_llama-3-70b_8xa100-bf16-tp8_one-client-sweep":
        {"ttft": 0.27, "itl": 0.18, "throughput": 0.21},
    "nim-dli_llama-3-70b_8xh100-fp16-tp8_7000in-1000out":
        {"ttft": 0.72, "itl": 0.09, "throughput": 0.10},
    "nim-dli_llama-3-70b_8xh100-fp16-tp8_one-client-sweep":
        {"ttft": 0.28, "itl": 0.04, "throughput": 0.04},
    "nim-dli_llama-3-70b_8xh100-fp8-tp8_one-client-sweep":
        {"ttft": 0.37, "itl": 0.14, "throughput": 0.17},
    "nim-dli_llama-3-8b_1xa100-fp16-tp1_2000in-200out":
        {"ttft": 0.33, "itl": 0.09, "throughput": 0.16},
    "nim-dli_llama-3-8b_1xh100-fp16-tp1_2000in-200out":
        {"ttft": 0.26, "itl": 0.15, "throughput": 0.08},
    "nim-dli_llama-3-8b_1xh100-fp16-tp1_200in-1000out":
        {"ttft": 0.13, "itl": 0.16, "throughput": 0.14},
    "nim-dli_llama-3-8b_1xh100-fp8-tp1_2000in-200out":
        {"ttft": 0.36, "itl": 0.19, "throughput": 0.18},
    "oracle-oci_llama-3.1-405b_8xmi300x-fp8-tp8_vllm-latency-128in-128out":
        {"latency": 0.31},
    "trtllm-0.9.0-dli_llama-2-7b_h100-a100-tp1_static-batch":
        {"ttft": 0.13, "latency": 0.04},
    "trtllm-0.9.0-dli_mixtral-8x7b_2xa100-tp2_static-batch":
        {"ttft": 0.18, "latency": 0.20},
    "trtllm-0.9.0-dli_mixtral-8x7b_4xl40s-tp4_static-batch":
        {"ttft": 0.28, "latency": 0.23},
    "trtllm-perf-overview-v1.0_llama-3.1-8b-3.3-70b_h100-h200-fp8_max-throughput":
        {"throughput": 0.13},
    "tt-inference-server_qwen3-30b-a3b_1xa100_c1-sweep":
        {"ttft": 0.28, "itl": 0.05},
    "vllm-buildkite-9515_latency_h200_32in-128out-batch8":
        {"latency": 0.16},
}

#: the kept TP8 batch-1 measurement on MI300X among the fitted tables and the error
#: docs/hardware.md states for it (goal 15 %, not met; the 70B one, Argonne's, is kept
#: outside the fit: tests/sim/test_outside_tables.py)
TP8_MI300X_ERROR = 0.24  # 405B FP8, 8 × MI300X, batch 1: 3,530 ms published, 2,712 simulated
#: the same row predicted by the fold that never saw Oracle's source (2,741 ms, −22.4 %)
TP8_MI300X_HELD_OUT_ERROR = 0.23


def _rows(name: str) -> list[fit.RowError]:
    if name not in ROWS:
        ROWS[name] = fit.table_errors(TABLES[name])
    return ROWS[name]


def _medians(rows: list[fit.RowError]) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(fit.METRIC_CLASS[r.metric], []).append(abs(r.error))
    return {k: median(v) for k, v in by.items()}


def test_every_table_names_its_source_and_how_to_replay_it() -> None:
    assert len(TABLES) >= 20
    for t in TABLES.values():
        assert t.meta["source"].startswith("https://") and t.rows, t.name
        assert t.kind in KINDS and t.meta.get("read"), t.name
        for preset in t.presets:
            presets.resolve(preset)  # every table names a valid preset
    # the catalog's GPUs and models the tables cover (the rest is extrapolated)
    pairs = measured()
    assert {g for _, g in pairs} >= {"h100", "h200", "a100", "l40s", "mi300x"}
    assert {m for m, _ in pairs} >= {"llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b",
                                     "qwen3-32b", "qwen3-30b-a3b", "mixtral-8x7b",
                                     "llama-3.1-405b", "llama-2-7b"}
    assert ("llama-3.3-70b", "h200") in pairs and ("qwen3-30b-a3b", "a100") in pairs
    tp8 = {p for t in TABLES.values() for p in t.presets if presets.parse(p)[2] == 8}
    assert {presets.parse(p)[1] for p in tp8} >= {"h100", "a100", "mi300x"}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_preset_against_published_table(name: str) -> None:
    rows = _rows(name)
    print(f"\n{name} ({TABLES[name].meta['source']})")
    for r in rows:
        print(f"  {r.preset:28} {r.key:>14} {r.metric:17} published {r.published:11.2f} "
              f"simulated {r.simulated:11.2f} error {r.error:+.1%}")
    assert rows and all(r.simulated > 0 for r in rows)
    got = _medians(rows)
    print("  median abs:", {k: f"{v:.1%}" for k, v in got.items()})
    bound = BOUNDS[name]
    assert set(got) == set(bound), (got, bound)
    for metric, limit in bound.items():
        # the median rounded up to the next percent: within it, and no looser (a bound
        # left behind by a refit that made the table better would state more error than
        # the shipped factors leave, and hide the next one that makes it worse)
        assert limit - 0.015 < got[metric] <= limit + 0.005, (name, metric, got[metric], limit)


def test_the_stated_errors_are_the_fits_record() -> None:
    fitted, never = RECORD["fitted_on"], RECORD["never_fitted"]
    assert set(fitted) | set(never) == set(TABLES) and not set(fitted) & set(never)
    assert presets.Factors(**RECORD["factors"]) == presets.FACTORS
    rows = [r for name in fitted for r in _rows(name)]
    got = fit.summary(rows)
    for metric, stated in RECORD["in_sample"].items():
        assert got[metric] == pytest.approx(stated, abs=0.005), ("in_sample", metric)
    assert fit_record()["held_out_error"] == RECORD["held_out_error"]
    text = stated_error("llama-3.1-8b/h100/tp1")
    held_itl = held_out("llama-3.1-8b/h100/tp1")["itl"]
    assert f"ITL {held_itl:.1%} / " in text and "held out / fitted" in text
    assert "extrapolated" not in text
    assert stated_error("qwen3-30b-a3b/b200/tp1").endswith("on b200: extrapolated")
    # a (GPU, TP) that some source measured states its own cell's error
    cell = RECORD["leave_one_source_out"]["by_gpu_tp"]["h100 tp8"]
    if cell.get("itl_n", 0) >= 3:
        assert held_out("llama-3.1-70b/h100/tp8")["itl"] == cell["itl"]


# every kept table replayed under each fold's factors, the GenAI-Perf tables from their
# start-up round (perf_analyzer's windows): 150-300 s on this project's 2-core machine,
# more when both cores are busy, past the suite's 300 s default
@pytest.mark.timeout(1200)
def test_the_leave_one_source_out_figures_are_each_folds_own() -> None:
    """Every source's rows replayed with the factors of the fold that left that source
    out give the per-table, per-source and overall figures docs/hardware.md states."""
    loso = RECORD["leave_one_source_out"]
    folds = loso["fold_factors"]
    groups = fit.source_groups(list(TABLES.values()))
    assert set(folds) == {g for g in groups if any(t.name in RECORD["fitted_on"]
                                                   for t in groups[g])} | {"(never fitted)"}
    every: list[fit.RowError] = []
    for fold in fit.replay_folds(list(TABLES.values()), folds):  # what --stage replay runs
        assert dataclasses.asdict(fold.factors) == folds[fold.source]
        names = (RECORD["never_fitted"] if fold.source == "(never fitted)"
                 else [t.name for t in groups[fold.source]])
        assert {r.table for r in fold.rows} == set(names), fold.source
        every += fold.rows
        for name in names:
            rows = [r for r in fold.rows if r.table == name]
            for metric, stated in loso["by_table"][name].items():
                assert fit.summary(rows)[metric] == pytest.approx(stated, abs=0.005), (
                    name, metric)
    for metric, stated in RECORD["held_out_error"].items():
        assert fit.summary(every)[metric] == pytest.approx(stated, abs=0.005), metric
    cells = fit.breakdown(every)
    assert set(cells) == set(loso["by_gpu_tp"])
    for key, cell in loso["by_gpu_tp"].items():
        assert cells[key] == pytest.approx(cell, abs=0.005), key


def test_the_record_names_the_commands_its_search_and_folds_ran_with() -> None:
    """The search's record (``--stage fit``) carries no leave-one-source-out figures and
    names its command alone; the folds (``--stage folds``) add theirs with their own
    evaluations per fold, replacing any a record had, and the procedure names both
    commands; ``--stage all`` names one. The shipped record is the two-command kind."""
    searched = fit.search_record(presets.FACTORS, 2.30694, 30, max_evals=30,
                                 fitted_on=["a"], never_fitted=["b"],
                                 in_sample={"itl": 0.09254}, seconds=699.4)
    assert not set(fit.FOLD_KEYS) & set(searched)
    assert searched["procedure"] == (
        "python -m workbench.sim.presets.fit --stage fit --max-evals 30 --write (pattern "
        "search on log errors from START; docs/hardware.md 'Fit'); no leave-one-source-out "
        "folds (--stage folds adds them)")
    assert (searched["loss"], searched["evaluations"], searched["in_sample"],
            searched["seconds"]) == (2.3069, 30, {"itl": 0.0925}, 699)

    def folds(evals: int) -> dict[str, object]:
        return {"held_out_error": {"itl": 0.1 + evals / 1000},
                "leave_one_source_out": {"evaluations_per_fold": evals, "fold_factors": {}}}

    old = fit.with_folds(searched, folds(15), jobs=2, seconds=700.2)
    new = fit.with_folds(old, folds(30), jobs=2, seconds=1500)
    assert new["procedure"] == (
        "python -m workbench.sim.presets.fit --stage fit --max-evals 30 --write, and "
        "python -m workbench.sim.presets.fit --stage folds --loso-evals 30 --jobs 2 --write "
        "(pattern search on log errors from START; docs/hardware.md 'Fit')")
    assert new["leave_one_source_out"] == {"evaluations_per_fold": 30, "fold_factors": {}}
    assert (new["held_out_error"], new["folds_seconds"]) == ({"itl": 0.13}, 1500)
    assert {k: v for k, v in new.items() if k not in fit.FOLD_KEYS and k != "procedure"} == {
        k: v for k, v in searched.items() if k != "procedure"}
    assert "leave_one_source_out" not in searched and old["folds_seconds"] == 700
    together = fit.with_folds(searched, folds(6), jobs=1, seconds=None)
    assert together["procedure"].startswith(
        "python -m workbench.sim.presets.fit --max-evals 30 --loso-evals 6 --jobs 1 --write ")
    assert "folds_seconds" not in together
    loso = RECORD["leave_one_source_out"]
    assert RECORD["procedure"] == fit.procedure(RECORD["max_evals"],
                                                loso["evaluations_per_fold"], jobs=2)


def test_a_fold_never_sees_the_source_it_predicts() -> None:
    """``leave_one_source_out`` on two fast sources: each fold's factors are the fit on
    the other source alone, and its rows are its own source's."""
    two = [TABLES["vllm-buildkite-9515_latency_h200_32in-128out-batch8"],
           TABLES["oracle-oci_llama-3.1-405b_8xmi300x-fp8-tp8_vllm-latency-128in-128out"]]
    folds = {f.source: f for f in fit.leave_one_source_out(two, presets.FACTORS, 3)}
    assert len(folds) == 2
    for held, other in ((two[0], two[1]), (two[1], two[0])):
        fold = folds[held.source_group]
        assert {r.table for r in fold.rows} == {held.name}
        alone, _loss, _n = fit.fit([other], start=presets.FACTORS, max_evals=3)
        assert fold.factors == alone


def test_the_fit_finds_better_factors_than_a_bad_start() -> None:
    """The search itself, on the vLLM latency table (three fast replays per trial): from
    a memory efficiency halved, the loss drops and the factor climbs back."""
    table = [TABLES["vllm-buildkite-9515_latency_h200_32in-128out-batch8"]]
    bad = dataclasses.replace(presets.FACTORS, mbu=presets.FACTORS.mbu / 2)
    with fit.using(bad):
        start = fit.loss(fit.errors(table))
    got, got_loss, evals = fit.fit(table, start=bad, max_evals=12)
    assert got_loss < start and got.mbu > bad.mbu and evals <= 12
    assert bad != presets.FACTORS  # ``using`` restored the shipped factors


def test_no_fit_reads_memory_faster_than_a_stream_copy() -> None:
    """``mbu`` is searched up to ``fit.MBU_MAX`` (docs/hardware.md, "Fit": the share of
    the HBM bandwidth a stream copy reached, the most a step's reads can): a table that
    wants a faster step does not take it past that, and neither the shipped factors nor
    any fold's are above it."""
    table = [TABLES["vllm-buildkite-9515_latency_h200_32in-128out-batch8"]]
    slow = dataclasses.replace(presets.FACTORS, mbu=fit.MBU_MAX / 1.1, step_overhead_ms=20.0)
    got, _loss, _evals = fit.fit(table, start=slow, max_evals=6)
    assert got.mbu == fit.MBU_MAX  # it climbed to the bound and stopped there
    assert fit.FACTOR_BOUNDS["mbu"][1] == fit.MBU_MAX < 1.0
    assert RECORD["factors"]["mbu"] <= fit.MBU_MAX
    for source, factors in RECORD["leave_one_source_out"]["fold_factors"].items():
        assert factors["mbu"] <= fit.MBU_MAX, source


def test_a_trial_replays_only_the_tables_whose_factors_it_moves() -> None:
    """The fit's cache (``fit.quick_errors``): the rows are ``errors(quick=True)``'s, and
    a trial that moves only a factor a table does not use (the all-reduce at TP 1, FP8
    matmuls on a 16-bit table, 16-bit matmuls on an FP8 one) takes that table's rows from
    the earlier replay instead of replaying it."""
    tp1 = TABLES["tt-inference-server_qwen3-30b-a3b_1xa100_c1-sweep"]  # 16-bit, TP 1
    fp8 = TABLES["oracle-oci_llama-3.1-405b_8xmi300x-fp8-tp8_vllm-latency-128in-128out"]
    assert {"allreduce_us", "mfu_fp8"} & fit.uses(tp1) == set() and "mfu" in fit.uses(tp1)
    assert "mfu" not in fit.uses(fp8) and {"allreduce_us", "mfu_fp8"} <= fit.uses(fp8)
    both, f = [tp1, fp8], fit.START
    fit._QUICK_ROWS.clear()
    replays = []
    for moved in (f, dataclasses.replace(f, allreduce_us=f.allreduce_us * 2),
                  dataclasses.replace(f, mfu_fp8=f.mfu_fp8 * 1.2),
                  dataclasses.replace(f, mfu=f.mfu / 1.2), f):
        got = fit.quick_errors(both, moved)
        with fit.using(moved):
            assert got == fit.errors(both, quick=True)
        replays.append(len(fit._QUICK_ROWS))
    # both, then the FP8 table alone (all-reduce, FP8 matmuls), then the 16-bit table
    # alone (its matmuls), then nothing (the start again)
    assert replays == [2, 3, 4, 5, 5]


#: batch-1 decode of Llama 3.1/3.3 70B at TP8 on H100, the measurements the project keeps
#: (issue 41's must-show, goal 15 %): every one-client ITL of the DLI data set's 70B on
#: 8 × H100, BF16 and FP8, at 200 to 7,000 prompt tokens (docs/hardware.md "TP8 at batch 1")
TP8_H100_BATCH1 = ("nim-dli_llama-3-70b_8xh100-fp16-tp8_7000in-1000out",
                   "nim-dli_llama-3-70b_8xh100-fp16-tp8_one-client-sweep",
                   "nim-dli_llama-3-70b_8xh100-fp8-tp8_one-client-sweep")
#: the largest error docs/hardware.md states for them: with the shipped factors, and
#: predicted by the fold that never saw the DLI data set (FP8 misses the goal there)
TP8_H100_ERROR = {"BF16": 0.05, "FP8": 0.15}
TP8_H100_HELD_OUT_ERROR = {"BF16": 0.12, "FP8": 0.21}


def _tp8_h100_batch1(rows: list[fit.RowError]) -> dict[str, list[fit.RowError]]:
    one = [r for r in rows if r.table in TP8_H100_BATCH1 and r.metric == "itl_ms"
           and r.key.split("x")[0] == "1"]
    return {"FP8": [r for r in one if r.preset.endswith("/fp8w")],
            "BF16": [r for r in one if not r.preset.endswith("/fp8w")]}


def test_tp8_batch1_itl_on_h100_against_the_kept_measurements() -> None:
    """Llama 3 70B on 8 × H100 at one client (ITL), the 13 kept rows: within the 15 %
    goal with the shipped factors (BF16 −4.4 to −2.4 %, FP8 −14.9 to −11.8 %: the decode
    attention of that engine, "Decode attention", is what the 7,000-token rows needed);
    the fold that never saw the data set leaves BF16 at −10 to −11 % and FP8 at −18 to
    −20 %, as docs/hardware.md states."""
    shipped = _tp8_h100_batch1([r for name in TP8_H100_BATCH1 for r in _rows(name)])
    assert [len(shipped[k]) for k in ("BF16", "FP8")] == [6, 6]
    folds = RECORD["leave_one_source_out"]["fold_factors"]
    source = TABLES[TP8_H100_BATCH1[0]].source_group
    (fold,) = fit.replay_folds([TABLES[n] for n in TP8_H100_BATCH1], {source: folds[source]})
    held = _tp8_h100_batch1(fold.rows)
    for precision in ("BF16", "FP8"):
        for r in shipped[precision] + held[precision]:
            print(f"  {r.preset:30} {r.key:>12} published {r.published:6.2f} "
                  f"simulated {r.simulated:6.2f} ({r.error:+.1%})")
        assert max(abs(r.error) for r in shipped[precision]) <= TP8_H100_ERROR[precision]
        assert max(abs(r.error) for r in held[precision]) <= (
            TP8_H100_HELD_OUT_ERROR[precision])
    assert max(abs(r.error) for k in ("BF16", "FP8") for r in shipped[k]) <= 0.15


def test_tp8_batch1_on_mi300x_against_the_kept_measurement() -> None:
    """The TP8 batch-1 MI300X measurement among the fitted tables, 405B (FP8) on 8 ×
    MI300X at batch 1 (the batch's latency, 127 decode steps after one prefill): the
    errors docs/hardware.md states, with the shipped factors and predicted by the fold
    that never saw the source, both outside the 15 % goal (the 70B TP8 batch-1 MI300X
    rows, Argonne's, are an outside table: tests/sim/test_outside_tables.py)."""
    name = "oracle-oci_llama-3.1-405b_8xmi300x-fp8-tp8_vllm-latency-128in-128out"
    (row,) = [r for r in _rows(name) if r.key == "1x128/128"]
    source = TABLES[name].source_group
    folds = RECORD["leave_one_source_out"]["fold_factors"]
    (fold,) = fit.replay_folds([TABLES[name]], {source: folds[source]})
    (held,) = [r for r in fold.rows if r.key == "1x128/128"]
    for r in (row, held):
        print(f"\nmi300x: {r.preset} published {r.published} simulated "
              f"{r.simulated:.2f} ({r.error:+.1%})")
    assert abs(row.error) <= TP8_MI300X_ERROR + 0.005
    assert abs(held.error) <= TP8_MI300X_HELD_OUT_ERROR + 0.005


def test_tp8_batch1_decode_of_70b_fp8_is_the_vendors_order() -> None:
    """The issue's report of the vendors' static-batch measurements (Llama 3.1 70B FP8,
    TP8, batch 1: ~9–10 ms a token on 8 × H100 with TensorRT-LLM and on 8 × MI300X with
    vLLM; those tables are not kept here): a decode step at batch 1 with a 2,000-token
    context is within 15 % of 9.5 ms on both, where 14 ring hops per all-reduce gave
    ~16 ms."""
    for gpu in ("h100", "mi300x"):
        step = presets.resolve(f"llama-3.1-70b/{gpu}/tp8/fp8").step_ms(0, 1, 2000)
        print(f"{gpu}: {step:.2f} ms")
        assert step == pytest.approx(9.5, rel=0.15), gpu


#: per kept TP8 batch-1 preset: the terms of a decode step docs/hardware.md states ("TP8
#: at batch 1"), in ms: weights read, all-reduces, fixed time (with one sequence's host time)
TP8_BATCH1_TERMS = {
    "llama-3.1-70b/h100/tp8": (6.58, 3.21, 3.90),
    "llama-3.1-70b/h100/tp8/fp8": (3.29, 3.21, 3.90),
    "llama-3.1-405b/mi300x/tp8/fp8w": (11.96, 5.08, 4.05),
}


@pytest.mark.parametrize("name", sorted(TP8_BATCH1_TERMS))
def test_tp8_batch1_terms_are_the_documented_ones(name: str) -> None:
    """What a batch-1 decode step is made of at TP8 (the diagnosis of the two misses
    above): the weights' bytes at ``mbu`` of the HBM bandwidth dominate, then the
    all-reduces and the fixed time; the three add up to the step (short context, so the
    KV bytes are negligible and the step is memory-bound)."""
    p = presets.resolve(name)
    f = p.factors
    weights = p.weight_read_bytes(1) / (p.gpu.bandwidth_gbps * 1e9 * f.mbu) * 1e3
    allreduce = p.allreduce_s(1) * 1e3
    fixed = f.step_overhead_ms + p.model.layers * f.layer_us * 1e-3 + f.seq_us * 1e-3
    assert (weights, allreduce, fixed) == pytest.approx(TP8_BATCH1_TERMS[name], abs=0.01)
    assert p.step_ms(0, 1, 128) == pytest.approx(weights + allreduce + fixed, rel=0.01)
