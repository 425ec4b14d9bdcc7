"""The hardware catalog: accelerators and models from public facts, each with its source.

Every number here is copied from the page named in its ``source`` (docs/hardware.md lists
them with the date they were read); none is estimated. Peak compute is the **dense**
tensor-core figure (datasheets often print the 2:4-sparse one, twice as large).
Interconnect bandwidth is per GPU and per direction (a datasheet's "900 GB/s NVLink" is
both directions: 450 GB/s each way). Model shapes are the ``config.json`` fields of the
Hugging Face checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the GPU fabrics an all-reduce is costed on (``presets.Preset.allreduce_s``; docs/hardware.md)
FABRICS = ("switch", "mesh", "pcie")

#: the latency, in µs, of each of a ring all-reduce's 2·(TP−1) steps between GPUs that
#: reach each other over PCIe: NCCL's own tuning model (``hwLat[PCI][Ring][LL]``, 1.0 µs
#: a step, the low-latency protocol it picks for small messages; docs/hardware.md
#: "All-reduce by fabric")
PCIE_RING_STEP_US = 1.0


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One GPU: memory (GB = 1e9 bytes), its bandwidth, dense peaks and the link between
    GPUs of one tensor-parallel group."""

    name: str
    memory_gb: float
    bandwidth_gbps: float  # HBM/GDDR GB/s
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense; 0: no FP8 tensor cores
    link_gbps: float  # GPU-to-GPU GB/s per direction (NVLink/xGMI; PCIe when none)
    host_link_gbps: float  # GPU-to-host GB/s per direction (PCIe)
    source: str
    reported_gb: float = 0.0  # memory as the driver reports it (nvidia-smi); 0: unknown
    #: how the GPUs of one tensor-parallel group reach each other (``FABRICS``): "switch"
    #: (NVLink through NVSwitch: every pair one switch crossing apart, the GPU's whole link
    #: bandwidth to any peer), "mesh" (xGMI: a direct link to each of ``mesh_peers`` peers,
    #: the bandwidth split over them) or "pcie" (no GPU link: a ring over PCIe)
    fabric: str = "switch"
    mesh_peers: int = 0  # direct links of a "mesh" GPU (MI300X: 7)
    #: the share of ``link_gbps`` a collective's bytes can reach, where a public
    #: measurement or model states it (MI300X xGMI: ~48 of 64 GB/s a link after CRC and
    #: protocol overhead; a PCIe Gen4 x16 link: NCCL's 24 of 32 GB/s; docs/hardware.md
    #: "All-reduce by fabric"); 1.0 where none was found
    link_usable: float = 1.0

    @property
    def usable_gb(self) -> float:
        """Device memory a serving engine's utilisation applies to: the driver's total
        where a public ``nvidia-smi`` shows it (80 GB parts report 85.5 GB: 80 GiB), else
        the datasheet's."""
        return self.reported_gb or self.memory_gb


@dataclass(frozen=True, slots=True)
class Model:
    """A transformer's shape (``config.json``); ``experts``/``active_experts`` 0 for a
    dense model, ``moe_intermediate`` the size of one expert's MLP (a MoE whose every
    layer is sparse has no dense ``intermediate``: 0)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    source: str
    experts: int = 0
    active_experts: int = 0
    moe_intermediate: int = 0

    @property
    def attention_params(self) -> int:
        """q, k, v and o projections of one layer."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden

    @property
    def expert_params(self) -> int:
        """One expert's gated MLP (gate, up, down) in one layer."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def mlp_params(self) -> int:
        """All MLP weights of one layer (every expert and the router for a MoE)."""
        if self.experts:
            return self.experts * self.expert_params + self.hidden * self.experts
        return 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        """Total parameters: layers, the input embedding and the output head."""
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (self.attention_params + self.mlp_params) + embed

    @property
    def active_matmul_params(self) -> int:
        """Weights one token multiplies by (2 FLOPs each): attention, the active experts
        (or the dense MLP) and the output head; the embedding lookup is not a matmul."""
        if self.experts:
            mlp = self.active_experts * self.expert_params + self.hidden * self.experts
        else:
            mlp = self.mlp_params
        return self.layers * (self.attention_params + mlp) + self.vocab * self.hidden

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        """K and V of every layer for one token, whole model (all GPUs together)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * kv_dtype_bytes


