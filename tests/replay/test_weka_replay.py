"""Captured coding-agent conversations replayed (docs/weka-traces.md): a sub-agent
conversation of the bundled sample keeps its graph in virtual time (children start when
the parent's request before their marker ends, the parent's next request waits for them
and for its own think time) with one digest across processes; the warm prefix is hit
across conversations on the embedded engine as the plan says, live and in virtual time."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.records import RequestRecord, RunResult
from workbench.report.canonical import canonical_report, report_digest
from workbench.traces.load import load_trace

SAMPLE = str(data_path("weka/cc_traces_sample.jsonl"))
ROOT = Path(__file__).resolve().parents[2]


def _by_unit(result: RunResult) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in sorted(result.records, key=lambda r: r.round_idx):
        out[r.session_id].append(r)
    return out


def test_a_subagent_conversation_waits_for_its_children_in_virtual_time() -> None:
    cfg = {"trace": {"path": SAMPLE, "max_items": 1}, "arrival": {"mode": "saturated"}}
    res = simulate(cfg)
    workload = load_trace(SAMPLE)
    units = {u.unit_id: u for u in workload.units if u.unit_id.startswith("trace_0277")}
    recs = _by_unit(res)
    assert set(recs) == set(units) and len(units) == 5  # the root and its 4 sub-agents
    assert all(r.status == "ok" for rs in recs.values() for r in rs)
    ends = {row["unit_id"]: row["end_ns"] for row in res.lifecycle}
    parent = recs["trace_0277"]
    for uid, u in units.items():
        assert [r.prompt_tokens for r in recs[uid]] == [r.prompt_len for r in u.rounds]
        sp = u.spawn
        if sp is None:
            continue
        k, j = sp.round_idx, sp.join_round
        assert j is not None
        # the child starts the moment the parent's request before its marker ends ...
        assert recs[uid][0].dispatch_ns == parent[k].end_ns
        # ... and the parent's next request waits for it and for its own think time
        wait_ns = units["trace_0277"].rounds[k].tool_wait_after_ms * 1e6
        assert parent[j].dispatch_ns >= max(ends[uid], parent[k].end_ns + wait_ns)
    # the three Explore agents of round 0 ran side by side
    firsts = sorted(recs[f"trace_0277::sa:agent_00{i}"][0].dispatch_ns for i in (1, 2, 3))
    assert firsts[0] == firsts[2]
    # the parent's round 1 waited on the slowest of them, not on its 209 s think time
    assert parent[1].dispatch_ns == max(
        parent[0].end_ns + int(units["trace_0277"].rounds[0].tool_wait_after_ms * 1e6),
        *(ends[f"trace_0277::sa:agent_00{i}"] for i in (1, 2, 3)))


def _cli_digest(cwd: Path, hash_seed: str) -> str:
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", SAMPLE, "--max-items", "1",
           "--arrival", "saturated", "--digest"]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return next(ln for ln in done.stdout.splitlines() if ln.startswith("digest:"))


def test_the_digest_is_one_across_processes(tmp_path: Path) -> None:
    a = _cli_digest(tmp_path, "1")
    b = _cli_digest(ROOT, "2")
    assert a == b
    here = simulate({"trace": {"path": SAMPLE, "max_items": 1},
                     "arrival": {"mode": "saturated"}, "run_id": "elsewhere"})
    assert a == "digest: " + report_digest(canonical_report(here))


def _two_conversations(tmp_path: Path) -> str:
    """Two conversations without sub-agents (the sample's 5th and 6th lines)."""
    lines = Path(SAMPLE).read_bytes().splitlines()[4:6]
    p = tmp_path / "two.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    return str(p)


def _first_rounds(res: RunResult) -> list[RequestRecord]:
    return sorted((r for r in res.records if r.round_idx == 0), key=lambda r: r.unit_ordinal)


def test_the_warm_prefix_is_hit_across_conversations_as_planned(tmp_path: Path) -> None:
    trace = _two_conversations(tmp_path)
    one_at_a_time = {"mode": "saturated", "max_concurrency": 1}
    warm = simulate({"trace": trace, "arrival": one_at_a_time})
    reader = warm.manifest.trace["reader"]
    a, b = _first_rounds(warm)
    assert a.cached_tokens == 0 and a.planned_prefix_tokens == 0
    assert b.planned_prefix_tokens == reader["warm_prefix_tokens"] // 64 * 64 > 7000
    assert b.cached_tokens == b.planned_prefix_tokens  # 64-token blocks: the engine's 16 fit
    cold = simulate({"trace": {"path": trace, "options": {"warm_prefix_pct": 0}},
                     "arrival": one_at_a_time})
    assert [r.cached_tokens for r in _first_rounds(cold)] == [0, 0]


async def test_the_warm_prefix_is_hit_on_the_live_embedded_engine(tmp_path: Path, sim) -> None:
    trace = _two_conversations(tmp_path)
    cfg = RunConfig.from_dict({
        "trace": {"path": trace, "options": {"max_delay_s": 0.01}},
        "arrival": {"mode": "saturated", "max_concurrency": 1, "output_len": "fixed:2"},
        "backend": "openai", "target": sim.base_url})
    async with asyncio.timeout(120):
        res = await run_async(cfg)
    assert all(r.status == "ok" for r in res.records)
    a, b = _first_rounds(res)
    assert a.cached_tokens == 0
    assert b.cached_tokens == b.planned_prefix_tokens > 7000
    planned = sum(r.planned_prefix_tokens for r in res.records)
    hit = sum(r.cached_tokens or 0 for r in res.records)
    assert hit == planned  # every planned hit, no more (one conversation at a time)
