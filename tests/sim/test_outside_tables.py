"""Tables kept outside the fit (``workbench/data/measurements/outside``; docs/hardware.md,
"Tables outside the fit"): never seen by the fit, its record or the stated errors, each
replayed with the shipped factors under the scheduler of the engine it ran on and under
the other, its medians held to the figures docs/hardware.md states."""

import dataclasses
import json
from statistics import linear_regression

import pytest

import workbench.sim.presets as presets
from workbench.sim.config import EngineConfig
from workbench.sim.presets import fit
from workbench.sim.presets.bench import burst
from workbench.sim.presets.schedulers import engine_knobs
from workbench.sim.presets.tables import OUTSIDE_DIR, load_tables

TABLES = {t.name: t for t in load_tables(OUTSIDE_DIR)}
SGLANG = "gpustack_qwen3-32b_h100-a100-bf16-tp1_sglang-0.5.5-sharegpt-burst"
VLLM = "gpustack_qwen3-32b_h100-a100-bf16-tp1_vllm-0.11.0-sharegpt-burst"
#: Llama 3 70B at batch 1 on 1-8 x MI300X (vLLM 0.6.1, FP16): the kept TP8 batch-1 MI300X
#: measurement of a 70B model (issue 41's must-show; docs/hardware.md "TP8 at batch 1")
ARGONNE = "argonne-llm-inference-bench_llama-3-70b_mi300x-fp16-tp1-8_vllm-0.6.1-latency"
#: the same harness, model, lengths and batch on 4 x H100: the control for its miss
ARGONNE_H100 = "argonne-llm-inference-bench_llama-3-70b_4xh100-fp16-tp4_vllm-latency"
#: the same MI300X build on Llama 3 8B at 2,048 / 2,048, TP 1-8: its fixed time on 32
#: layers, and its cost of tensor parallelism apart from the weights' read
ARGONNE_8B = "argonne-llm-inference-bench_llama-3-8b_mi300x-fp16-tp1-8_vllm-0.6.1-latency"
#: Qwen3-32B's max_position_embeddings (the same pages serve it with --max_seq_len=40960)
MAX_MODEL_LEN = 40960

#: per (table, scheduler replayed with): metric class -> the median absolute error
#: docs/hardware.md states (shipped factors, rounded up to the next percent)
BOUNDS: dict[tuple[str, str], dict[str, float]] = {
    (SGLANG, "sglang"): {"ttft": 0.33, "itl": 0.30, "throughput": 0.56},
    (SGLANG, "vllm-serve"): {"ttft": 0.50, "itl": 0.31, "throughput": 1.01},
    (VLLM, "vllm-serve"): {"ttft": 0.31, "itl": 0.29, "throughput": 0.52},
    (VLLM, "sglang"): {"ttft": 0.14, "itl": 0.60, "throughput": 0.18},
    # one request at a time: both schedulers run it alike
    (ARGONNE, "vllm"): {"latency": 0.47},
    (ARGONNE, "sglang"): {"latency": 0.47},
    (ARGONNE_H100, "vllm"): {"latency": 0.07},
    (ARGONNE_H100, "sglang"): {"latency": 0.07},
    (ARGONNE_8B, "vllm"): {"latency": 0.36},
    (ARGONNE_8B, "sglang"): {"latency": 0.36},
}
_ROWS: dict[tuple[str, str], list[fit.RowError]] = {}


def rows(name: str, scheduler: str) -> list[fit.RowError]:
    """``name``'s rows replayed with the shipped factors under ``scheduler``."""
    if (name, scheduler) not in _ROWS:
        table = TABLES[name]
        _ROWS[name, scheduler] = fit.table_errors(
            dataclasses.replace(table, meta={**table.meta, "scheduler": scheduler}))
    return _ROWS[name, scheduler]


def test_the_outside_tables_are_never_seen_by_the_fit() -> None:
    record = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))
    fitted = {t.name for t in fit.load_tables()}
    assert set(TABLES) == {SGLANG, VLLM, ARGONNE, ARGONNE_H100, ARGONNE_8B}
    for name, table in TABLES.items():
        assert table.meta["source"].startswith("https://") and table.meta.get("read")
        assert table.meta["role"].startswith("outside") and table.kind == "burst"
        assert name not in fitted
        assert name not in record["fitted_on"] + record["never_fitted"]
    assert TABLES[SGLANG].meta["scheduler"] == "sglang"
    assert TABLES[VLLM].meta["scheduler"] == "vllm-serve"
    assert {TABLES[n].meta["scheduler"] for n in (ARGONNE, ARGONNE_H100, ARGONNE_8B)} == {
        "vllm"}


