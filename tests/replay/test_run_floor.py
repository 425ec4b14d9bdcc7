"""How long a run takes at the least, said before it starts (docs/arrival.md, "How long a
run takes"): the waits of the longest agent task through its joins, the release span,
the concurrency cap and a closed-loop duration; the warning a long run gets."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.durations import duration_text
from workbench.replay.plan import build_plan, run_floor
from workbench.replay.prepare import load_workload, prepare

HEADER = ("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,"
          "parent_session_id,spawn_round,spawn_trigger,spawn_delay_ms,join_round,"
          "arrival_time\n")
# p: rounds with waits 1000 and 2000 ms; after round 0 ends, c (waits 5000) is spawned
# and joined before round 1: round 1 starts at max(1000, 0 + 5000) = 5000, round 2 at
# 7000. q arrives at 3000 with one 500 ms wait: it ends at 3500.
ROWS = """p,0,0,64,8,1000,,,,,,0
p,1,72,32,8,2000,,,,,,0
p,2,112,16,4,0,,,,,,0
c,0,0,48,6,5000,p,0,round_end,0,1,0
c,1,54,16,6,0,,,,,,0
q,0,0,32,4,500,,,,,,3000
q,1,36,32,4,0,,,,,,3000
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "graph.csv"
    p.write_text(HEADER + ROWS)
    return p


def _floor(trace: Path, **arrival: object):
    cfg = RunConfig.from_dict({"trace": str(trace), "arrival": arrival, "backend": "openai"})
    plan = build_plan(cfg, load_workload(cfg))
    return run_floor(plan, cfg.arrival)


def test_the_longest_task_through_its_join(trace: Path) -> None:
    f = _floor(trace)
    assert f is not None
    assert (f.floor_ms, f.longest_ms, f.longest_unit, f.span_ms) == (7000, 7000, "p", 3000)
    assert f.why == "its longest agent task (p) waits 7 s on tools and sub-agents"
    half = _floor(trace, tool_wait_scale=0.5)
    assert half is not None and half.floor_ms == 3500


def test_a_cap_packs_the_tasks_and_a_duration_is_a_floor(trace: Path) -> None:
    one = _floor(trace, max_concurrency=1)
    assert one is not None and one.floor_ms == 7500  # (7000 + 500) / 1 slot
    assert one.why == "2 agent tasks of 7.5 s of tool waits in all share 1 slot"
    loop = _floor(trace, mode="closed-loop", max_concurrency=2, duration_s=600)
    assert loop is not None and loop.floor_ms == 600_000
    assert loop.why == "it loops its units for its duration of 10 min 0 s"


def test_a_release_span_longer_than_any_task_is_the_reason(trace: Path) -> None:
    f = _floor(trace, rate=0.0001)  # 2 units at 0.0001/s: the second 10,000 s later
    assert f is not None and f.span_ms == pytest.approx(1e7)
    assert f.why == "the units' releases span 2 h 46 min"


@pytest.mark.parametrize(("ms", "text"), [(42_400, "42 s"), (3_063_000, "51 min 3 s"),
                                          (7_500_000, "2 h 5 min"), (7_500, "7.5 s"),
                                          (7_000, "7 s"), (100_000_000, "1.2 days")])
def test_duration_text(ms: float, text: str) -> None:
    assert duration_text(ms) == text


def test_a_long_run_is_announced_before_it_starts(trace: Path, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    slow = tmp_path / "slow.csv"
    slow.write_text(HEADER + ROWS.replace("p,1,72,32,8,2000", "p,1,72,32,8,3600000"))
    with caplog.at_level(logging.WARNING, "workbench.replay.prepare"):
        prepare({"trace": str(slow)})
    assert ("this run takes at least 1 h 0 min before any server time: its longest agent "
            "task (p) waits 1 h 0 min on tools and sub-agents") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "workbench.replay.prepare"):
        prepare({"trace": str(slow)}, virtual=True)
        prepare({"trace": str(trace)})  # 7 s: nothing said
    assert caplog.text.count("this run takes at least") == 1
    assert "1 h 0 min of simulated time" in caplog.text


def test_dry_run_prints_the_floor(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    assert main(["replay", "--trace", str(trace), "--target", "sim", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["wait_floor_s"] == 7.0
    assert plan["wait_floor_why"].startswith("its longest agent task (p)")