_NV = "NVIDIA datasheet as quoted by "
SMI = (" Driver total: nvidia-smi as listed in https://github.com/modal-labs/modal-client/"
       "pull/2797 (H100 81,559 MiB, A100 80GB 81,920 MiB, L40S 46,068 MiB).")
ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("h100", 80, 3350, 989.4, 1978.9, 450, 64,
                    _NV + "https://glennklockwood.com/garden/processors/h100 (dense Matrix "
                    "column; 80 GB HBM3, 3.35 TB/s, 900 GB/s NVLink, 128 GB/s PCIe Gen5) and "
                    "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html." + SMI,
                    reported_gb=85.52),
        Accelerator("h200", 141, 4800, 989.4, 1978.9, 450, 64,
                    "https://lzwjava.github.io/nvidia-h200-gpu-specs-en and "
                    "https://ai-hpc.github.io/ai-hardware-engineer-roadmap/ (8x-H200 page): "
                    "141 GB HBM3e, 4.8 TB/s, same Hopper tensor cores as H100 (1,979/3,958 "
                    "TFLOPS with sparsity, half dense), NVLink 4 900 GB/s"),
        Accelerator("b200", 192, 8000, 2250, 4500, 900, 128,
                    "https://glennklockwood.com/garden/processors/B200 (HGX B200 at 1,000 W: "
                    "BF16 2,250 / FP8 4,500 dense TFLOPS, 192 GB HBM3e, 8 TB/s, 2x900 GB/s "
                    "NVLink 5, PCIe Gen6 2x256 GB/s) and https://awesomeagents.ai/hardware/"
                    "nvidia-b200 (NVLink 5 1,800 GB/s)"),
        Accelerator("a100", 80, 2039, 312, 0, 300, 32,
                    "https://glennklockwood.com/garden/processors/A100 (A100 80G SXM4: "
                    "2.039 TB/s, BF16 312 dense, NVLink 300+300 GB/s, PCIe Gen4 32+32 GB/s; "
                    "no FP8)." + SMI, reported_gb=85.89),
        Accelerator("l40s", 48, 864, 362.05, 733, 32, 32,
                    "https://www.mullet.se/product.html?product_id=355414 and "
                    "https://www.itcreations.com/nvidia-gpu/nvidia-l40s-gpu-accelerator "
                    "(48 GB GDDR6, 864 GB/s, BF16 362 / FP8 733 dense, PCIe Gen4 x16 "
                    "64 GB/s bidirectional, no NVLink)." + SMI + " Usable PCIe share: NCCL's "
                    "topology model of a Gen4 x16 link, 16 lanes x 12 Gb/s = 24 of 32 GB/s "
                    "(https://github.com/NVIDIA/nccl src/graph/topo.cc, kvDictPciGen)",
                    reported_gb=48.30, fabric="pcie", link_usable=0.75),
        Accelerator("mi300x", 192, 5300, 1307.4, 2614.9, 448, 64,
                    "https://www.jaredwatkins.com/research/ai-accelerators/amd-instinct/"
                    "mi300-series/ (192 GB HBM3, 5.3 TB/s, ~1.3 PFLOPS FP16, ~2.6 PFLOPS FP8) "
                    "and https://gpu.blog/gpus/instinct-mi300x-mi300x (Infinity Fabric "
                    "896 GB/s aggregate: 448 each way); AMD's datasheet: 1,307.4 / 2,614.9. "
                    "Fabric: https://www.wheelersnetwork.com/2024/01/ (MI300X GPUs connect "
                    "directly over XGMI in a mesh; up to seven Infinity Fabric links a GPU, "
                    "128 GB/s bidirectional each); usable link share: "
                    "https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/"
                    "README.html (2025-03-02: 64 GB/s a link rated, ~48 GB/s usable, ~75 %)",
                    fabric="mesh", mesh_peers=7, link_usable=0.75),
    )
}

_HF = "https://huggingface.co/"
MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, False,
              _HF + "NbAiLab/nb-llama-3.1-8B/blob/main/config.json (copy of "
              "meta-llama/Llama-3.1-8B's config.json)"),
        Model("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, False,
              _HF + "failspy/llama-3-70B-Instruct-abliterated/blob/main/config.json (copy of "
              "meta-llama/Meta-Llama-3-70B-Instruct's config.json; 3.1 and 3.3 share the "
              "shape)"),
        Model("llama-3.3-70b", 80, 8192, 64, 8, 128, 28672, 128256, False,
              "same shape as llama-3.1-70b (Llama 3.3 70B reuses the Llama 3.1 70B "
              "architecture); " + _HF + "failspy/llama-3-70B-Instruct-abliterated/blob/main/"
              "config.json"),
        Model("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, False,
              _HF + "meta-llama/Llama-3.1-405B/blob/main/config.json as copied in public "
              "model tables (126 layers, hidden 16384, 128 heads, 8 KV heads, MLP 53248, "
              "vocab 128256; docs/hardware.md)"),
        Model("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, False,
              _HF + "meta-llama/Llama-2-7b/blob/main/config.json as copied in public model "
              "tables (32 layers, hidden 4096, 32 heads, no GQA, MLP 11008, vocab 32000; "
              "docs/hardware.md)"),
        Model("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, False,
              _HF + "ronnywebdevs1/d-m-1/blob/main/config.json (Qwen3ForCausalLM, the "
              "Qwen3-32B shape)"),
        Model("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 0, 151936, False,
              _HF + "RTP-LLM/Qwen3-Coder-30B-A3B-Instruct-RTPurbo/blob/main/config.json and "
              "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/"
              "qwen3_30b_a3b.yaml (48 layers, 128 experts, 8 active, expert size 768)",
              experts=128, active_experts=8, moe_intermediate=768),
        Model("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, False,
              _HF + "mistralai/Mixtral-8x7B-Instruct-v0.1/blob/"
              "eba92302a2861cdc0098cc54bc9f17cb2c47eb61/config.json",
              experts=8, active_experts=2, moe_intermediate=14336),
    )
}
