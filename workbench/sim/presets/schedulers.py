"""How each serving engine schedules, as the embedded engine's knobs: one registry.

``--engine scheduler=NAME`` (and a published table's ``# scheduler: NAME`` line) picks
one entry of ``SCHEDULERS``; ``EngineConfig.from_knobs`` lays its knobs under the
caller's own, so an explicit knob still wins. Adding an engine's scheduling is one
entry here, with the facts it rests on (docs/hardware.md, "The engine a table ran on").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: a token budget no batch of the static-batch benchmarks reaches: the whole batch's
#: prompts go in one pass
WHOLE_BATCH_TOKENS = 1 << 22


#: SGLang's defaults by the memory of one GPU (MiB, as ``nvidia-smi`` reports it): below
#: each bound, ``--chunked-prefill-size`` and ``--cuda-graph-max-bs`` below TP4 and from
#: TP4 on (docs/hardware.md, "The engine a table ran on")
SGLANG_BY_MIB = ((35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
                 (160 * 1024, 8192, 256, 512), (float("inf"), 16384, 512, 512))
#: SGLang's memory left out of ``--mem-fraction-static`` (MiB): a constant, the prefill's
#: activations per chunk token, the CUDA graphs per batch slot, per 8 GPUs of the
#: tensor-parallel group, and the least on a GPU of more than 60 GiB
SGLANG_RESERVE_MIB = (512, 1.5, 2, 1024, 10 * 1024)


def sglang_preset_knobs(preset: Any, knobs: dict[str, Any]) -> dict[str, Any]:
    """What SGLang's defaults make of ``preset``'s GPU, unless ``knobs`` give it: the
    chunk (``max_num_batched_tokens``) and the KV pool (``num_blocks``): the static
    memory, ``--mem-fraction-static`` of the GPU (``1 − reserve / memory``, rounded to
    three places), less the weights (ValueError when nothing is left)."""
    mib = preset.gpu.usable_gb * 1e9 / 2**20
    _bound, chunk, graphs_small, graphs_tp4 = next(row for row in SGLANG_BY_MIB if mib < row[0])
    out: dict[str, Any] = {"max_num_batched_tokens": chunk}
    chunk = _whole(knobs.get("max_num_batched_tokens", chunk))
    block_size = _whole(knobs.get("block_size", 16))
    # a knob that is no whole number is left for EngineConfig to refuse by name
    if "num_blocks" not in knobs and chunk and block_size:
        base, per_token, per_graph, per_8_gpus, floor = SGLANG_RESERVE_MIB
        graphs = graphs_small if preset.tp < 4 else graphs_tp4
        reserve = (base + max(chunk, 2048) * per_token + graphs * per_graph
                   + preset.tp / 8 * per_8_gpus)
        if mib > 60 * 1024:
            reserve = max(reserve, floor)
        static = round((mib - reserve) / mib, 3) * mib * 2**20
        block = preset.kv_bytes_per_token_gpu * block_size
        blocks = int((static - preset.weight_bytes / preset.tp) // block)
        if blocks < 1:
            raise ValueError(f"preset {preset.name}: no KV cache left under SGLang's "
                             f"--mem-fraction-static ({round((mib - reserve) / mib, 3)})")
        out["num_blocks"] = blocks
    return out


#: vLLM V1's ``vllm serve`` defaults by GPU (``EngineArgs`` for the OpenAI API server):
#: from this much device memory (GiB), an A100 excepted, the larger token budget and
#: sequence cap; below it (or on an A100) the smaller (docs/hardware.md, "The engine a
#: table ran on")
VLLM_SERVE_LARGE_GIB = 70
VLLM_SERVE_LARGE = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
VLLM_SERVE_SMALL = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}


def vllm_serve_preset_knobs(preset: Any, knobs: dict[str, Any]) -> dict[str, Any]:
    """What ``vllm serve`` (vLLM V1, the OpenAI API server) sets on ``preset``'s GPU
    unless told: 8,192 batched tokens and 1,024 sequences on a GPU of at least 70 GiB
    that is not an A100, else 2,048 and 256."""
    gib = preset.gpu.usable_gb * 1e9 / 2**30
    large = gib >= VLLM_SERVE_LARGE_GIB and "a100" not in preset.gpu.name.lower()
    return dict(VLLM_SERVE_LARGE if large else VLLM_SERVE_SMALL)


def _whole(value: Any) -> int:
    """``value`` as a whole number >= 1 (an integral float too), else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if value >= 1 and float(value).is_integer() else 0


@dataclass(frozen=True, slots=True)
class Scheduler:
    """One engine's scheduling: the engine knobs that express it and why.
    ``by_preset``: knobs the engine derives from the GPU (a preset's, given and the
    caller's knobs; what it returns lies under the caller's own)."""

    name: str
    knobs: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    by_preset: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None


SCHEDULERS: dict[str, Scheduler] = {
    s.name: s
    for s in (
        Scheduler("vllm", {"enable_chunked_prefill": True, "max_num_batched_tokens": 8192},
                  "vLLM V1: chunked prefill under a token budget, decodes first, prompts "
                  "filling what the budget leaves (the embedded engine's defaults)"),
        Scheduler("vllm-serve", {"enable_chunked_prefill": True,
                                 "max_num_batched_tokens": 8192},
                  "vLLM V1 behind `vllm serve` with its defaults: vllm's scheduling, its "
                  "token budget and sequence cap by the GPU (2,048 tokens and 256 "
                  "sequences on an A100 or a GPU under 70 GiB, else 8,192 and 1,024)",
                  vllm_serve_preset_knobs),
        Scheduler("trtllm", {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192,
                             "guaranteed_no_evict": True},
                  "TensorRT-LLM in-flight batching: context and generation requests in one "
                  "pass, chunked context off by default (LLM API enable_chunked_prefill="
                  "False), max_num_tokens 8,192, the GUARANTEED_NO_EVICT capacity "
                  "scheduler (a request starts only when KV for its prompt and whole "
                  "output is left beyond what the started ones need to finish)"),
        Scheduler("trtllm-static", {"enable_chunked_prefill": False,
                                    "max_num_batched_tokens": WHOLE_BATCH_TOKENS},
                  "TensorRT-LLM's static-batch benchmark (and offline latency scripts): "
                  "the whole batch's contexts in one pass, then its generation steps"),
        Scheduler("sglang", {"mixed_batches": False, "enable_chunked_prefill": True,
                             "max_num_batched_tokens": 8192, "admission_reserve": 0.7},
                  "SGLang: a prefill batch (the chunked prompt's next chunk, then waiting "
                  "prompts, FCFS, under --chunked-prefill-size) whenever one forms, else a "
                  "decode batch of every running request; mixing off by default "
                  "(--enable-mixed-chunk); the chunk and the KV pool by the GPU's memory; "
                  "admission reserving the outputs to come (new_token_ratio 0.7)",
                  sglang_preset_knobs),
    )
}


def engine_knobs(name: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """``knobs`` with the scheduler ``name``'s laid under them (ValueError naming the
    known schedulers for an unknown one)."""
    key = str(name).strip().lower()
    if key not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; known: {sorted(SCHEDULERS)}")
    entry = SCHEDULERS[key]
    implied = dict(entry.knobs)
    if entry.by_preset is not None and knobs.get("preset"):
        from workbench.sim.presets import resolve

        implied.update(entry.by_preset(resolve(str(knobs["preset"])), knobs))
    return {**implied, **knobs}
