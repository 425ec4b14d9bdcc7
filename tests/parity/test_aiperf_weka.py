"""Parity with AIPerf on the same Weka files, both against the embedded engine.

AIPerf 0.13.0 (``scripts/aiperf.sh``) and workbench each replay the four files of
``tests/fixtures/weka-parity`` against a fresh ``workbench sim serve`` (block size 64,
as the files; zero-cost steps), every root at once and no recorded waits. What each sent
is read on the server's side (``weka_parity``) and held to rules that name every
difference (docs/aiperf-parity.md):

- requests per conversation: every request of every file, each sub-agent its own
  conversation (91 requests in 10 conversations);
- output tokens: ``out`` for both (``max_tokens``, the engine generates exactly that);
- prompt tokens: ``in`` for workbench (token ids); for AIPerf ``in`` plus the engine's
  chat template, 2 tokens per message + 1 (AIPerf's content is ``in`` tokens exactly);
- sub-agents: started when the parent request before the marker ended; joined by the
  parent request right after the marker (workbench) or by the first parent request
  recorded at or after the sub-agent's recorded end, none if no such request (AIPerf):
  four of the six sub-agents of these files are joined later by AIPerf, or never;
- prefix-cache hits: per request the ideal from the hash ids (workbench exactly, AIPerf
  within one block), a sub-agent's first request that raced a sibling's at most the
  ideal; the two tools within one block of each other request by request, and in total
  within 1 %. Workbench's default warm prefix (shared by every conversation, as
  kv-cache-tester replays) adds hits AIPerf does not have: the last test.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from weka_parity import (
    BLOCK,
    FILES,
    FIXTURES,
    Run,
    WekaFile,
    check_cached,
    check_counts,
    check_order,
    check_pair,
    check_tokens,
    debug_rows,
    ideal_cached,
    joins,
    load_files,
    read_aiperf,
    read_workbench,
    run_aiperf,
    run_workbench,
)

from workbench.sim.process import serve_sim_process

ENGINE = {"block_size": BLOCK, "zero_cost": True}
# (file, sub-agent): (joined by, workbench; joined by, AIPerf) where the two differ
JOINS_DIFFER = {
    ("trace_0277", "agent_002"): (1, 7),  # ends at 348.35 s; parent request 6 is at 347 s
    ("trace_0277", "agent_003"): (1, 7),
    ("trace_0277", "agent_004"): (7, None),  # ends at 1061 s, after the last parent request
    ("trace_0291", "agent_002"): (16, 17),
}


@pytest.fixture(scope="module")
def files() -> dict[str, WekaFile]:
    return load_files(FIXTURES)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("weka")
    for name in FILES:
        shutil.copy(FIXTURES / name, folder / name)
    return folder


async def _aiperf(inputs: Path, out: Path) -> Run:
    async with serve_sim_process(**ENGINE) as sim:
        await run_aiperf(sim.base_url, inputs, out)
        rows = debug_rows(sim.base_url)
    run = read_aiperf(out, rows)
    assert len(run.sent) == len(rows), "the engine answered requests AIPerf did not record"
    return run


async def _workbench(inputs: Path, out: Path, *options: str) -> Run:
    async with serve_sim_process(**ENGINE) as sim:
        run_dir = await run_workbench(sim.base_url, inputs, out, *options)
        rows = debug_rows(sim.base_url)
    run = read_workbench(run_dir, rows)
    # besides the trace, only workbench's preflight (two short probes of its own tokens)
    ours = {f"{s.conv[0]}{'::sa:' + s.conv[1] if s.conv[1] else ''}:{s.index}" for s in run.sent}
    assert all(rid.startswith("req-frontend-preflight") for rid in set(rows) - ours)
    return run


# one run of each tool for the module (sync fixtures: each runs its own event loop)
@pytest.fixture(scope="module")
def aiperf_run(aiperf_ready: None, inputs: Path, tmp_path_factory) -> Run:
    return asyncio.run(_aiperf(inputs, tmp_path_factory.mktemp("aiperf") / "out"))


@pytest.fixture(scope="module")
def workbench_run(inputs: Path, tmp_path_factory) -> Run:
    # the warm prefix off: AIPerf shares no block between files
    out = tmp_path_factory.mktemp("wb") / "out"
    return asyncio.run(_workbench(inputs, out, "warm_prefix_pct=0"))


def test_the_files_join_differently(files):
    got = {(t, sa.agent_id): (wb, ap) for t, sa, wb, ap in joins(files) if wb != ap}
    assert got == JOINS_DIFFER
    assert sum(len(f.subagents) for f in files.values()) == 6


def test_subagents_recorded_joins_where_aiperf_joins(files, inputs):
    """The reader's ``subagents: recorded`` is AIPerf's join rule: every sub-agent of the
    four files is joined by the parent request AIPerf's rule names (none: nobody)."""
    from workbench.traces.load import load_trace

    spawns = {u.unit_id: u.spawn for u in load_trace(inputs, subagents="recorded").units}
    got = {(t, sa.agent_id): spawns[f"{t}::sa:{sa.agent_id}"].join_round  # type: ignore[union-attr]
           for t, sa, _, _ in joins(files)}
    assert got == {(t, sa.agent_id): ap for t, sa, _, ap in joins(files)}


@pytest.mark.parametrize("tool", ["aiperf", "workbench"])
def test_each_tool_sends_by_its_rules(tool, files, request):
    run: Run = request.getfixturevalue(f"{tool}_run")  # workbench's needs no AIPerf
    assert len(run.sent) == 91 and len(run.by_conv) == 10
    assert check_counts(files, run) == []
    assert check_tokens(files, run) == []
    assert check_order(files, run) == []
    assert check_cached(files, run) == []
    ideal = sum(ideal_cached(files, run).values())
    got = sum(s.cached_tokens for s in run.sent)
    assert 0.99 * ideal <= got <= ideal + BLOCK * len(run.sent), (got, ideal)


def test_request_by_request_the_tools_agree_but_for_the_template(files, aiperf_run, workbench_run):
    assert check_pair(files, aiperf_run, workbench_run) == []
    a = sum(s.cached_tokens for s in aiperf_run.sent)
    w = sum(s.cached_tokens for s in workbench_run.sent)
    assert abs(a - w) <= 0.01 * w, (a, w)
    extra = sum(s.prompt_tokens for s in aiperf_run.sent) - sum(
        s.prompt_tokens for s in workbench_run.sent
    )
    assert 91 * 5 <= extra < 91 * 64  # 5 on a first request, 2 more per message after


async def test_the_default_warm_prefix_adds_hits_aiperf_has_not(files, inputs, tmp_path):
    run = await _workbench(inputs, tmp_path / "out")
    assert check_counts(files, run) == check_tokens(files, run) == check_order(files, run) == []
    # every conversation's first request but the very first finds the shared warm blocks
    ideal = ideal_cached(files, run)
    firsts = [s for s in run.sent if s.index == 0]
    over = [s for s in firsts if s.cached_tokens > ideal[(s.conv, 0)]]
    assert len(over) >= len(files) - 1
    assert sum(s.cached_tokens for s in run.sent) > sum(ideal.values())
