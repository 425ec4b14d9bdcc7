"""Where the presets miss GPUStack's H100 runs (issue 41; docs/hardware.md, "Tables outside
the fit", "Why GPUStack's H100 runs miss").

Method: every run of GPUStack's performance lab on one H100 SXM and one A100 SXM 80GB
(vLLM v0.11.0, SGLang v0.5.5.post1, TensorRT-LLM v1.2.0rc1, each with its defaults; ``vllm
bench serve`` bursts of 500-1,000 requests sent at once) replayed through the presets as
``sim.presets.bench.burst`` replays the kept tables (mean lengths, the first prompt sent
alone first), and the simulated run time set against the published "Benchmark duration".
A run of the right length gives 1.00; below 1 the model is too fast. Qwen3-14B and Qwen3-8B
are not in the catalog: their shapes (``config.json``) are added here, for this
comparison only. Then
the KV pool the H100 run must have had (vLLM refuses to start when its pool holds less
than one request of the model's 40,960 tokens; the H100 serve command has no
``--max-model-len``, the A100 one has 32,768) against the preset's, and the lab's one
small-batch H100 run (Qwen3-8B, four clients). Virtual time: the figures do not depend
on the machine's load. Run from the repo root:

    .venv/bin/python bench/bench_gpustack_h100.py
"""

from __future__ import annotations

from workbench.sim.config import EngineConfig
from workbench.sim.presets import catalog, resolve
from workbench.sim.presets.bench import burst, closed_loop
from workbench.sim.presets.schedulers import engine_knobs

#: GPUStack's pages at 10e9444a (read 2026-12-06/07): docs/performance-lab/qwen3-32b/
#: {h100,a100}.md and qwen3-14b/{h100,a100}.md, "Benchmark duration (s)" of each run:
#: (model, engine, requests, mean input, mean output) -> {gpu: seconds}
RUNS: dict[tuple[str, str, int, int, int], dict[str, float]] = {
    ("qwen3-32b", "vllm-serve", 1000, 217, 201): {"h100": 178.01, "a100": 241.94},
    ("qwen3-32b", "sglang", 1000, 217, 202): {"h100": 247.94, "a100": 299.51},
    ("qwen3-32b", "trtllm", 1000, 217, 202): {"h100": 157.59, "a100": 203.88},
    ("qwen3-32b", "vllm-serve", 500, 4000, 200): {"h100": 976.29, "a100": 1141.94},
    ("qwen3-32b", "vllm-serve", 500, 2000, 100): {"h100": 328.04, "a100": 415.71},
    ("qwen3-32b", "vllm-serve", 1000, 128, 4): {"h100": 32.88, "a100": 49.57},
    ("qwen3-14b", "vllm-serve", 500, 4000, 200): {"h100": 227.57, "a100": 407.05},
    ("qwen3-14b", "vllm-serve", 500, 2000, 100): {"h100": 98.91, "a100": 175.66},
    ("qwen3-14b", "vllm-serve", 1000, 128, 4): {"h100": 22.72, "a100": 26.79},
}
#: the two Qwen3 shapes the catalog lacks (their ``config.json``), for this comparison only
EXTRA_MODELS = (
    catalog.Model("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, False,
                  "Qwen/Qwen3-14B config.json"),
    catalog.Model("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, False,
                  "Qwen/Qwen3-8B config.json"),
)
#: Qwen3's max_position_embeddings: the TensorRT-LLM command of the same pages serves
#: Qwen3-32B with --max_seq_len=40960
MAX_MODEL_LEN = 40960


def config(model: str, gpu: str, scheduler: str, **knobs: object) -> EngineConfig:
    return EngineConfig.from_knobs(**engine_knobs(scheduler, {
        "preset": f"{model}/{gpu}/tp1", **knobs}))


def main() -> None:
    for extra in EXTRA_MODELS:
        catalog.MODELS.setdefault(extra.name, extra)
    print("simulated / published run time (1.00: right; below: the model too fast)")
    print(f"{'model':10} {'engine':10} {'requests':>8} {'in/out':>10}   h100   a100"
          "   published h100/a100   simulated h100/a100")
    for (model, engine, n, isl, osl), published in RUNS.items():
        sim = {gpu: burst(config(model, gpu, engine), n, isl, osl, test_run=True).latency_ms
               / 1e3 for gpu in published}
        ratio = {gpu: sim[gpu] / published[gpu] for gpu in published}
        print(f"{model:10} {engine:10} {n:8d} {isl:>5}/{osl:<4}   {ratio['h100']:.2f}   "
              f"{ratio['a100']:.2f}   {published['a100'] / published['h100']:19.2f}   "
              f"{sim['a100'] / sim['h100']:19.2f}")
    print("\nqwen3-32b, a decode step over a full vLLM pool (sequences at mid-output): "
          "simulated against the published median ITL")
    for isl, osl, itl in ((4000, 200, {"h100": 43.38, "a100": 51.55}),
                          (2000, 100, {"h100": 44.80, "a100": 51.49})):
        for gpu in ("h100", "a100"):
            cap, context = config("qwen3-32b", gpu, "vllm-serve").capacity_tokens, isl + osl // 2
            seqs = cap // context
            ms = resolve(f"qwen3-32b/{gpu}/tp1").step_ms(0, seqs, seqs * context)
            print(f"  {gpu} {isl}/{osl}: {seqs} sequences, {ms:.2f} ms simulated, "
                  f"{itl[gpu]:.2f} ms published")
    pool = config("qwen3-32b", "h100", "vllm-serve")
    print(f"\nqwen3-32b/h100 under vllm-serve: a pool of {pool.capacity_tokens:,} tokens; "
          f"vLLM started without --max-model-len, so its pool held >= {MAX_MODEL_LEN:,}")
    for blocks in (pool.num_blocks, MAX_MODEL_LEN // pool.block_size):
        b = burst(config("qwen3-32b", "h100", "vllm-serve", num_blocks=blocks),
                  1000, 217, 201, test_run=True)
        print(f"  ShareGPT burst with {blocks * pool.block_size:,} tokens of KV: "
              f"{b.latency_ms / 1e3:.1f} s (published 178.01 s)")
    templated = burst(config("qwen3-32b", "h100", "vllm-serve"), 1000, 225, 201, test_run=True)
    print(f"  ShareGPT burst with Qwen3's chat template (~8 tokens) on each prompt (225 in): "
          f"{templated.latency_ms / 1e3:.1f} s")
    small = closed_loop(config("qwen3-8b", "h100", "vllm-serve"), 4, 233, 221,
                        requests=100, test_run=True)
    print(f"\nqwen3-8b/h100, vLLM, 4 clients, ShareGPT means (233 in, 221 out; "
          f"qwen3-8b/h100-latency.md): ITL {small.itl_ms:.2f} ms simulated, "
          f"mean TPOT 7.38 ms published")


if __name__ == "__main__":
    main()
