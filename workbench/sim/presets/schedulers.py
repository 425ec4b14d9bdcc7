"""How each serving engine schedules, as the embedded engine's knobs: one registry.

``--engine scheduler=NAME`` (and a published table's ``# scheduler: NAME`` line) picks
one entry of ``SCHEDULERS``; ``EngineConfig.from_knobs`` lays its knobs under the
caller's own, so an explicit knob still wins. Adding an engine's scheduling is one
entry here, with the facts it rests on (docs/hardware.md, "The engine a table ran on").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: a token budget no batch of the static-batch benchmarks reaches: the whole batch's
#: prompts go in one pass
WHOLE_BATCH_TOKENS = 1 << 22


#: SGLang's default ``--chunked-prefill-size`` by the memory of one GPU (MiB, as
#: ``nvidia-smi`` reports it): the first bound above it gives the chunk
#: (docs/hardware.md, "The engine a table ran on")
SGLANG_CHUNK_BY_MIB = ((35 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192),
                       (float("inf"), 16384))


@dataclass(frozen=True, slots=True)
class Scheduler:
    """One engine's scheduling: the engine knobs that express it and why.
    ``budget_by_mib``: the engine sizes its token budget by the GPU's memory, (bound,
    tokens) pairs; with a preset and no ``max_num_batched_tokens`` of the caller's, the
    preset's GPU picks it."""

    name: str
    knobs: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    budget_by_mib: tuple[tuple[float, int], ...] = ()


SCHEDULERS: dict[str, Scheduler] = {
    s.name: s
    for s in (
        Scheduler("vllm", {"enable_chunked_prefill": True, "max_num_batched_tokens": 8192},
                  "vLLM V1: chunked prefill under a token budget, decodes first, prompts "
                  "filling what the budget leaves (the embedded engine's defaults)"),
        Scheduler("trtllm", {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
                  "TensorRT-LLM in-flight batching: context and generation requests in one "
                  "pass, chunked context off by default (LLM API enable_chunked_prefill="
                  "False), max_num_tokens 8,192"),
        Scheduler("trtllm-static", {"enable_chunked_prefill": False,
                                    "max_num_batched_tokens": WHOLE_BATCH_TOKENS},
                  "TensorRT-LLM's static-batch benchmark (and offline latency scripts): "
                  "the whole batch's contexts in one pass, then its generation steps"),
        Scheduler("sglang", {"mixed_batches": False, "enable_chunked_prefill": True,
                             "max_num_batched_tokens": 8192, "admission_reserve": 0.7},
                  "SGLang: a prefill batch (the chunked prompt's next chunk, then waiting "
                  "prompts, FCFS, under --chunked-prefill-size) whenever one forms, else a "
                  "decode batch of every running request; mixing off by default "
                  "(--enable-mixed-chunk); the chunk by the GPU's memory; admission "
                  "reserving the outputs to come (new_token_ratio 0.7)",
                  SGLANG_CHUNK_BY_MIB),
    )
}


def engine_knobs(name: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """``knobs`` with the scheduler ``name``'s laid under them (ValueError naming the
    known schedulers for an unknown one)."""
    key = str(name).strip().lower()
    if key not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; known: {sorted(SCHEDULERS)}")
    entry = SCHEDULERS[key]
    out = {**entry.knobs, **knobs}
    if entry.budget_by_mib and knobs.get("preset") and "max_num_batched_tokens" not in knobs:
        from workbench.sim.presets import resolve

        mib = resolve(str(knobs["preset"])).gpu.usable_gb * 1e9 / 2**20
        out["max_num_batched_tokens"] = next(t for bound, t in entry.budget_by_mib
                                             if mib < bound)
    return out
