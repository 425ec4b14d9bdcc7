"""The ideal prefix hit rate is the plan's, under the context policy as configured.

It was computed while building the manifest with the policy's *default* options, so a
run with ``context.major_compaction_min_drop_tokens`` set reported the ideal of another
plan than the one it replayed.
"""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.context.policy import effective_policy, make_policy
from workbench.records import Round, Unit, Workload
from workbench.replay.plan import build_plan
from workbench.replay.prepare import base_manifest
from workbench.workloads.trace_stats import ideal_prefix_hit_rate

OPTIONS = {"major_compaction_min_drop_tokens": 100, "major_compaction_min_drop_ratio": 0.5}


def compacting_sessions() -> Workload:
    """Two sessions whose second round reports a prefix far shorter than the context (a
    compaction): a major one under OPTIONS, not under the defaults (64k tokens)."""
    units = []
    for sid in ("a", "b"):
        rounds = (Round(f"{sid}0", sid, 0, 0.0, 0, 2000, 10),
                  Round(f"{sid}1", sid, 1, 0.0, 200, 40, 10),
                  Round(f"{sid}2", sid, 2, 0.0, 250, 40, 10))
        units.append(Unit(sid, "session", 0.0, rounds))
    return Workload(tuple(units), "session")


def test_the_manifest_ideal_uses_the_configured_policy_options() -> None:
    w = compacting_sessions()
    cfg = RunConfig.from_dict({"trace": "x.csv", "context": {"policy": "prefix-preserving",
                                                             **OPTIONS}})
    configured = ideal_prefix_hit_rate(w, make_policy("prefix-preserving", OPTIONS))
    default = ideal_prefix_hit_rate(w, effective_policy(w, "prefix-preserving"))
    assert configured != pytest.approx(default)  # the options change the plan, so the ideal
    plan = build_plan(cfg, w)
    assert any(r.major_compaction for u in plan.units for r in u.rounds)
    manifest = base_manifest(cfg, w, plan, "r")
    assert manifest.ideal_prefix_hit_rate == pytest.approx(configured)


def test_the_ideal_of_a_default_policy_run_is_unchanged() -> None:
    w = compacting_sessions()
    cfg = RunConfig.from_dict({"trace": "x.csv", "context": "prefix-preserving"})
    plan = build_plan(cfg, w)
    assert base_manifest(cfg, w, plan, "r").ideal_prefix_hit_rate == pytest.approx(
        ideal_prefix_hit_rate(w, effective_policy(w, "prefix-preserving")))
