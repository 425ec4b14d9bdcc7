"""Axis 2: what each round's prompt reuses (policies) and where its tokens come from."""

from workbench.context.policy import (
    MAJOR_COMPACTION_MIN_DROP_RATIO,
    MAJOR_COMPACTION_MIN_DROP_TOKENS,
    POLICIES,
    ContextPolicy,
    PlannedRound,
    plan_rounds,
)

__all__ = [
    "MAJOR_COMPACTION_MIN_DROP_RATIO",
    "MAJOR_COMPACTION_MIN_DROP_TOKENS",
    "POLICIES",
    "ContextPolicy",
    "PlannedRound",
    "plan_rounds",
]
