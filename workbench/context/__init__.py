"""Axis 2: what each round's prompt reuses (policies) and where its tokens come from.

A policy is one class registered with ``@register_policy(name, *aliases)``; its
options are its dataclass fields and its capabilities class attributes
(``needs_output_ids``); nothing outside this package dispatches on its name.
"""

from workbench.context.policy import (
    DEFAULT_POLICY,
    POLICIES,
    ContextPolicy,
    PlannedRound,
    make_policy,
    plan_rounds,
    policy_options,
    register_policy,
)

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "ContextPolicy",
    "PlannedRound",
    "make_policy",
    "plan_rounds",
    "policy_options",
    "register_policy",
]
