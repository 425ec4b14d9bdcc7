"""Hardware presets: the catalog's arithmetic, the preset grammar and its refusals."""

import dataclasses

import pytest

from workbench.sim.config import EngineConfig
from workbench.sim.presets import GPU_MEMORY_UTILIZATION, RESERVE_GB, Preset, resolve
from workbench.sim.presets.catalog import ACCELERATORS, MODELS


def test_parameter_counts_match_the_models_names() -> None:
    billions = {name: m.params / 1e9 for name, m in MODELS.items()}
    assert billions["llama-3.1-8b"] == pytest.approx(8.03, abs=0.01)
    assert billions["llama-3.3-70b"] == pytest.approx(70.55, abs=0.01)
    assert billions["qwen3-32b"] == pytest.approx(32.76, abs=0.01)
    assert billions["qwen3-30b-a3b"] == pytest.approx(30.53, abs=0.01)
    assert billions["mixtral-8x7b"] == pytest.approx(46.70, abs=0.01)
    assert MODELS["qwen3-30b-a3b"].active_matmul_params / 1e9 == pytest.approx(3.04, abs=0.01)
    assert all(a.source.count("https://") >= 1 for a in ACCELERATORS.values())
    assert all("huggingface.co" in m.source or "config" in m.source for m in MODELS.values())


