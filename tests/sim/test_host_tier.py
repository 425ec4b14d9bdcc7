"""The host-memory KV tier: evicted blocks come back from host memory, for a transfer.

A trace of agent sessions that wait a minute on a tool while other sessions run: their
first round's KV is evicted from a small device cache. Without the tier the second round
recomputes its whole prompt; with it the prefix comes back from host memory, reported as
host hits, and its TTFT carries the transfer (more than a device hit, less than a
recompute)."""

from pathlib import Path
from statistics import fmean

import pytest

import workbench as wb
from workbench.sim.config import EngineConfig
from workbench.sim.hosttier import HostTier, host_tier, load_ms
from workbench.sim.presets import resolve

PRESET = "llama-3.1-8b/h100/tp1"


def _trace(path: Path) -> Path:
    """4 agent sessions (3,000-token prompt, a 60 s tool wait, then 50 more tokens on
    the same conversation) and, during their wait, 6 one-round sessions that fill the
    cache with prompts of their own."""
    rows = ["session_id,round_idx,arrival_time,prefix_len,input_len,output_len,tool_wait_after_ms"]
    for s in range(4):
        rows += [f"agent{s},0,0,0,3000,8,60000", f"agent{s},1,0,3008,50,8,0"]
    rows += [f"other{s},0,10000,0,3000,8,0" for s in range(6)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _second_rounds(tmp_path: Path, **engine):
    cfg = {"trace": {"path": str(_trace(tmp_path / "agents.csv"))},
           "context": {"policy": "trace-reported"},
           "target": {"url": "sim", "engine": {"preset": PRESET, **engine}}}
    result = wb.simulate(cfg)
    assert all(r.status == "ok" for r in result.records)
    return [r for r in result.records if r.session_id.startswith("agent") and r.round_idx == 1]


def test_long_tool_waits_lose_their_hits_without_the_host_tier_and_keep_them_with_it(
    tmp_path: Path,
) -> None:
    small = {"num_blocks": 1000}  # 16,000 tokens: the others' prompts evict the agents'
    lost = _second_rounds(tmp_path, **small)
    kept = _second_rounds(tmp_path, **small, host_kv_gb=4)
    device = _second_rounds(tmp_path)  # the preset's whole KV cache: nothing evicted
    assert [r.cached_tokens for r in lost] == [0] * 4
    # 187 whole blocks: 3,000 + 8 tokens, the last output token's KV never computed
    assert [r.cached_tokens for r in kept] == [2992] * 4
    assert [r.extra["host_cached_tokens"] for r in kept] == [2992] * 4
    assert [r.cached_tokens for r in device] == [2992] * 4
    assert not any("host_cached_tokens" in r.extra for r in device + lost)

    def ttft(records):
        return fmean((r.first_token_ns or 0) - (r.dispatch_ns or 0) for r in records) / 1e6

    # the transfer is visible: a host hit costs more than a device hit, less than recomputing
    assert ttft(device) < ttft(kept) < ttft(lost)
    cfg = EngineConfig.from_knobs(preset=PRESET)
    transfer = load_ms(cfg, 2992)
    assert transfer == pytest.approx(2992 * resolve(PRESET).kv_bytes_per_token_gpu / 64e9 * 1e3)
    assert ttft(kept) - ttft(device) >= transfer * 0.99  # at least one agent's transfer


def test_host_tier_capacity_is_host_memory_over_kv_bytes_per_block() -> None:
    cfg = EngineConfig.from_knobs(preset=PRESET, host_kv_gb=1)
    tier = host_tier(cfg)
    assert tier is not None and tier.capacity == int(1e9 // (131072 * 16))
    assert host_tier(EngineConfig.from_knobs(preset=PRESET)) is None
    with pytest.raises(ValueError, match="host_kv_gbps"):
        EngineConfig(host_kv_gb=1)


def test_host_lru_drops_the_oldest_and_finds_a_run_of_hashes() -> None:
    tier = HostTier(3)
    tier.put([1, 2, 3])
    tier.touch([1])
    tier.put([4])  # over capacity: 2, the least recently used, goes
    assert len(tier) == 3 and tier.stored == 4
    assert tier.extend([9, 1, 2, 3], 1, 4) == 1  # 1 held, 2 gone: the run stops
    assert tier.extend([3, 4, 1], 0, 3) == 3
