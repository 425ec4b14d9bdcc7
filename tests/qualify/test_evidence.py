"""Pressure evidence (qualify/evidence.py): each rule on the records it reads."""

from __future__ import annotations

from parity_specs import MOON, canonical_report

from workbench.executors.virtual import simulate
from workbench.qualify import evidence
from workbench.qualify.evidence import preemption_check, spread_check


def _recs(preemptions: list[int]) -> list[dict]:
    return [{"request_id": f"r{i}", "extra": {"preemptions": p}} for i, p in enumerate(preemptions)]


def test_preemptions_one_to_three_pass_zero_flood_and_cycling_fail():
    assert preemption_check(_recs([0, 1, 0, 1]), (1, 3))["status"] == "pass"
    zero = preemption_check(_recs([0, 0]), (1, 3))
    assert zero["status"] == "fail" and "not exercised" in zero["rule"]
    flood = preemption_check(_recs([1, 1, 1, 1]), (1, 3))
    assert flood["status"] == "fail" and "a flood (4)" in flood["rule"]
    cycling = preemption_check(_recs([2, 0]), (1, 3))
    assert cycling["status"] == "fail" and "re-admit cycling" in cycling["rule"]
    assert preemption_check(_recs([0]), (0, 0))["status"] == "pass"  # a row's own bounds


def test_round_robin_workers_and_ranks_must_be_within_one():
    cluster = {"workers": 2, "router": "round-robin", "dp": 2, "dp_placement": "round-robin"}
    recs = [{"extra": {"worker": w, "dp_rank": k}} for w, k in
            [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (1, 1)]]
    ok = spread_check(recs, cluster)
    assert ok["status"] == "pass" and ok["figure"] == {"0.0": 2, "0.1": 1, "1.0": 1, "1.1": 2}
    skewed = recs + [{"extra": {"worker": 0, "dp_rank": 0}}] * 2
    assert spread_check(skewed, cluster)["status"] == "fail"
    idle = [r for r in recs if r["extra"]["worker"] == 0]
    assert "2 served none" in spread_check(idle, cluster)["rule"]
    assert spread_check(recs, None)["status"] == "n/a"


def test_a_disaggregated_run_shows_handoffs_reuse_cleanup_and_time():
    result = simulate({"trace": {"path": str(MOON), "offset": 100, "max_items": 40}},
                      engine={"router": "round-robin", "disagg": {"prefill": 1, "decode": 1}})
    ev = evidence(canonical_report(result))
    checks = ev["checks"]
    assert checks["handoffs"]["status"] == "pass" and checks["handoffs"]["figure"] > 0
    assert checks["prefix_reuse"]["status"] == "pass"
    assert checks["cleanup"]["status"] == "pass"
    assert checks["virtual_time"]["status"] == "pass"
    assert checks["virtual_time"]["figure"]["virtual_s"] > 0
    assert ev["failed"] == ["preemptions"]  # the default engine has room: not exercised
    assert ev["requests"] == 40
