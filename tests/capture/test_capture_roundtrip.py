"""Round trip: a scripted agent captured in front of the embedded engine, the capture
replayed by workbench (``load_trace`` reads it as ``weka``) against a fresh engine of
the same configuration: the same sessions, rounds and token counts, prefix-cache hits
within 2 % of the original run's, and the tool waits the script made: the replay applies
the captured think times, which lie within the script's own stamps of its requests
(``scripted_agent.think_bounds``), and waits them out — exactly in virtual time, at
least as long on the wall clock, whose lag a loaded machine stretches and the replay
measures itself (docs/capture.md, "Round trip")."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from pathlib import Path

import pytest
from capture_process import capture_process
from scripted_agent import SLACK_S, Script, think_bounds

from workbench.capture import read_capture
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.records import RequestRecord
from workbench.sim.process import serve_sim_process
from workbench.traces.load import detect_format, load_trace

ENGINE = {"speedup": 50.0}
NS_PER_MS = 1_000_000
EARLY_NS = 1_000


async def test_capture_replays_as_it_ran(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    # long system prompts: the replay shares whole 64-token blocks only, the original
    # also the last prompt's tail and reply (tens of tokens a round)
    script = Script(system_words=4000)
    # `workbench capture` in front of the engine, each in a process of its own as a user
    # runs them: the script's loop shares no CPU time with theirs (times compared below)
    async with serve_sim_process(**ENGINE) as sim, \
            capture_process(sim.base_url, out) as proxy:  # fmt: skip
        sent = await script.run(proxy.url)
    assert proxy.returncode == 0, proxy.console
    docs = read_capture(out)
    assert len(docs) == 3

    assert detect_format(str(out)) == "weka"
    workload = load_trace(str(out))
    units = {u.unit_id: u for u in workload.units}
    assert len(units) == 4 and sum(u.spawn is not None for u in units.values()) == 1
    assert sorted(len(u.rounds) for u in units.values()) == [2, 4, 4, 4]

    # the replay's engine in a process of its own (docs/embedded-engine-process.md): its
    # steps do not delay the replay's sends, whose gaps are compared below
    async with asyncio.timeout(120):
        result = await run_async({"trace": str(out),
                                  "target": {"url": "sim", "engine": ENGINE},
                                  "backend": {"preflight": False}})
    records = result.records
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    assert len(records) == len(sent) == 14

    # the same rounds and counts: each session's (prompt, output) sequence
    def shapes(rows: list[tuple[str, int, int, int]]) -> list[list[tuple[int, int]]]:
        by: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for session, k, p, o in rows:
            by[session].append((k, p, o))
        return sorted([(p, o) for _, p, o in sorted(v)] for v in by.values())

    original = shapes([(f"{s.session}/{s.agent}", s.round, s.prompt_tokens,
                        s.completion_tokens) for s in sent])
    replayed = shapes([(r.session_id, r.round_idx, r.prompt_tokens or 0,
                        r.completion_tokens or 0) for r in records])
    assert replayed == original

    # prefix-cache hits: within 2 % of the original run's
    hit_original = sum(s.cached_tokens for s in sent) / sum(s.prompt_tokens for s in sent)
    hit_replay = (sum(r.cached_tokens or 0 for r in records)
                  / sum(r.prompt_tokens or 0 for r in records))
    assert hit_original > 0.5
    assert abs(hit_replay - hit_original) <= 0.02, (hit_original, hit_replay)

    # the same capture in virtual time: the replay's waits, with no lag of a machine's
    virtual = simulate({"trace": str(out), "target": {"url": "sim", "engine": ENGINE},
                        "backend": {"preflight": False}})
    assert all(r.status == "ok" for r in virtual.records), [r.error for r in virtual.records]

    # tool waits: the gap before each round, replayed vs as the script made it; a
    # file's session: alpha's has the sub-agent, beta's does not stream
    unit_of, captured = {}, {}
    for doc in docs:
        reqs = doc["requests"]
        name = ("alpha" if any(r["type"] == "subagent" for r in reqs)
                else "beta" if reqs[0]["type"] == "n" else "gamma")
        unit_of[f"{name}/main"] = doc["id"]
        captured[f"{name}/main"] = [r for r in reqs if r["type"] != "subagent"]
        captured.update({f"{name}/sub": r["requests"] for r in reqs if r["type"] == "subagent"})
    sub_unit = unit_of["alpha/sub"] = f"{unit_of['alpha/main']}::sa:agent_001"
    assert sorted(unit_of.values()) == sorted({r.session_id for r in records})
    for key, unit in unit_of.items():
        session, agent = key.split("/")
        mine = sorted((s for s in sent if (s.session, s.agent) == (session, agent)),
                      key=lambda s: s.round)
        reqs = captured[key]
        rows = _unit(records, unit)
        assert [(r.prompt_tokens, r.completion_tokens) for r in rows] == [
            (s.prompt_tokens, s.completion_tokens) for s in mine]
        # the tool wait the replay applied before each round: the captured think time
        # (the default timing, docs/weka-traces.md), which the script's stamps bound
        waits = [a.extra["tool_wait_ms"] for a in rows[:-1]]
        assert len(waits) == len(mine) - 1 > 0
        for k, wait in enumerate(waits):
            assert wait == pytest.approx(reqs[k + 1]["think_time"] * 1000, abs=SLACK_S * 1000)
            lo, hi = think_bounds(mine[k], mine[k + 1], reqs[k]["api_time"])
            assert lo * 1000 <= wait <= hi * 1000, (key, k, lo, wait, hi)
        # what the replay then did: the wait, or the sub-agent it joins when that ends
        # later (docs/session-graphs.md); on the wall clock, plus its own sending lag
        for replay, exact in ((records, False), (virtual.records, True)):
            rows = _unit(replay, unit)
            for k, (a, b) in enumerate(itertools.pairwise(rows)):
                floor = round(waits[k] * NS_PER_MS)
                if key == "alpha/main" and k + 1 == script.spawn_after:
                    child_end = max(r.end_ns or 0 for r in replay if r.session_id == sub_unit)
                    floor = max(floor, child_end - (a.end_ns or 0))
                gap = (b.dispatch_ns or 0) - (a.end_ns or 0)
                # (asyncio runs a timer up to its clock's resolution early: 1 µs of slack)
                assert gap == floor if exact else gap >= floor - EARLY_NS, (key, k, gap, floor)


def _unit(records: list[RequestRecord], unit: str) -> list[RequestRecord]:
    return sorted((r for r in records if r.session_id == unit), key=lambda r: r.round_idx)
