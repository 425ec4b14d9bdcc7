"""Golden vectors of docs/context-policy.md (context policy arithmetic)."""

import pytest

from workbench.context import POLICIES, PlannedRound, plan_rounds
from workbench.errors import ConfigError
from workbench.records import Round


def _round(p, i, o, idx=0, reset=False):
    return Round(f"r{idx}", "s", idx, 0.0, p, i, o, reset_before=reset)


def test_trace_reported_first_round_folds_reported_prefix():
    policy = POLICIES.get("trace-reported")
    planned = policy.plan(0, 12461, 5875)
    assert planned == PlannedRound(0, 18336, folded_prefix_tokens=12461)
    plan = plan_rounds([_round(12461, 5875, 124)], policy)
    assert plan[0].folded_prefix_tokens == 12461
    # next C = 0 + 18336 + 124
    nxt = policy.plan(18460, 20000, 10)
    assert (nxt.prefix_len, nxt.input_len, nxt.folded_prefix_tokens) == (18460, 1550, 1540)


def test_trace_reported_never_claims_more_than_exists():
    policy = POLICIES.get("trace-reported")
    plan = plan_rounds([_round(0, 512, 64), _round(576, 128, 64, 1), _round(100, 50, 5, 2)], policy)
    assert [(p.prefix_len, p.input_len) for p in plan] == [(0, 512), (576, 128), (100, 50)]


@pytest.mark.parametrize(
    ("context", "target", "expected", "major"),
    [
        (576, 704, (576, 128), False),
        (100000, 90000, (90000, 0), False),
        (200000, 130000, (130000, 0), False),  # drop 35 %: no compaction
        (140000, 70000, (0, 70000), True),  # drop 70000 tokens, 50 %: major compaction
    ],
)
def test_prefix_preserving_golden(context, target, expected, major):
    for name in ("prefix-preserving", "monotonic"):
        planned = POLICIES.get(name).plan(context, target // 2, target - target // 2)
        assert (planned.prefix_len, planned.input_len) == expected
        assert planned.major_compaction is major


def test_reset_before_empties_context():
    policy = POLICIES.get("prefix-preserving")
    plan = plan_rounds([_round(0, 100, 10), _round(0, 200, 10, 1, reset=True)], policy)
    assert (plan[1].prefix_len, plan[1].input_len) == (0, 200)


def test_unknown_policy_lists_valid_names():
    with pytest.raises(ConfigError, match="trace-reported, prefix-preserving"):
        POLICIES.get("nope")