def test_kv_blocks_are_memory_left_over_kv_bytes_per_token() -> None:
    p = resolve("llama-3.3-70b/h100/tp2/fp8")
    assert p.kv_bytes_per_token_gpu == 80 * 2 * 4 * 128  # 8 KV heads over 2 GPUs, FP8
    budget = (85.52 * GPU_MEMORY_UTILIZATION - RESERVE_GB) * 1e9 - p.weight_bytes / 2
    cfg = EngineConfig.from_knobs(preset=p.name)
    assert cfg.num_blocks == int(budget // (p.kv_bytes_per_token_gpu * 16)) == 30282
    assert cfg.request_overhead_ms == p.factors.request_overhead_ms
    # the caller's own knobs win over the preset's
    assert EngineConfig.from_knobs(preset=p.name, num_blocks=7).num_blocks == 7
    # block size changes the count, not the tokens
    big = EngineConfig.from_knobs(preset=p.name, block_size=32)
    assert abs(big.num_blocks * 32 - cfg.num_blocks * 16) < 32


def test_step_time_is_compute_or_memory_bound_and_attention_grows_with_context() -> None:
    p = resolve("llama-3.1-8b/h100/tp1")
    alone = p.step_ms(0, 1, 1000)
    # one decode is memory-bound: the weights once, plus its KV
    bytes_read = p.weight_bytes + 1000 * p.kv_bytes_per_token_gpu
    fixed = (p.factors.step_overhead_ms + 32 * p.factors.layer_us * 1e-3  # per step, per layer
             + p.factors.seq_us * 1e-3)  # and per decoding sequence (one here)
    assert alone == pytest.approx(bytes_read / (3350e9 * p.factors.mbu) * 1e3 + fixed)
    fresh = p.step_ms(4096, 0, 4096, 4096 * 4097 // 2)
    late = p.step_ms(4096, 0, 20000 + 4096, 4096 * 20000 + 4096 * 4097 // 2)
    assert late > fresh > alone  # the same chunk after 20,000 cached tokens costs more
    tp2 = resolve("llama-3.1-8b/h100/tp2")
    assert tp2.allreduce_s(1) > 0 == p.allreduce_s(1)


def test_a_serving_engine_pays_host_time_per_decoding_sequence() -> None:
    """``Factors.seq_us`` (docs/hardware.md, "Host time per sequence"): a serving
    engine's step pays ``seq_us`` for each decoding sequence beside its bytes and FLOPs
    (nothing for a prefill-only step); a compiled static loop pays none; 0 (a calibrated
    file written before it) charges nothing. The shipped factors charge it."""
    base = resolve("llama-3.1-8b/h100/tp1")
    f = base.factors
    assert f.seq_us > 0
    none = Preset(base.model, base.gpu, base.tp, base.fp8, dataclasses.replace(f, seq_us=0.0))
    for seqs in (1, 64, 250):
        kv = seqs * 700
        assert base.step_ms(0, seqs, kv) - none.step_ms(0, seqs, kv) == pytest.approx(
            seqs * f.seq_us * 1e-3)
    assert base.step_ms(2048, 0, 2048, 2048 * 2049 // 2) == none.step_ms(
        2048, 0, 2048, 2048 * 2049 // 2)
    static = dataclasses.replace(f, static_loop=1.0, static_step_ms=1.0)
    off = dataclasses.replace(static, seq_us=0.0)
    assert Preset(base.model, base.gpu, 1, False, static).step_ms(0, 250, 250 * 700) == (
        Preset(base.model, base.gpu, 1, False, off).step_ms(0, 250, 250 * 700))


def test_a_moe_layer_pays_its_routing_kernels_on_every_engine() -> None:
    """``Factors.moe_layer_us`` (docs/hardware.md, "MoE layer time"): every step of a MoE
    pays ``layers × moe_layer_us`` beside its experts' bytes and FLOPs, whatever its
    tokens and whether a serving engine or a compiled static loop runs it; a dense
    model pays nothing; 0 (a file written before it) charges nothing."""
    for name in ("qwen3-30b-a3b/a100/tp1", "mixtral-8x7b/l40s/tp4", "llama-3.1-8b/h100/tp1"):
        base = resolve(name)
        f = dataclasses.replace(base.factors, moe_layer_us=25.0)
        for loop in (0.0, 1.0):
            on = Preset(base.model, base.gpu, base.tp, base.fp8,
                        dataclasses.replace(f, static_loop=loop, static_step_ms=1.0))
            off = Preset(base.model, base.gpu, base.tp, base.fp8,
                         dataclasses.replace(f, static_loop=loop, static_step_ms=1.0,
                                             moe_layer_us=0.0))
            want = base.model.layers * 25.0 * 1e-3 if base.model.experts else 0.0
            for step in ((0, 1, 200), (128, 0, 0), (0, 64, 64 * 2000), (2048, 3, 9000)):
                assert on.step_ms(*step) - off.step_ms(*step) == pytest.approx(want)


def test_a_moe_reads_only_the_experts_its_tokens_route_to() -> None:
    p = resolve("qwen3-30b-a3b/h100/tp1")
    one, many = p.weight_read_bytes(1), p.weight_read_bytes(512)
    assert one < many <= p.weight_bytes and many == pytest.approx(p.weight_bytes, rel=1e-3)


def test_a_compiled_static_loop_pays_its_own_fixed_step() -> None:
    """``Factors.static_loop`` (a compiled static-batch benchmark, docs/hardware.md "Fixed
    time by engine"): every step pays ``static_step_ms`` where a serving engine's pays
    ``step_overhead_ms``; the per-layer time, the bytes, the FLOPs and the all-reduce are
    the same; off in the shipped factors."""
    for name in ("llama-2-7b/h100/tp1", "mixtral-8x7b/l40s/tp4"):
        base = resolve(name)
        f = base.factors
        assert not f.static_loop  # off unless a table or calibration says
        on = dataclasses.replace(f, static_loop=1.0, static_step_ms=1.25)
        p = Preset(base.model, base.gpu, base.tp, base.fp8, on)
        for step in ((0, 1, 200), (128, 0, 0), (0, 64, 64 * 2000), (2048, 3, 9000)):
            assert base.step_ms(*step) - p.step_ms(*step) == pytest.approx(
                f.step_overhead_ms - 1.25 + step[1] * f.seq_us * 1e-3)  # no host time
        # the switch off, the factor changes nothing
        idle = dataclasses.replace(f, static_step_ms=0.0)
        assert Preset(base.model, base.gpu, base.tp, base.fp8, idle).step_ms(0, 1, 200) == (
            base.step_ms(0, 1, 200))
    fixed = resolve("llama-2-7b/h100/tp1")
    zero = dataclasses.replace(fixed.factors, static_loop=1.0, static_step_ms=0.0)
    m = fixed.model
    # a decode step of one sequence: its bytes at mbu, then the layers' fixed time alone
    bytes_ms = (fixed.weight_read_bytes(1) + 200 * fixed.kv_bytes_per_token_gpu) / (
        fixed.gpu.bandwidth_gbps * 1e9 * zero.mbu) * 1e3
    assert Preset(m, fixed.gpu, 1, False, zero).step_ms(0, 1, 200) == pytest.approx(
        bytes_ms + m.layers * zero.layer_us * 1e-3)


def test_a_collapsed_router_reads_the_same_k_experts_whatever_the_tokens() -> None:
    """``Factors.collapsed_routing`` (a fake-weight benchmark's random gate, docs/hardware.md
    "MoE routing"): every token of a step goes to the same k of E experts, so a step reads
    the dense part and k/E of the experts at any batch; off in the shipped factors, where
    B tokens touch each expert with probability 1 − (1 − k/E)^B."""
    base = resolve("mixtral-8x7b/a100/tp2")
    m = base.model
    assert not base.factors.collapsed_routing  # off unless a table or calibration says
    experts = m.layers * m.experts * m.expert_params
    dense = m.params - experts
    assert base.weight_read_bytes(1) == pytest.approx((dense + experts * 2 / 8) * 2 / 2)
    assert base.weight_read_bytes(16) == pytest.approx(
        (dense + experts * (1 - (6 / 8) ** 16)) * 2 / 2)
    on = dataclasses.replace(base.factors, collapsed_routing=1.0)
    p = Preset(m, base.gpu, base.tp, base.fp8, on)
    for tokens in (1, 16, 512):
        assert p.weight_read_bytes(tokens) == pytest.approx((dense + experts * 2 / 8) * 2 / 2)
    assert p.weight_read_bytes(1) == base.weight_read_bytes(1)  # one token: k either way
    # a decode step of 16 sequences: memory-bound, the 16 × 2 expert reads collapse to 2
    saved = (base.weight_read_bytes(16) - p.weight_read_bytes(16)) / (
        base.gpu.bandwidth_gbps * 1e9 * on.mbu) * 1e3
    assert base.step_ms(0, 16, 16 * 200) - p.step_ms(0, 16, 16 * 200) == pytest.approx(saved)
    dense_model = resolve("llama-3.1-8b/h100/tp1")
    assert Preset(dense_model.model, dense_model.gpu, 1, False, on).weight_read_bytes(
        64) == dense_model.weight_bytes  # a dense model has no router to collapse


@pytest.mark.parametrize(("text", "match"), [
    ("llama-3.1-8b/h100", "expected MODEL/GPU/tpN"),
    ("llama-9b/h100/tp1", "unknown model 'llama-9b'"),
    ("llama-3.1-8b/h900/tp1", "unknown GPU 'h900'"),
    ("llama-3.1-8b/h100/tp3", "tensor parallelism must be one of"),
    ("llama-3.1-8b/a100/tp1/fp8", "a100 has no FP8 tensor cores"),
    ("llama-3.1-70b/h100/tp1", "leave no KV cache"),
])
def test_bad_presets_name_the_part_that_is_wrong(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_knobs(preset=text)


def test_fp8w_keeps_a_16_bit_kv_cache_under_fp8_weights() -> None:
    fp8, fp8w = resolve("llama-3.1-8b/h100/tp1/fp8"), resolve("llama-3.1-8b/h100/tp1/fp8w")
    assert fp8w.name == "llama-3.1-8b/h100/tp1/fp8w"
    assert fp8w.weight_bytes == fp8.weight_bytes  # one byte a weight, both
    assert fp8w.kv_bytes_per_token_gpu == 2 * fp8.kv_bytes_per_token_gpu == 32 * 2 * 8 * 128 * 2
    assert fp8w.peak_flops == fp8.peak_flops
    # twice the KV bytes: half the blocks, and a decode over a long context reads more
    assert fp8w.num_blocks(16) == pytest.approx(fp8.num_blocks(16) / 2, abs=1)
    assert fp8w.step_ms(0, 64, 64 * 4000) > fp8.step_ms(0, 64, 64 * 4000)
    with pytest.raises(ValueError, match="a100 has no FP8 tensor cores"):
        resolve("llama-3.1-8b/a100/tp1/fp8w")


def test_an_all_reduce_is_costed_on_the_gpus_fabric() -> None:
    """docs/hardware.md, "All-reduce by fabric": through NVSwitch and over an xGMI mesh
    one all-reduce pays one crossing's latency whatever the TP; a PCIe ring pays it once
    and NCCL's 1 µs per-step PCIe latency for each of its 2·(TP−1) steps; the bytes go at
    the link's bandwidth (the mesh's split over its peer links, each at the ~48 of 64 GB/s
    AMD measured usable on an xGMI link; PCIe Gen4 x16 at NCCL's 24 of 32 GB/s)."""
    f = resolve("llama-3.1-70b/h100/tp8").factors
    one = f.allreduce_us * 1e-6 * 2 * 80  # two all-reduces × 80 layers, latency only
    switch = {tp: resolve(f"llama-3.1-70b/h100/tp{tp}").allreduce_s(1) for tp in (2, 4, 8)}
    mesh = {tp: resolve(f"llama-3.1-70b/mi300x/tp{tp}").allreduce_s(1) for tp in (2, 4, 8)}
    for tp in (2, 4, 8):  # one token: latency-bound
        assert switch[tp] == pytest.approx(one, rel=1e-2)
        assert mesh[tp] == pytest.approx(one, rel=2e-2)
    ring = {tp: resolve(f"mixtral-8x7b/l40s/tp{tp}").allreduce_s(1) for tp in (2, 4)}
    for tp in (2, 4):  # 32 layers: the crossing once, then 2·(TP−1) steps of 1 µs
        one_token = 2 * (tp - 1) / tp * 4096 * 2 / 24e9
        assert ring[tp] == pytest.approx(
            2 * 32 * ((f.allreduce_us + 2 * (tp - 1) * 1.0) * 1e-6 + one_token), rel=1e-9)
    big = 8192
    l40s = resolve("mixtral-8x7b/l40s/tp4")  # 4,096 wide; PCIe Gen4 x16 at 24 GB/s usable
    assert l40s.allreduce_s(big) == pytest.approx(
        2 * 32 * ((f.allreduce_us + 6.0) * 1e-6 + 2 * 3 / 4 * big * 4096 * 2 / 24e9), rel=1e-9)
    # bandwidth: 8,192 tokens × 8,192 × 2 B, 2·(TP−1)/TP of it moved
    size = big * 8192 * 2
    h100 = resolve("llama-3.1-70b/h100/tp8")
    assert h100.allreduce_s(big) == pytest.approx(
        2 * 80 * (f.allreduce_us * 1e-6 + 2 * 7 / 8 * size / 450e9), rel=1e-9)
    mi2 = resolve("llama-3.1-70b/mi300x/tp2")  # one of seven 64 GB/s peer links in use
    assert mi2.allreduce_s(big) == pytest.approx(
        2 * 80 * (f.allreduce_us * 1e-6 + 2 * 1 / 2 * size / 48e9), rel=1e-9)
    mi8 = resolve("llama-3.1-70b/mi300x/tp8")  # all seven, ~48 GB/s usable each
    assert mi8.allreduce_s(big) == pytest.approx(
        2 * 80 * (f.allreduce_us * 1e-6 + 2 * 7 / 8 * size / (7 * 48e9)), rel=1e-9)


def test_tp8_batch1_decode_pays_no_ring_of_hops() -> None:
    """The issue's TP8 case: a 70B decode step at batch 1 on 8 GPUs of a switch or a mesh
    costs the weights' read plus one crossing per all-reduce, far below 14 ring hops."""
    for gpu in ("h100", "mi300x"):
        p = resolve(f"llama-3.1-70b/{gpu}/tp8/fp8")
        f = p.factors
        ring = 2 * 80 * 14 * f.allreduce_us * 1e-3
        step = p.step_ms(0, 1, 1000)
        assert p.allreduce_s(1) * 1e3 < ring / 10
        assert step < 15.0, (gpu, step)


def test_small_gemms_reach_less_of_the_peak() -> None:
    p = resolve("llama-3.1-8b/h100/tp1")
    half = p.factors.gemm_half_tokens
    assert half > 0
    n = max(1, round(half))  # the fitted half need not be a whole number of rows
    assert p.gemm_efficiency(n) == pytest.approx(p.mfu * n / (n + half), rel=1e-9)
    assert p.gemm_efficiency(n) == pytest.approx(p.mfu / 2, rel=0.02)
    assert p.gemm_efficiency(100_000) == pytest.approx(p.mfu, rel=0.01)


def test_fp8_matmuls_reach_their_own_share_of_the_doubled_peak() -> None:
    """``mfu_fp8`` (docs/hardware.md, "Fit"): an FP8 preset's compute-bound step is its
    16-bit twin's scaled by the peaks and the two efficiencies; same FLOPs."""
    bf16, fp8 = resolve("llama-3.1-8b/h100/tp1"), resolve("llama-3.1-8b/h100/tp1/fp8")
    assert bf16.mfu == bf16.factors.mfu
    assert fp8.mfu == (fp8.factors.mfu_fp8 or fp8.factors.mfu)
    attn = 8192 * 8193 // 2
    over = bf16.factors.step_overhead_ms + 32 * bf16.factors.layer_us * 1e-3
    slow, fast = (p.step_ms(8192, 0, 8192, attn) - over for p in (bf16, fp8))
    assert fast / slow == pytest.approx((989.4 * bf16.mfu) / (1978.9 * fp8.mfu), rel=1e-6)


def test_unsplit_decode_attention_waits_for_one_blocks_pass_over_the_context() -> None:
    """An engine whose decode attention runs one thread block per (sequence, head) over the
    whole context (``Factors.unsplit_attention``): per layer, one block reads its head's K
    and V of every context token at ``attn_block_share`` of the HBM bandwidth; the step
    takes that instead of the KV's bytes when it is longer, whatever the TP. Off (the
    shipped presets: an engine that splits the context), the step is the bytes' alone."""
    import dataclasses

    from workbench.sim.presets import Preset

    base = resolve("llama-3.1-70b/h100/tp8")
    assert not base.factors.unsplit_attention  # off unless a table or calibration says
    assert base.unsplit_attention_s(0, 1, 7000) == 0.0
    on = dataclasses.replace(base.factors, unsplit_attention=1.0, attn_block_share=0.017)
    p = Preset(base.model, base.gpu, base.tp, base.fp8, on)
    per_token = 80 * 2 * 128 * 2 / (3350e9 * 0.017)  # layers × one head's K+V bytes / block
    assert p.unsplit_attention_s(0, 1, 7000) == pytest.approx(7000 * per_token)
    kv_bytes_s = 7000 * base.kv_bytes_per_token_gpu / (3350e9 * base.factors.mbu)
    extra = p.step_ms(0, 1, 7000) - base.step_ms(0, 1, 7000)
    assert extra == pytest.approx((7000 * per_token - kv_bytes_s) * 1e3)
    # ~9 ns per context token and layer on H100: 7,000 tokens add ~5 ms to a 70B step
    assert 4.5 < extra < 5.5
    # the mean context of the step's sequences, not their sum; TP does not change it
    assert p.unsplit_attention_s(0, 4, 4 * 7000) == pytest.approx(7000 * per_token)
    tp4 = Preset(base.model, base.gpu, 4, base.fp8, on)
    assert tp4.unsplit_attention_s(0, 1, 7000) == pytest.approx(7000 * per_token)
    # many sequences: the KV's bytes are the longer, the switch changes nothing
    assert p.step_ms(0, 256, 256 * 7000) == pytest.approx(
        Preset(base.model, base.gpu, base.tp, base.fp8,
               dataclasses.replace(on, unsplit_attention=0.0)).step_ms(0, 256, 256 * 7000))
