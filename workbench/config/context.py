"""Axis 2 of a run config: the context policy, its options, and the rules that tie it to
the trace it applies to (docs/axes.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from workbench.context import POLICIES, policy_options
from workbench.context.policy import planned_file_message
from workbench.errors import ConfigError
from workbench.plurals import noun
from workbench.ranges import check_mapping, hints_of
from workbench.records import Workload


@dataclass(frozen=True)
class ContextSpec:
    """Axis 2: ``policy`` None means ``trace-reported`` for sessions; ``options``, the
    policies' declared options, sit flat beside ``policy`` in a config and ``to_dict``."""

    policy: str | None = None
    shared_prefix: bool = False
    max_model_len: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.options, dict):  # every declared option, given or default
            object.__setattr__(self, "options", {**policy_options(), **self.options})

    @classmethod
    def from_flat(cls, value: dict[str, Any]) -> ContextSpec:
        """From a config's ``context`` mapping: the policy options sit beside the fields."""
        declared = policy_options()
        own = {k: v for k, v in value.items() if k not in declared}
        nested = own.pop("options", None) or {}
        if not isinstance(nested, dict):
            raise ConfigError(f"context.options: expected a mapping, got {nested!r}")
        return cls(**own, options={**nested, **{k: value[k] for k in value if k in declared}})

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        options = d.pop("options")
        return {**d, **options}

    @property
    def policy_name(self) -> str | None:
        """The configured policy's registered name (an alias resolved), or None."""
        return None if self.policy is None else POLICIES.canonical(self.policy, "context.policy")

    def check_options(self) -> None:
        """``context.<option>``: names a registered policy declares, each of its type."""
        opts = self.options
        unknown = sorted(set(opts) - set(policy_options()))
        if unknown:
            raise ConfigError(f"unknown context {noun(len(unknown), 'option')} {unknown}; valid: "
                              f"{', '.join(sorted(context_keys()))}")  # fmt: skip
        for name in POLICIES.names():
            policy = POLICIES.get(name)
            if dataclasses.is_dataclass(policy):
                check_mapping("context", opts, hints_of(type(policy)))

    def check_applies(self, workload: Workload) -> None:
        """The policy applies to what the trace holds: conversations not yet planned."""
        if self.policy is None:
            return
        check_not_planned(self.policy, workload)
        if not workload.has_sessions:
            raise ConfigError(
                f"context.policy {self.policy!r} applies to sessions, but trace format "
                f"{workload.fmt!r} holds only independent requests; unset context.policy"
            )
        if workload.has_hash_ids:
            raise ConfigError(
                f"context.policy {self.policy!r} cannot apply to {workload.fmt!r}: its "
                "prompts come from block hash ids, not a conversation; unset context.policy"
            )


def check_not_planned(policy: str | None, workload: Workload) -> None:
    """A file planned under a policy already (session-execution-v2) takes no other."""
    if policy is not None and workload.meta.get("needs_context_policy") is False:
        raise ConfigError(planned_file_message(policy, workload))


def context_keys() -> set[str]:
    """The names a config's ``context`` mapping may hold."""
    return {f.name for f in dataclasses.fields(ContextSpec)} | set(policy_options())
