"""A sweep against the real vLLM (CPU, tiny random-weight Llama): a few small points.

Counts and bookkeeping, never timings: every point is an ordinary run directory
whose requests all finished ok with the planned token counts; the server's
prefix cache is reset before every run (``/reset_prefix_cache``, mounted when
the server runs with ``VLLM_SERVER_DEV_MODE=1``, which the test server does),
so each point's first request finds nothing cached; the sweep manifest says
what the reset answered.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import workbench as wb
from workbench import data
from workbench.storage.rundir import load

from .conftest import VLLMServer, get_metrics

pytestmark = pytest.mark.real_engine

MOONCAKE = "mooncake/conversation_trace_head600.jsonl"
HITS = "vllm:prefix_cache_hits_total"


async def test_sweep_over_concurrency_on_vllm(vllm_server: VLLMServer, tmp_path: Path) -> None:
    cfg = {
        "trace": {"path": str(data.path(MOONCAKE)), "max_items": 6},
        "arrival": {"mode": "saturated", "output_len": "fixed:4"},
        "context": {"max_model_len": vllm_server.max_model_len},
        "target": vllm_server.url,
        "backend": {"name": "vllm-tokens", "options": {"model": vllm_server.model}},
        "seed": random.SystemRandom().randrange(1, 1 << 30),
    }
    before = get_metrics(vllm_server.url)
    s = await wb.sweep_async(cfg, {"arrival.max_concurrency": [1, 3]}, repeats=1,
                             slo="e2e_ms:p90<=600000", out_dir=tmp_path, sweep_id="vllm")
    after = get_metrics(vllm_server.url)
    assert s.manifest.status == "completed" and s.manifest.mode == "live"
    assert [p["status"] for p in s.points] == ["done", "done"]
    recorded_hits = 0
    for point, run_dir in zip(s.points, s.run_dirs, strict=True):
        run = load(run_dir)
        recs = [r for r in run.records if not r.warmup]
        assert [r.status for r in recs] == ["ok"] * 6, [(r.status, r.error) for r in recs]
        assert all(r.completion_tokens == 4 for r in recs)
        assert run.manifest.config["arrival"]["max_concurrency"] == \
            point["params"]["arrival.max_concurrency"]
        flush = point["runs"][0]["flush"]
        if flush["ok"]:
            assert (flush["endpoint"], flush["status"]) == ("POST /reset_prefix_cache", 200)
        else:  # a server without VLLM_SERVER_DEV_MODE: said so, never claimed
            assert "VLLM_SERVER_DEV_MODE" in flush["detail"], flush
        assert point["metrics"]["requests"] == 6 and point["metrics"]["ok"] == 6
        assert point["slo"]["held"] is True
        recorded_hits += sum(r.cached_tokens or 0 for r in recs)
        pf = run.manifest.preflight or {}
        recorded_hits += sum(p.get("cached_tokens", 0) for p in (pf.get("first"), pf.get("second"))
                             if p and p.get("status") == "ok")
    # the server counted exactly the hits the records report, over both points
    assert after.get(HITS, 0.0) - before.get(HITS, 0.0) == recorded_hits
