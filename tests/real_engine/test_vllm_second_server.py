"""A second real vLLM, started the way a user might get it wrong, and with another block size.

Started without ``--enable-prompt-tokens-details`` (so usage has no cached-token
detail), with ``--block-size 64`` and without ``VLLM_SERVER_DEV_MODE`` (no
``/reset_prefix_cache``): the preflight must stop the run naming the missing flag,
block-size detection must read 64, not assume 32, the cache flush is recorded as
not possible (``flush_cache: true`` stops the run before any request), and a run
without the preflight reports its hit rate as unknown, not 0. Only runs where
``scripts/vllm_cpu.sh`` can start a local server (~30 s more).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from workbench import data
from workbench.backends import BackendError
from workbench.backends.scrape import detect_block_size
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize

from .conftest import START_TIMEOUT_S, VLLMServer, _describe, _script, _set_up, get_metrics

pytestmark = pytest.mark.real_engine

BLOCK = 64


@pytest.fixture(scope="module")
def misconfigured(vllm_server: VLLMServer) -> Iterator[VLLMServer]:
    """Depends on ``vllm_server`` so the two never start at the same time."""
    if os.environ.get("WORKBENCH_VLLM_SKIP_SECOND") == "1":
        pytest.skip("WORKBENCH_VLLM_SKIP_SECOND=1")
    env = {
        **os.environ,
        "VLLM_CPU_NAME": "pytest-misconfigured",
        "VLLM_CPU_OMIT": "--enable-prompt-tokens-details",
        "VLLM_CPU_BLOCK_SIZE": str(BLOCK),
        "VLLM_CPU_KV_BYTES": str(256 << 20),
        "VLLM_CPU_DEV_MODE": "0",
    }
    _set_up(env, os.environ.get("WORKBENCH_REAL_ENGINE") == "1")
    started = _script("start", timeout=START_TIMEOUT_S, env=env)
    if started.returncode != 0:
        pytest.fail(f"scripts/vllm_cpu.sh start failed:\n{started.stderr[-3000:]}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        yield _describe(url, started_here=True)
    finally:
        _script("stop", timeout=60, env=env)


async def test_block_size_is_detected_not_assumed(misconfigured: VLLMServer) -> None:
    assert misconfigured.block_size == BLOCK
    assert await detect_block_size(misconfigured.url) == BLOCK


@pytest.mark.parametrize("backend", ["openai", "vllm-tokens"])
async def test_preflight_names_the_missing_flag(
    misconfigured: VLLMServer, tmp_path: Any, backend: str
) -> None:
    cfg = {
        "target": misconfigured.url,
        "backend": {"name": backend, "options": {"model": misconfigured.model}},
        "trace": {"path": str(data.path("tracelab/multi_session_example.csv"))},
        "out_dir": str(tmp_path),
    }
    with pytest.raises(BackendError, match="--enable-prompt-tokens-details"):
        await run_async(cfg)


def _cfg(server: VLLMServer, tmp_path: Any, **backend: Any) -> dict[str, Any]:
    return {
        "target": server.url,
        "backend": {"name": "openai", "options": {"model": server.model}, "preflight": False,
                    **backend},
        "trace": {"path": str(data.path("tracelab/multi_session_example.csv")), "max_items": 2},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0},
        "out_dir": str(tmp_path),
    }  # fmt: skip


async def test_no_dev_mode_flush_recorded_and_unreported_hits_are_null(
    misconfigured: VLLMServer, tmp_path: Any
) -> None:
    result = await run_async(_cfg(misconfigured, tmp_path))
    flush = result.manifest.cache_flush
    assert flush["attempted"] and not flush["ok"] and flush["endpoint"] is None
    assert [t["status"] for t in flush["tries"]] == [404, 404]
    s = summarize(result)
    assert s["ok"] > 0 and s["cache_reported_requests"] == 0
    assert s["cache_unreported_requests"] == s["ok"]
    assert s["actual_prefix_hit_rate"] is None  # unknown, not 0


async def test_flush_true_stops_before_any_request(
    misconfigured: VLLMServer, tmp_path: Any
) -> None:
    before = get_metrics(misconfigured.url).get("vllm:prompt_tokens_total", 0.0)
    with pytest.raises(ConfigError, match="VLLM_SERVER_DEV_MODE=1"):
        await run_async(_cfg(misconfigured, tmp_path, flush_cache=True))
    assert get_metrics(misconfigured.url).get("vllm:prompt_tokens_total", 0.0) == before
