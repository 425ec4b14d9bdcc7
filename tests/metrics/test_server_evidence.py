"""Server-side evidence (preemptions, peak KV usage, peak running/waiting) from /metrics,
live against the embedded engine (vLLM and SGLang names) and in ``simulate``; and
``simulate`` honours the executor options a live run does."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics.server_side import server_evidence
from workbench.report import tables
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_large.csv"))
# a KV cache too small for the load: the engine must preempt and queue
TIGHT = {"block_size": 16, "num_blocks": 400, "max_num_seqs": 64}


def _cfg(target: Any, **extra: Any) -> dict[str, Any]:
    return {
        "trace": {"path": SESSIONS, "max_items": 24},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.0, "output_len": "fixed:64"},
        "backend": {"name": "vllm-tokens", "preflight": False, "scrape_interval_s": 0.05},
        "target": target,
        **extra,
    }


@pytest.mark.parametrize("mode", ["vllm", "sglang"])
async def test_live_run_reports_the_engines_own_preemptions_and_peaks(
    mode: str, tmp_path: Path
) -> None:
    # preemptions come from the tight KV cache, not from time: a fast engine shows them too
    async with serve_sim(speedup=2000.0, mode=mode, **TIGHT) as sim:
        async with asyncio.timeout(120):
            result = await run_async(_cfg(sim.base_url, out_dir=str(tmp_path)))
        stats = sim.engine.stats()
    s = wb.summarize(result)
    server = s["server"]
    assert server["engine"] == mode
    assert server["preemptions"] == stats["preemptions"] > 0  # the run was the only load
    assert 0 < server["peak_kv_cache_usage"] <= 1
    assert server["peak_running_requests"] >= 1 and server["peak_waiting_requests"] >= 1
    assert server["samples"] >= 2 and server["scrape_errors"] == 0
    pytest.importorskip("pyarrow")
    from workbench.metrics import scan

    assert scan.summarize(result.run_dir)["server"] == server
    table = tables.server_table(s)
    assert table.loc["preemptions", "value"] == stats["preemptions"]
    assert mode in tables.server_caption(s)


# the labels each engine puts on its counter (vLLM: per data-parallel engine; SGLang: per
# scheduler)
VLLM_DP = ('vllm:num_preemptions_total{engine="0",model_name="m"}',
           'vllm:num_preemptions_total{engine="1",model_name="m"}')
SGLANG_DP = tuple(f'sglang:num_retracted_requests_total{{dp_rank="{r}",engine_type="unified",'
                  f'model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}}' for r in (0, 1))


@pytest.mark.parametrize(("engine", "rows", "want"), [
    # vLLM, two data-parallel engines: 2→5 and 1→4, summed over label sets
    ("vllm", [{"t_ns": 0, VLLM_DP[0]: 2.0, VLLM_DP[1]: 1.0},
              {"t_ns": 1, VLLM_DP[0]: 5.0, VLLM_DP[1]: 4.0}], 6),
    # the same under the nested "metrics" key, as the scraper's exact name
    ("vllm", [{"metrics": {"vllm:num_preemptions_total": 3.0}},
              {"metrics": {"vllm:num_preemptions_total": 10.0}}], 7),
    # SGLang, two dp ranks; its per-batch gauge num_retracted_reqs is not the counter
    ("sglang", [{SGLANG_DP[0]: 0.0, SGLANG_DP[1]: 1.0, "sglang:num_retracted_reqs": 9.0},
                {SGLANG_DP[0]: 4.0, SGLANG_DP[1]: 3.0, "sglang:num_retracted_reqs": 1.0}], 6),
    # long rows; a NaN sample left out
    ("sglang", [{"name": "sglang:num_retracted_requests_total", "value": 2},
                {"name": "sglang:num_running_reqs", "value": 5},
                {"name": "sglang:num_retracted_requests_total", "value": float("nan")},
                {"name": "sglang:num_retracted_requests_total", "value": 7}], 5),
])
def test_one_preemption_reader_for_the_summary_and_a_sweep_point(
    engine: str, rows: list[dict[str, Any]], want: int, tmp_path: Path
) -> None:
    """``summary["server"]`` and a sweep point read preemptions with the one rule
    (``server_side.preemptions``): the counter summed over its label sets, wide, nested
    or long rows."""
    from workbench.records import RunResult
    from workbench.storage.rundir import SUMMARY, write_json
    from workbench.sweeps.points import point_metrics

    evidence = server_evidence(rows)
    assert (evidence["engine"], evidence["preemptions"]) == (engine, want)
    write_json(tmp_path / SUMMARY, {})  # the point's other figures: none
    point = point_metrics(tmp_path, None, RunResult("r", [], metrics_timeline=rows))
    assert point["preemptions"] == want


def test_no_timeline_says_so() -> None:
    assert server_evidence([])["engine"] is None
    assert server_evidence([{"t_ns": 1, "error": "boom"}])["scrape_errors"] == 1
    assert "No server-side evidence" in tables.server_caption({"ttft_ms": {}, "server": None})


def test_simulate_samples_the_engine_like_a_scraper() -> None:
    result = wb.simulate(_cfg({"url": "sim", "engine": TIGHT}))
    s = wb.summarize(result)
    server = s["server"]
    per_request = sum(r.extra.get("preemptions", 0) for r in result.records)
    assert server["engine"] == "vllm" and server["preemptions"] == per_request > 0
    assert server["peak_running_requests"] >= 1 and server["peak_waiting_requests"] >= 1
    # samples on the scrape interval's grid of virtual time, plus the first and the last,
    # kept only when the engine's state changed (docs/virtual-time.md): this busy engine
    # changes in almost every interval
    timeline = result.metrics_timeline
    t0, step = timeline[0]["t_ns"], round(0.05 * 1e9)
    span_s = (timeline[-1]["t_ns"] - t0) / 1e9
    assert 0.9 * span_s / 0.05 <= len(timeline) <= span_s / 0.05 + 2
    assert all((r["t_ns"] - t0) % step == 0 for r in timeline[1:-1])
    states = [{k: v for k, v in r.items() if k != "t_ns"} for r in timeline[1:-1]]
    assert all(a != b for a, b in itertools.pairwise(states))


def test_simulate_honours_block_hashes_and_gc_freeze() -> None:
    base = {"trace": {"path": SESSIONS, "max_items": 4}}
    on = wb.simulate(base)
    off = wb.simulate({**base, "executor": {"block_hashes": False, "gc_freeze": False}})
    assert all("input_sequence_hashes" in r.extra for r in on.records)
    assert not any("input_sequence_hashes" in r.extra for r in off.records)
    assert off.manifest.virtual_executor["block_hashes"] is False
    assert off.manifest.virtual_executor["gc_freeze"] is False
    assert [r.end_ns for r in on.records] == [r.end_ns for r in off.records]


def test_simulate_shards_like_a_live_run_with_workers() -> None:
    base = {"trace": {"path": SESSIONS, "max_items": 12},
            "arrival": {"mode": "saturated", "max_concurrency": 4, "tool_wait_scale": 0.0}}
    sharded = wb.simulate({**base, "executor": {"workers": 2}})
    assert sharded.manifest.virtual_executor["shards"] == 2
    assert len(sharded.records) == len(wb.simulate(base).records)
    slots = {r.routing_slot for r in sharded.records}
    assert slots <= set(range(4)) and len(slots) == 4  # 2 + 2 slots, stacked, unique
    assert sharded.manifest.peak_active_units <= 4


def test_simulate_shards_when_workers_equal_the_concurrency() -> None:
    """``workers: 2`` with ``max_concurrency: 2``: each shard is one worker with one slot
    (it was refused: the shard's config still said two workers for its one slot)."""
    base = {"trace": {"path": SESSIONS, "max_items": 6},
            "arrival": {"mode": "saturated", "max_concurrency": 2, "tool_wait_scale": 0.0}}
    sharded = wb.simulate({**base, "executor": {"workers": 2}})
    assert sharded.manifest.virtual_executor["shards"] == 2
    assert {r.routing_slot for r in sharded.records} == {0, 1}
    assert len(sharded.records) == len(wb.simulate(base).records)


def test_simulate_keep_records_false_stays_on_disk(tmp_path: Path) -> None:
    base = {"trace": {"path": SESSIONS, "max_items": 6}, "run_id": "r"}
    kept = wb.simulate({**base, "out_dir": str(tmp_path / "a")})
    disk = wb.simulate({**base, "out_dir": str(tmp_path / "b"),
                        "executor": {"keep_records": False}})  # fmt: skip
    assert disk.records == [] and disk.records_on_disk
    assert (Path(disk.run_dir or "") / "records.jsonl").exists()
    a, b = wb.summarize(kept), wb.summarize(disk)  # b: read from the files
    for key in ("requests", "ok", "server", "warm_cache", "cache_reported_requests"):
        assert a[key] == b[key], key
    assert b["ttft_ms"] == pytest.approx(a["ttft_ms"], rel=1e-12)
    from workbench.report.canonical import canonical_report

    ra, rb = canonical_report(kept), canonical_report(disk)
    for part in ("summary", "records", "lifecycle", "metrics_timeline"):
        assert ra[part] == rb[part], part  # only the config (keep_records) differs
    RunConfig.from_dict(base)  # the config itself stays valid


def test_sampling_the_engine_does_not_change_what_it_did() -> None:
    base = {"trace": {"path": SESSIONS, "max_items": 8}, "run_id": "same",
            "target": {"url": "sim", "engine": TIGHT}}
    quiet = wb.simulate({**base, "backend": {"name": "openai", "scrape_interval_s": None}})
    busy = wb.simulate({**base, "backend": {"name": "openai", "scrape_interval_s": 0.01}})
    assert len(quiet.metrics_timeline) == 2 < len(busy.metrics_timeline)
    assert [r.to_dict() for r in quiet.records] == [r.to_dict() for r in busy.records]