@pytest.mark.parametrize(("name", "scheduler"), sorted(BOUNDS))
def test_an_outside_table_under_each_scheduler(name: str, scheduler: str) -> None:
    got = rows(name, scheduler)
    print(f"\n{name} under {scheduler} ({TABLES[name].meta['source']})")
    for r in got:
        print(f"  {r.preset:22} {r.metric:12} published {r.published:11.2f} "
              f"simulated {r.simulated:11.2f} error {r.error:+.1%}")
    medians = {k: v for k, v in fit.summary(got).items() if k != "all"}
    bound = BOUNDS[name, scheduler]
    assert set(medians) == set(bound), (medians, bound)
    for metric, limit in bound.items():
        # the median rounded up to the next percent, no looser (as the kept tables')
        assert limit - 0.015 < medians[metric] <= limit + 0.005, (
            name, scheduler, metric, medians[metric])


def test_sglang_scheduling_gives_the_two_engines_measured_ratios() -> None:
    """The same GPUs, model and load on both engines (H100, A100): SGLang's mean TPOT was
    0.66 and 0.50 of vLLM's, its throughput 0.72 and 0.81, its mean TTFT 1.48 and 1.32
    times; the embedded engine's ``sglang`` scheduling (its KV pool, batches and
    admission) against its ``vllm-serve`` one gives 0.64 and 0.50, 0.72 and 0.85, 1.51 and
    1.24 (docs/hardware.md, "Tables outside the fit")."""
    def by(rows_: list[fit.RowError], metric: str) -> dict[str, fit.RowError]:
        return {r.preset.split("/")[1]: r for r in rows_ if r.metric == metric}

    for metric, published, simulated in (
            ("tpot_ms", {"h100": 0.66, "a100": 0.50}, {"h100": 0.645, "a100": 0.497}),
            ("total_tok_s", {"h100": 0.72, "a100": 0.81}, {"h100": 0.721, "a100": 0.855}),
            ("ttft_ms", {"h100": 1.48, "a100": 1.32}, {"h100": 1.512, "a100": 1.241})):
        sg, vl = by(rows(SGLANG, "sglang"), metric), by(rows(VLLM, "vllm-serve"), metric)
        for gpu in ("h100", "a100"):
            assert sg[gpu].published / vl[gpu].published == pytest.approx(
                published[gpu], abs=0.006), (metric, gpu)
            assert sg[gpu].simulated / vl[gpu].simulated == pytest.approx(
                simulated[gpu], abs=0.006), (metric, gpu)


def _serve(gpu: str, **knobs: object) -> EngineConfig:
    return EngineConfig.from_knobs(**engine_knobs("vllm-serve", {
        "preset": f"qwen3-32b/{gpu}/tp1", **knobs}))


