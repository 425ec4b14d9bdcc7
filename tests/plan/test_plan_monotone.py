"""A plan whose probes are not monotone in replicas says so (docs/plan.md, "Fewest
replicas"): the search assumes more replicas never break an SLO that fewer held; when a
probe shows otherwise, the sentence names the counts instead of stating the fewest as if
every larger count held.

The real case: the first 40 requests of the bundled Mooncake slice at their own rate on
llama-3.1-8b/h100/tp1 behind the prefix-aware router, TTFT p90 ≤ 1.465 s: 5 replicas hold
it as simulated, 6 break it (the router spreads the shared prefixes over one more replica),
7 hold it again (with the preset factors of s26-02's refit; at those of the record before
it the case was 4, 5 and 6 under 3 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import data
from workbench.cli import main
from workbench.plan import PlanResult, load_plan

MOONCAKE = str(data.path("mooncake/conversation_trace_head600.jsonl"))


def _plan(tmp: Path, capsys: pytest.CaptureFixture[str], items: int, slo: str,
          max_replicas: int) -> tuple[PlanResult, str]:
    """``workbench plan`` of the first ``items`` Mooncake requests on one H100 preset; the
    stored plan and what the command printed."""
    assert main(["plan", "--trace", MOONCAKE, "--max-items", str(items),
                 "--preset", "llama-3.1-8b/h100/tp1", "--slo", slo, "--scale", "1",
                 "--max-replicas", str(max_replicas), "--parallel", "1",
                 "-o", str(tmp)]) == 0
    (plan_dir,) = [p for p in tmp.iterdir() if p.is_dir()]
    return load_plan(plan_dir), capsys.readouterr().out


def test_a_count_that_breaks_above_one_that_held_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result, out = _plan(tmp_path, capsys, 40, "ttft_ms:p90<=1465", 8)
    sim = {p.replicas: p.held for p in result.probes}
    assert sim[5] and not sim[6] and sim[7]  # the probes the sentence must not hide
    answer = result.answer()
    assert "Not monotone in replicas for llama-3.1-8b/h100/tp1: as simulated 5 held it, " \
           "yet 6 broke it " \
           "(TTFT p90 " in answer
    assert answer in out


def test_a_plan_held_on_too_few_requests_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """20 requests under a p99 bound that one replica holds with room to spare: the answer
    says one replica holds it, and that a p99 over 20 requests cannot show it."""
    result, out = _plan(tmp_path, capsys, 20, "ttft_ms:p99<=60000", 2)
    answer = result.answer()
    assert answer.startswith("1 replica of llama-3.1-8b/h100/tp1 · prefix-aware")
    assert ("The verdict rests on too few requests to show it at 95 % confidence: TTFT p99 "
            "from 20 ok requests (needs 299).") in answer
    assert answer in out
    assert result.probes[0].thin == {"ttft_ms:p99": {"n": 20, "needed": 299}}
