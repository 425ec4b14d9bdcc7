"""Model × accelerator presets: KV capacity and step times from first principles.

``--engine preset=MODEL/GPU/tpN[/fp8|/fp8w]`` (``resolve``) names a model and an
accelerator of the catalog (``presets.catalog``), the tensor parallelism and, optionally,
FP8 weights and KV cache (``/fp8``) or FP8 weights with a 16-bit KV cache (``/fp8w``);
BF16 otherwise. From public facts alone it derives:

* the usable KV blocks (``Preset.num_blocks``): per GPU, memory × utilisation − weights
  / TP − a stated reserve, over the KV bytes one token takes on one GPU;
* the time of an engine step (``Preset.step_ms``): the larger of its compute time
  (2 FLOPs per active weight per token at a GEMM efficiency that grows with the step's
  tokens, plus attention's 4·layers·heads·head_dim FLOPs per (query, key) pair: prefill
  quadratic in the chunk and its prefix, decode by the context) and its memory time
  (the weights / TP once per step — for a MoE only the experts its tokens route to, or
  the same k for every token where a fake-weight router collapses —
  plus every attended token's KV, or, for an engine whose decode attention runs one
  thread block per head over the whole context, the longer wait that takes:
  ``Preset.unsplit_attention_s``), plus the tensor-parallel all-reduces costed on the
  GPU's fabric (``Preset.allreduce_s``: NVSwitch, xGMI mesh or a PCIe ring) and a fixed
  time per step (a serving engine's, or a compiled static-batch loop's), per layer and,
  in a serving engine, per decoding sequence (its host work on every new token);
* the time to bring KV back from host memory (``Preset.load_ms``).

Eleven efficiency factors and three switches (``FACTORS``, read from
``sim/presets/fitted_factors.json``) are fitted to cited public measurements by
``presets.fit`` (docs/hardware.md, "Fit": how, and every formula, source and the error
left, in sample and held out).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.sim.presets.catalog import (
    ACCELERATORS,
    MODELS,
    PCIE_RING_STEP_US,
    Accelerator,
    Model,
)

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization
RESERVE_GB = 2.0  # per GPU: activations at 8,192 batched tokens, CUDA graphs, NCCL buffers
TP_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Factors:
    """The efficiency factors (docs/hardware.md, "Fit"), one per operation family: the
    share of dense peak a step's matmuls reach at large sizes (``mfu``; ``mfu_fp8`` for
    FP8 weights, whose doubled peak is reached less fully) and the GEMM size, in tokens,
    at which they reach half of it (``gemm_half_tokens``: a matmul of M rows reaches
    ``mfu · M / (M + gemm_half_tokens)``); the share of memory bandwidth a step's reads
    reach (``mbu``); the fixed time of every step and of every layer of it (kernel
    launches, norms, sampling: ``step_overhead_ms``, ``layer_us``); the fixed latency
    of every request (HTTP, tokenising, scheduling: ``EngineConfig.request_overhead_ms``);
    and the latency of one tensor-parallel all-reduce crossing the GPU fabric once
    (``allreduce_us``: one switch crossing or one direct link; a PCIe ring pays it once
    and NCCL's per-step latency for each of its steps). ``attn_block_share``: the share
    of the GPU's HBM bandwidth one thread block reaches when an engine's decode attention
    runs one block per (sequence, head) over the whole context (TensorRT-LLM's masked
    MHA without its multi-block mode); it costs a step only where ``unsplit_attention``
    is 1 — a switch, not a fitted factor: the published tables of such an engine say so
    (``# decode_attention: unsplit``, docs/hardware.md "Decode attention"), a calibrated
    preset may; 0 (an engine that splits the context over blocks: the KV bytes term
    alone) otherwise.
    ``collapsed_routing``: a switch too — 1 where a MoE's router sends every token of a
    step to the same ``k`` experts (random gate weights of a fake-weight benchmark: a
    table's ``# moe_routing: collapsed``, docs/hardware.md "MoE routing"), so a step reads
    ``k`` experts whatever its tokens; 0 (independent routing) otherwise.
    ``static_loop``: a switch too — 1 where the engine is a compiled static-batch
    benchmark's loop (TensorRT-LLM's C++ ``gptSessionBenchmark``: no Python scheduler,
    no sampling in Python, no HTTP), whose fixed time of a step is ``static_step_ms``
    (fitted, docs/hardware.md "Fixed time by engine") in place of a serving engine's
    ``step_overhead_ms``: a table's ``# step_loop: static``, a calibrated preset; 0 (a
    serving engine's step) otherwise.
    ``seq_us``: a serving engine's host time per decoding sequence of a step (output
    processing, detokenising and streaming each new token: docs/hardware.md "Host time
    per sequence"); none in a compiled static loop. 0 (a file written before it) charges
    nothing.
    ``moe_layer_us``: the fixed time of every MoE layer of a step beside its experts'
    bytes and FLOPs (the router's softmax and top-k, the tokens' sort to their experts,
    the weighted sum after them: small launch-bound kernels; docs/hardware.md "MoE
    layer time"), on any engine; nothing for a dense model, and 0 (a file written before
    it) charges nothing."""

    mfu: float
    mbu: float
    step_overhead_ms: float
    request_overhead_ms: float
    allreduce_us: float
    mfu_fp8: float = 0.0  # ``mfu`` of FP8 matmuls (0: the same as ``mfu``)
    layer_us: float = 0.0
    gemm_half_tokens: float = 0.0
    attn_block_share: float = 0.0
    unsplit_attention: float = 0.0  # 1: the engine's decode attention is one block per head
    collapsed_routing: float = 0.0  # 1: every token of a step routes to the same k experts
    static_step_ms: float = 0.0  # the fixed time of a step of a compiled static-batch loop
    static_loop: float = 0.0  # 1: the engine is a compiled static-batch benchmark's loop
    seq_us: float = 0.0  # a serving engine's host time per decoding sequence of a step
    moe_layer_us: float = 0.0  # fixed time of each MoE layer of a step (routing kernels)

    @property
    def request_ms(self) -> float:
        """The fixed latency the engine charges a request: ``request_overhead_ms``, none
        for a compiled static loop (``STATIC_LOOP_REQUEST_OVERHEAD_MS``)."""
        return STATIC_LOOP_REQUEST_OVERHEAD_MS if self.static_loop else self.request_overhead_ms


FACTORS_FILE = Path(__file__).with_name("fitted_factors.json")


def load_factors(path: Path = FACTORS_FILE) -> Factors:
    """The fitted factors ``python -m workbench.sim.presets.fit --write`` stored, with
    their provenance beside them (docs/hardware.md, "Fit")."""
    return Factors(**json.loads(path.read_text(encoding="utf-8"))["factors"])


FACTORS = load_factors()


@dataclass(frozen=True, slots=True)
class Preset:
    """A model on ``tp`` GPUs of one kind: BF16, FP8 weights and KV cache (``fp8``), or
    FP8 weights with a 16-bit KV cache (``fp8`` and ``kv16``)."""

    model: Model
    gpu: Accelerator
    tp: int
    fp8: bool
    factors: Factors
    kv16: bool = False

    @property
    def name(self) -> str:
        suffix = ("/fp8w" if self.kv16 else "/fp8") if self.fp8 else ""
        return f"{self.model.name}/{self.gpu.name}/tp{self.tp}{suffix}"

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one weight."""
        return 1 if self.fp8 else 2

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one K or V element."""
        return 1 if self.fp8 and not self.kv16 else 2

    @property
    def weight_bytes(self) -> int:
        """All weights, whole model."""
        return self.model.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV of one token, whole model (what host memory holds per token)."""
        return self.model.kv_bytes_per_token(self.kv_dtype_bytes)

    @property
    def kv_bytes_per_token_gpu(self) -> int:
        """KV of one token on one GPU: the KV heads are split over TP (a head is
        replicated when there are fewer heads than GPUs)."""
        m = self.model
        return m.layers * 2 * math.ceil(m.kv_heads / self.tp) * m.head_dim * self.kv_dtype_bytes

    @property
    def peak_flops(self) -> float:
        """Dense tensor FLOP/s of one GPU in the preset's dtype."""
        return (self.gpu.fp8_tflops if self.fp8 else self.gpu.bf16_tflops) * 1e12

    @property
    def mfu(self) -> float:
        """The share of the peak this preset's matmuls reach (FP8's own when fitted)."""
        f = self.factors
        return f.mfu_fp8 if self.fp8 and f.mfu_fp8 else f.mfu

    def kv_budget_bytes(self) -> float:
        """Per GPU: memory × utilisation − weights / TP − reserve."""
        g = self.gpu
        usable = (g.usable_gb * GPU_MEMORY_UTILIZATION - RESERVE_GB) * 1e9
        return usable - self.weight_bytes / self.tp

    def num_blocks(self, block_size: int) -> int:
        """Usable KV blocks of ``block_size`` tokens (ValueError when nothing is left)."""
        budget = self.kv_budget_bytes()
        blocks = int(budget // (self.kv_bytes_per_token_gpu * block_size))
        if blocks < 1:
            g = self.gpu
            raise ValueError(
                f"preset {self.name}: {self.weight_bytes / self.tp / 1e9:.1f} GB of weights "
                f"per GPU leave no KV cache in {g.usable_gb:g} GB × "
                f"{GPU_MEMORY_UTILIZATION} − {RESERVE_GB:g} GB reserve; use a larger tpN"
                + ("" if self.fp8 or not g.fp8_tflops else " or /fp8"))
        return blocks

    def weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a step of ``tokens`` tokens: all of its share
        of a dense model; for a MoE the experts some token routed to (each of E experts
        is missed by one token with probability 1 − k/E), or, where the router sends every
        token to the same k (``Factors.collapsed_routing``), k of E whatever the tokens."""
        m = self.model
        if not m.experts:
            return self.weight_bytes / self.tp
        expert_total = m.layers * m.experts * m.expert_params
        share = m.active_experts / m.experts  # one token's experts
        touched = share if self.factors.collapsed_routing else (
            1.0 - (1.0 - share) ** max(tokens, 1))
        dense = m.params - expert_total
        return (dense + expert_total * touched) * self.dtype_bytes / self.tp

    def allreduce_s(self, tokens: int) -> float:
        """Two all-reduces per layer of ``tokens`` × hidden activations (BF16), costed on
        the GPU's fabric (docs/hardware.md, "All-reduce by fabric"):

        * ``switch`` (NVLink through NVSwitch): one crossing of ``allreduce_us``, whatever
          the TP, and 2·(TP−1)/TP of the bytes at the GPU's whole link bandwidth;
        * ``mesh`` (xGMI): one direct hop of ``allreduce_us``; the bytes go over the TP−1
          peer links in use, each ``link / mesh_peers`` of the bandwidth, at the share of
          it a collective reaches (``Accelerator.link_usable``);
        * ``pcie`` (a ring over PCIe): ``allreduce_us`` once (the collective's launch and
          synchronisation, as on any fabric) plus, for each of the ring's 2·(TP−1) steps,
          NCCL's per-step PCIe latency (``catalog.PCIE_RING_STEP_US``), and the bytes
          over the PCIe link at the share NCCL's topology model gives it."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        m, g, tp = self.model, self.gpu, self.tp
        size = tokens * m.hidden * 2
        moved = 2 * (tp - 1) / tp * size
        latency = self.factors.allreduce_us * 1e-6
        if g.fabric == "mesh":
            gbps = g.link_gbps * min(tp - 1, g.mesh_peers) / g.mesh_peers
        else:
            gbps = g.link_gbps
        gbps *= g.link_usable  # the share a collective reaches (catalog; 1.0 unless stated)
        if g.fabric == "pcie":
            latency += 2 * (tp - 1) * PCIE_RING_STEP_US * 1e-6
        return 2 * m.layers * (latency + moved / (gbps * 1e9))

    def gemm_efficiency(self, tokens: int) -> float:
        """The share of the peak a step's matmuls reach with ``tokens`` rows: ``mfu``
        (FP8's own when fitted) × M / (M + ``gemm_half_tokens``)."""
        half = self.factors.gemm_half_tokens
        return self.mfu * (tokens / (tokens + half) if half else 1.0)

    def unsplit_attention_s(self, prefill_tokens: int, decode_seqs: int,
                            kv_tokens: int) -> float:
        """The decode attention of an engine that runs one thread block per (sequence,
        head) over the whole context (``Factors.unsplit_attention``; 0 otherwise): per
        layer, one block reads its head's K and V of every context token at
        ``attn_block_share`` of the HBM bandwidth, the heads and sequences in parallel on
        other blocks, so a step waits for a sequence's context × layers, whatever the TP
        (docs/hardware.md, "Decode attention"). The context is the step's mean per
        sequence (``kv_tokens`` over its sequences, a prefilling one counted once): exact
        for one sequence and for equal ones."""
        f = self.factors
        if not (f.unsplit_attention and f.attn_block_share and decode_seqs > 0):
            return 0.0
        m = self.model
        context = kv_tokens / (decode_seqs + (1 if prefill_tokens else 0))
        head_bytes = 2 * m.head_dim * self.kv_dtype_bytes  # one head's K and V of a token
        return m.layers * context * head_bytes / (
            self.gpu.bandwidth_gbps * 1e9 * f.attn_block_share)

    def step_ms(self, prefill_tokens: int, decode_seqs: int, kv_tokens: int,
                prefill_attn: int = 0) -> float:
        """One engine step: ``prefill_tokens`` new prompt tokens, ``decode_seqs`` decoding
        sequences, ``kv_tokens`` attended KV tokens in all, ``prefill_attn`` the prefill
        chunks' (query, key) pairs (Σ n·(c + (n+1)/2) for a chunk of n after c). The KV's
        read is its bytes at ``mbu`` or, for an engine that does not split decode
        attention over the context, the longer ``unsplit_attention_s``."""
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        m, f = self.model, self.factors
        flops = 2.0 * m.active_matmul_params * tokens
        flops += 4.0 * m.layers * m.heads * m.head_dim * (prefill_attn + kv_tokens)
        compute = flops / self.tp / (self.peak_flops * self.gemm_efficiency(tokens))
        kv_bytes = kv_tokens * self.kv_bytes_per_token_gpu
        bandwidth = self.gpu.bandwidth_gbps * 1e9 * f.mbu
        memory = (self.weight_read_bytes(tokens) + kv_bytes) / bandwidth
        if f.unsplit_attention:  # the KV read takes the longer of its bytes and the blocks'
            memory += max(0.0, self.unsplit_attention_s(prefill_tokens, decode_seqs,
                                                        kv_tokens) - kv_bytes / bandwidth)
        # a compiled static loop's fixed step, or a serving engine's with its host time
        # per decoding sequence (docs/hardware.md, "Fixed time by engine", "Host time per
        # sequence")
        per_step = f.static_step_ms if f.static_loop else f.step_overhead_ms
        fixed = per_step + m.layers * f.layer_us * 1e-3
        if m.experts:  # a MoE layer's routing kernels (docs/hardware.md, "MoE layer time")
            fixed += m.layers * f.moe_layer_us * 1e-3
        if not f.static_loop:
            fixed += decode_seqs * f.seq_us * 1e-3
        return (max(compute, memory) + self.allreduce_s(tokens)) * 1e3 + fixed

    def load_ms(self, tokens: int, host_gbps: float) -> float:
        """Bringing ``tokens`` tokens of KV from host memory: each GPU copies its share
        over its own host link (``host_gbps`` per direction; 0: the catalog's PCIe)."""
        gbps = host_gbps or self.gpu.host_link_gbps
        return tokens * self.kv_bytes_per_token_gpu / (gbps * 1e9) * 1e3


PRECISIONS = ("fp8", "fp8w")

#: a compiled static-batch loop's requests wait for nothing before the engine: the C++
#: benchmark builds its batch in memory (no HTTP, no tokenising, no request queue), so
#: its first-token latency is the context phase alone (docs/hardware.md, "Fixed time by
#: engine"); ``request_overhead_ms`` is a serving front end's
STATIC_LOOP_REQUEST_OVERHEAD_MS = 0.0


MAX_CALIBRATED_BYTES = 1_000_000  # a calibrated preset file is a few hundred bytes


def is_calibrated(text: str) -> bool:
    """Whether ``text`` names a calibrated preset file (``calibration.preset``): a
    ``.json`` path holding a ``preset`` and its ``factors``."""
    if not str(text).strip().endswith(".json"):
        return False
    try:
        data = json.loads(_calibrated_text(str(text).strip()))
    except (OSError, ValueError, RecursionError):  # not one: the engine-file reader says why
        return False
    return isinstance(data, dict) and "preset" in data and "factors" in data


def _calibrated_text(where: str) -> str:
    """A calibrated preset file's text: a regular file (``stat`` first: opening a FIFO
    would block) within ``MAX_CALIBRATED_BYTES``, UTF-8 (ValueError naming the file)."""
    try:
        st = os.stat(where)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"calibrated preset {where}: not a regular file")
        if st.st_size > MAX_CALIBRATED_BYTES:
            raise ValueError(f"calibrated preset {where}: larger than "
                             f"{MAX_CALIBRATED_BYTES:,} bytes")
        with open(where, "rb") as fh:
            raw = fh.read(MAX_CALIBRATED_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"calibrated preset {where}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_CALIBRATED_BYTES:  # grew since its stat
        raise ValueError(f"calibrated preset {where}: larger than "
                         f"{MAX_CALIBRATED_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"calibrated preset {where}: not UTF-8 text") from None


@functools.lru_cache(maxsize=64)
def calibrated(path: str) -> tuple[str, Factors]:
    """The base preset name and the factors a calibrated preset file holds (ValueError
    naming the file and the field)."""
    where = str(path).strip()
    text = _calibrated_text(where)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"calibrated preset {where}: not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"calibrated preset {where}: nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("preset"), str):
        raise ValueError(f"calibrated preset {where}: needs a 'preset' name (MODEL/GPU/tpN)")
    known = {f.name for f in dataclasses.fields(Factors)}
    got = data.get("factors")
    if not isinstance(got, dict) or not set(got) <= known or not {
            "mfu", "mbu", "step_overhead_ms", "request_overhead_ms", "allreduce_us"} <= set(got):
        raise ValueError(f"calibrated preset {where}: 'factors' must map the factors "
                         f"{sorted(known)} to numbers")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
               for v in got.values()):
        raise ValueError(f"calibrated preset {where}: every factor must be a number >= 0")
    if data["preset"].strip().endswith(".json"):
        raise ValueError(f"calibrated preset {where}: 'preset' must name a catalog preset")
    return data["preset"], Factors(**{k: float(v) for k, v in got.items()})


def parse(text: str) -> tuple[str, str, int, bool]:
    """``MODEL/GPU/tpN[/fp8|/fp8w]`` → (model, gpu, tp, fp8); ValueError naming the
    part (``kv16`` tells ``/fp8w`` apart). A calibrated preset file parses as its base."""
    if str(text).strip().endswith(".json"):
        return parse(calibrated(str(text))[0])
    parts = [p.strip().lower() for p in str(text).split("/")]
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in PRECISIONS):
        raise ValueError(f"preset {text!r}: expected MODEL/GPU/tpN[/fp8|/fp8w], e.g. "
                         "llama-3.1-8b/h100/tp1 or llama-3.3-70b/h100/tp2/fp8")
    model, gpu, tp_text = parts[:3]
    if model not in MODELS:
        raise ValueError(f"preset {text!r}: unknown model {model!r}; known: {sorted(MODELS)}")
    if gpu not in ACCELERATORS:
        raise ValueError(f"preset {text!r}: unknown GPU {gpu!r}; known: {sorted(ACCELERATORS)}")
    tp = tp_text.removeprefix("tp")
    if not tp_text.startswith("tp") or not tp.isdigit() or int(tp) not in TP_CHOICES:
        raise ValueError(f"preset {text!r}: tensor parallelism must be one of "
                         f"{[f'tp{t}' for t in TP_CHOICES]}, got {tp_text!r}")
    return model, gpu, int(tp_text[2:]), len(parts) == 4


def kv16(text: str) -> bool:
    """Whether the preset ``text`` keeps a 16-bit KV cache under FP8 weights (``/fp8w``)."""
    if str(text).strip().endswith(".json"):
        return kv16(calibrated(str(text))[0])
    return str(text).strip().lower().endswith("/fp8w")


@functools.lru_cache(maxsize=64)
def resolve(text: str) -> Preset:
    """The preset ``text`` names (cached: the engine asks every step): a catalog name with
    the fitted factors, or a calibrated preset file (``PATH.json``) with its own;
    ValueError for a name the catalog lacks, an FP8 preset on a GPU without FP8, or heads
    TP cannot split."""
    model, gpu, tp, fp8 = parse(text)
    factors = calibrated(str(text))[1] if str(text).strip().endswith(".json") else FACTORS
    p = Preset(MODELS[model], ACCELERATORS[gpu], tp, fp8, factors,
               kv16=kv16(text))
    if fp8 and not p.gpu.fp8_tflops:
        raise ValueError(f"preset {text!r}: {gpu} has no FP8 tensor cores; drop /fp8")
    if p.model.heads % tp:
        raise ValueError(f"preset {text!r}: {p.model.heads} attention heads do not split "
                         f"over tp{tp}")
    return p


def engine_knobs(text: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """The engine knobs a preset implies, under the caller's own: ``num_blocks`` from
    the memory left for KV, ``request_overhead_ms`` from the fit — none where the engine
    is a compiled static loop (``Factors.static_loop``: ``STATIC_LOOP_REQUEST_OVERHEAD_MS``)."""
    p = resolve(text)
    block_size = knobs.get("block_size", 16)
    if isinstance(block_size, bool) or not isinstance(block_size, int | float) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    implied: dict[str, object] = {
        "num_blocks": p.num_blocks(int(block_size)),
        "request_overhead_ms": p.factors.request_ms,
    }
    return {**implied, **knobs}
