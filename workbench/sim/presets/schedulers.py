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


@dataclass(frozen=True, slots=True)
class Scheduler:
    """One engine's scheduling: the engine knobs that express it and why."""

    name: str
    knobs: dict[str, Any] = field(default_factory=dict)
    why: str = ""


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
    )
}


def engine_knobs(name: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """``knobs`` with the scheduler ``name``'s laid under them (ValueError naming the
    known schedulers for an unknown one)."""
    key = str(name).strip().lower()
    if key not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; known: {sorted(SCHEDULERS)}")
    return {**SCHEDULERS[key].knobs, **knobs}
