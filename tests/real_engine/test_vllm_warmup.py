"""The warm-up warms a real vLLM (docs/arrival.md): with ``warmup 2`` the measured first
rounds of the first two units find their whole prompts in vLLM's prefix cache (every
full block but the one holding the last token); without, they find nothing. Counts,
never timings. A fresh seed per run keeps earlier runs on a shared server out of it."""

from __future__ import annotations

import random
from typing import Any

from workbench import data
from workbench.executors.dispatch import run_async

from .conftest import VLLMServer

SEED_BASE = random.SystemRandom().randrange(1, 1 << 30)


async def _run(server: VLLMServer, tmp_path: Any, seed: int, warmup: int) -> Any:
    return await run_async({
        "target": server.url, "seed": seed, "out_dir": str(tmp_path),
        "backend": {"name": "vllm-tokens", "options": {"model": server.model}},
        "trace": {"path": str(data.path("tracelab/multi_session_example.csv")), "max_items": 4},
        "arrival": {"mode": "saturated", "max_concurrency": 2, "tool_wait_scale": 0.0,
                    "warmup": warmup},
    })  # fmt: skip


async def test_warmup_fills_the_cache_the_measured_first_rounds_hit(
    vllm_server: VLLMServer, tmp_path: Any
) -> None:
    block = vllm_server.block_size
    cold = await _run(vllm_server, tmp_path, SEED_BASE, warmup=0)
    warm = await _run(vllm_server, tmp_path, SEED_BASE + 1, warmup=2)
    for result in (cold, warm):
        assert all(r.status == "ok" for r in result.records), [r.error for r in result.records]
        # a server that honours max_tokens is never flagged for output overrun
        assert not any("output_overrun" in r.extra for r in result.records)
    cold_first = {r.unit_ordinal: r for r in cold.records if r.round_idx == 0}
    assert all(r.cached_tokens_reported and r.cached_tokens == 0 for r in cold_first.values())
    warm_first = {r.unit_ordinal: r for r in warm.records if r.round_idx == 0 and not r.warmup}
    for k, r in warm_first.items():
        if k < 2:  # warmed: the same prompt was sent and finished before
            assert r.cached_tokens == (r.prompt_tokens - 1) // block * block > 0, r
        else:
            assert r.cached_tokens == 0, r
    report = warm.manifest.warmup
    assert report["units"] == 2 and report["failed"] == 0
    assert report["requests"] == sum(1 for r in warm.records if r.warmup) > 2