def test_the_h100_pool_is_below_what_the_source_run_needed_and_would_not_slow_it() -> None:
    """vLLM refuses to start when its KV pool cannot hold one request of the model's
    40,960 tokens: the H100 run (no --max-model-len) had at least that, the A100 one
    (--max-model-len 32768) less. The preset's H100 pool is smaller; at the bound the
    ShareGPT burst runs faster still, so the pool is not why the replay is too fast
    (docs/hardware.md, "Why GPUStack's H100 runs miss")."""
    h100, a100 = _serve("h100"), _serve("a100")
    assert h100.capacity_tokens == 36016 < MAX_MODEL_LEN
    assert 32768 <= a100.capacity_tokens == 37296 < MAX_MODEL_LEN
    ms = {blocks: burst(_serve("h100", num_blocks=blocks), 1000, 217, 201,
                        test_run=True).latency_ms
          for blocks in (h100.num_blocks, MAX_MODEL_LEN // h100.block_size)}
    assert ms[h100.num_blocks] == pytest.approx(97_200, rel=0.005)
    assert ms[MAX_MODEL_LEN // h100.block_size] == pytest.approx(89_900, rel=0.005)
    published_ms = (217_393 + 201_422) / 2352.82 * 1e3  # the table's row: 178.0 s
    assert max(ms.values()) < 0.55 * published_ms


def test_the_lab_h100_prefill_bound_run_gained_half_what_the_model_gives() -> None:
    """GPUStack's 1,000 × 128-token bursts (vLLM, fitted tables): the H100 run was 1.51
    times as fast as the A100 one; the model makes it 3.21 times (the dense BF16 peaks
    differ 3.17 times), running the H100 burst in 0.38 of its published time and the
    A100's in 0.80 (docs/hardware.md, "Why GPUStack's H100 runs miss")."""
    published = {r["preset"].split("/")[1]: float(r["total_tok_s"])
                 for t in fit.load_tables() if t.name.startswith("gpustack_qwen3-32b_1x")
                 for r in t.rows if r["isl"] == "128"}
    simulated = {gpu: burst(_serve(gpu), 1000, 128, 4, test_run=True).total_tok_s
                 for gpu in ("h100", "a100")}
    assert published["h100"] / published["a100"] == pytest.approx(1.51, abs=0.005)
    assert simulated["h100"] / simulated["a100"] == pytest.approx(3.21, abs=0.005)
    assert published["h100"] / simulated["h100"] == pytest.approx(0.38, abs=0.005)
    assert published["a100"] / simulated["a100"] == pytest.approx(0.80, abs=0.005)


def _argonne_per_token(name: str = ARGONNE) -> dict[int, dict[int, tuple[float, float]]]:
    """Argonne's batch-1 rows as ms a token (the batch's latency over its output tokens,
    the prefill included: under 1 % of it at 2,048 tokens), published and simulated
    (the shipped factors, ``vllm`` scheduling): tensor parallelism -> length -> pair."""
    out: dict[int, dict[int, tuple[float, float]]] = {}
    for r in rows(name, "vllm"):
        tp, osl = presets.parse(r.preset)[2], int(r.key.split("/")[1])
        out.setdefault(tp, {})[osl] = (r.published / osl, r.simulated / osl)
    return out


def test_tp8_batch1_on_mi300x_against_the_kept_70b_measurement() -> None:
    """Issue 41's must-show on MI300X, against the one 70B TP8 batch-1 measurement kept
    (Llama 3 70B FP16 on 8 x MI300X, vLLM 0.6.1, 128-2,048 in and out): the model gives
    11.3 ms a token where that build took 20.3-25.4 ms, -44 to -55 % at every length --
    the 15 % goal is not met, and this holds the documented miss (docs/hardware.md,
    "TP8 at batch 1": the cause is the next test's)."""
    tp8 = _argonne_per_token()[8]
    assert sorted(tp8) == [128, 256, 512, 1024, 2048]
    for osl, (published, simulated) in tp8.items():
        print(f"  tp8 {osl:5}/{osl:<5} published {published:6.2f} ms a token, "
              f"simulated {simulated:6.2f} ({simulated / published - 1:+.1%})")
        assert simulated == pytest.approx(11.3, abs=0.1)
        assert -0.56 <= simulated / published - 1 <= -0.44
    assert tp8[2048][0] == pytest.approx(21.91, abs=0.01)


def test_the_argonne_build_paid_a_fixed_step_the_presets_do_not() -> None:
    """Why the MI300X 70B rows miss: at 2,048 / 2,048 the published ms a token at TP 1,
    2, 4 and 8 lie on a line in the weights each GPU reads (141.1 GB / TP) whose slope is
    3.84 TB/s (72 % of the HBM's 5.3; the preset's ``mbu`` 0.8 gives 4.24) and whose
    intercept is 17.8 ms a step -- paid at TP 1 too, where there is no all-reduce. The
    preset's fixed time and all-reduces at TP 8 are 7.1 ms: the gap is a per-step cost
    of that 2024 ROCm build (~0.22 ms a layer), not the weights' read or the fabric
    (docs/hardware.md, "TP8 at batch 1")."""
    at = _argonne_per_token()
    tps = (1, 2, 4, 8)
    gb = [presets.resolve(f"llama-3.1-70b/mi300x/tp{tp}").weight_read_bytes(1) / 1e9
          for tp in tps]
    slope, intercept = linear_regression(gb, [at[tp][2048][0] for tp in tps])
    print(f"\npublished: {1 / slope:.2f} TB/s, fixed {intercept:.1f} ms a step")
    assert gb[0] == pytest.approx(141.1, abs=0.05)
    assert 1 / slope == pytest.approx(3.84, abs=0.02)
    assert intercept == pytest.approx(17.8, abs=0.1)
    p = presets.resolve("llama-3.1-70b/mi300x/tp8")
    f = p.factors
    fixed = (f.step_overhead_ms + p.model.layers * f.layer_us * 1e-3 + f.seq_us * 1e-3
             + p.allreduce_s(1) * 1e3)
    assert fixed == pytest.approx(7.11, abs=0.01) and fixed < intercept / 2


def test_the_same_harness_on_h100_is_where_the_model_says() -> None:
    """The control: Argonne's harness, model, lengths and batch on 4 x H100 (vLLM of
    2024) are within +5.7 to +6.7 % of the model at every length, where the MI300X TP4
    row misses by -42.7 %. Published, the MI300X at TP4 took 27.2 ms a token against the
    H100's 19.2 with 1.58 times its HBM bandwidth; simulated it takes 15.5 against 20.4
    (docs/hardware.md, "TP8 at batch 1")."""
    h100, mi300x = _argonne_per_token(ARGONNE_H100)[4], _argonne_per_token()[4][2048]
    assert sorted(h100) == [128, 256, 512, 1024, 2048]
    for published, simulated in h100.values():
        assert 0.05 <= simulated / published - 1 <= 0.07
    assert mi300x[0] / h100[2048][0] == pytest.approx(1.416, abs=0.005)
    assert mi300x[1] / h100[2048][1] == pytest.approx(0.762, abs=0.005)
    hbm = {gpu: presets.resolve(f"llama-3.1-70b/{gpu}/tp4").gpu.bandwidth_gbps
           for gpu in ("h100", "mi300x")}
    assert hbm["mi300x"] / hbm["h100"] == pytest.approx(1.58, abs=0.005)


def test_the_argonne_build_paid_its_fixed_step_on_the_8b_too_with_graphs_on() -> None:
    """The same MI300X build on Llama 3 8B (2,048 / 2,048, TP 1-8), its weights' read
    taken at the 70B line's 3.84 TB/s: at TP1 5.57 ms a step are left, 0.174 ms a layer
    over 32 layers where the 70B's 17.8 ms is 0.223 over 80 -- a cost per layer of that
    build, paid with HIP graphs on (its script leaves ``--enforce-eager`` off). At TP 2,
    4 and 8 a step costs 2.54, 3.20 and 3.00 ms more than at TP1: it appears at TP2 and
    does not grow with TP, as the preset's mesh all-reduce (one crossing) has it, but at
    40-50 us for each of the 64 all-reduces where the preset charges 20 (1.28-1.29 ms a
    step): RCCL, the custom all-reduce being off on ROCm in vLLM 0.6. The model misses
    the rows by -21.7 % at TP1 to -39.4 % at TP8 (docs/hardware.md, "TP8 at batch 1")."""
    at = _argonne_per_token(ARGONNE_8B)
    tps = (1, 2, 4, 8)
    assert sorted(at) == list(tps) and all(sorted(at[tp]) == [2048] for tp in tps)
    p = {tp: presets.resolve(f"llama-3.1-8b/mi300x/tp{tp}") for tp in tps}
    fixed = {tp: at[tp][2048][0] - p[tp].weight_read_bytes(1) / 1e9 / 3.84 for tp in tps}
    assert fixed[1] == pytest.approx(5.57, abs=0.005)
    assert fixed[1] / p[1].model.layers == pytest.approx(0.174, abs=0.0005)
    tp1_70b = presets.resolve("llama-3.1-70b/mi300x/tp1")
    _, intercept = linear_regression(
        [presets.resolve(f"llama-3.1-70b/mi300x/tp{tp}").weight_read_bytes(1) / 1e9
         for tp in tps], [_argonne_per_token()[tp][2048][0] for tp in tps])
    assert intercept / tp1_70b.model.layers == pytest.approx(0.223, abs=0.0005)
    extra = {tp: fixed[tp] - fixed[1] for tp in (2, 4, 8)}
    assert [round(extra[tp], 2) for tp in (2, 4, 8)] == [2.54, 3.20, 3.00]
    allreduces = 2 * p[8].model.layers
    assert allreduces == 64
    assert all(0.039 < extra[tp] / allreduces < 0.051 for tp in extra)
    for tp in (2, 4, 8):
        assert p[tp].allreduce_s(1) * 1e3 == pytest.approx(1.285, abs=0.007)
    errors = {tp: at[tp][2048][1] / at[tp][2048][0] - 1 for tp in tps}
    assert errors[1] == pytest.approx(-0.217, abs=0.0005)
    assert errors[8] == pytest.approx(-0.394, abs=0.0005)
