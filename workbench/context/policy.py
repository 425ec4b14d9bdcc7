"""Context policies: pure arithmetic from a raw round to the prefix that will exist
(docs/context-policy.md: the replay context ``C``, ``T = P + I``, each policy's rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from workbench.errors import ConfigError
from workbench.records import Round, Workload
from workbench.registry import Registry

MAJOR_COMPACTION_MIN_DROP_TOKENS = 64000
MAJOR_COMPACTION_MIN_DROP_RATIO = 0.5



@dataclass(frozen=True, slots=True)
class PlannedRound:
    """The prefix/input split a policy chose for one round."""

    prefix_len: int
    input_len: int
    folded_prefix_tokens: int = 0
    major_compaction: bool = False


class ContextPolicy(Protocol):
    """One context policy: its options are its dataclass fields (``make_policy``);
    ``needs_output_ids``: it carries the conversation on with the server's exact output
    ids, so it needs a backend that returns them (``Codec.returns_token_ids``)."""

    @property
    def name(self) -> str: ...

    @property
    def needs_output_ids(self) -> bool: ...

    def plan(self, context_len: int, prefix_len: int, input_len: int) -> PlannedRound: ...


POLICIES: Registry[ContextPolicy] = Registry("context policy")
P = TypeVar("P", bound=ContextPolicy)

#: the policy of a conversation when none is configured; the identity on a planned file
DEFAULT_POLICY = "trace-reported"


def register_policy(name: str, *aliases: str) -> Callable[[type[P]], type[P]]:
    """Class decorator: register the policy class's default instance as ``name``."""

    def deco(cls: type[P]) -> type[P]:
        POLICIES.add(name, cls(), *aliases)
        return cls

    return deco


def policy_options() -> dict[str, Any]:
    """Every registered policy's options with their defaults: the ``context.<option>``
    keys a config may carry (docs/context-policy.md)."""
    out: dict[str, Any] = {}
    for name in POLICIES.names():
        pol = POLICIES.get(name)
        if dataclasses.is_dataclass(pol):
            out.update({f.name: getattr(pol, f.name) for f in dataclasses.fields(pol) if f.init})
    return out


def make_policy(name: str, options: Mapping[str, Any] | None = None) -> ContextPolicy:
    """The policy registered as ``name`` (or an alias) with those of ``options`` it declares
    (the others belong to other policies and are ignored)."""
    pol = POLICIES.get(name)
    if not options or not dataclasses.is_dataclass(pol):
        return pol
    own = {f.name for f in dataclasses.fields(pol) if f.init}
    mine = {k: v for k, v in options.items() if k in own}
    return dataclasses.replace(pol, **mine) if mine else pol


@register_policy(DEFAULT_POLICY)
@dataclass(frozen=True)
class TraceReported:
    """Reuse what the trace reports, never a prefix that does not exist: ``p = min(P, C)``,
    the rest folded into fresh input (docs/context-policy.md)."""

    name: ClassVar[str] = "trace-reported"
    needs_output_ids: ClassVar[bool] = False

    def plan(self, context_len: int, prefix_len: int, input_len: int) -> PlannedRound:
        p = min(prefix_len, context_len)
        folded = prefix_len - p
        return PlannedRound(p, input_len + folded, folded_prefix_tokens=folded)


@register_policy("prefix-preserving", "monotonic")
@dataclass(frozen=True)
class PrefixPreserving:
    """Keep the conversation growing, truncated to the trace's target; a drop of both
    thresholds is a major compaction, ``p = 0`` (docs/context-policy.md)."""

    major_compaction_min_drop_tokens: int = MAJOR_COMPACTION_MIN_DROP_TOKENS
    major_compaction_min_drop_ratio: float = MAJOR_COMPACTION_MIN_DROP_RATIO
    name: ClassVar[str] = "prefix-preserving"
    needs_output_ids: ClassVar[bool] = True

    def plan(self, context_len: int, prefix_len: int, input_len: int) -> PlannedRound:
        target = prefix_len + input_len
        drop = max(context_len - target, 0)
        ratio = drop / context_len if context_len else 0.0
        if (
            drop >= self.major_compaction_min_drop_tokens
            and ratio >= self.major_compaction_min_drop_ratio
        ):
            return PlannedRound(0, target, major_compaction=True)
        p = min(context_len, target)
        return PlannedRound(p, target - p)


def plan_rounds(
    rounds: Sequence[Round], policy: ContextPolicy, outputs: Sequence[int] | None = None
) -> list[PlannedRound]:
    """Apply ``policy`` to one session's rounds in order (``reset_before`` empties C);
    ``outputs`` overrides the trace's output lengths (what the model will generate)."""
    context = 0
    out: list[PlannedRound] = []
    for k, r in enumerate(rounds):
        if r.reset_before:
            context = 0
        planned = policy.plan(context, r.prefix_len, r.input_len)
        out.append(planned)
        produced = r.output_len if outputs is None else outputs[k]
        context = planned.prefix_len + planned.input_len + produced
    return out


def effective_policy(
    workload: Workload, policy: str | ContextPolicy | None = None
) -> ContextPolicy | None:
    """The context policy that plans ``workload``'s rounds (a name, a policy, or None:
    ``trace-reported``), or None where rounds keep the trace's prefixes (independent
    requests, hash ids). A planned file takes only ``trace-reported``, its identity;
    another policy is a ``ConfigError`` (docs/arrival.md)."""
    if not workload.has_sessions or workload.has_hash_ids:
        return None
    if policy is None or isinstance(policy, str):
        policy = POLICIES.get(policy or DEFAULT_POLICY)
    if workload.meta.get("needs_context_policy") is False and policy.name != DEFAULT_POLICY:
        raise ConfigError(planned_file_message(policy.name, workload))
    return policy


def planned_file_message(policy: str, workload: Workload) -> str:
    """Why a context policy cannot apply to an already planned trace (``session-execution-v2``):
    its prefixes are the plan, and re-planning them changes the workload (docs/arrival.md)."""
    sidecar = workload.meta.get("manifest")  # the planned trace's own (tracegen), not a run's
    params = sidecar.get("parameters") if isinstance(sidecar, dict) else None
    made = params.get("context_policy") if isinstance(params, dict) else None
    how = f" by policy {made!r}" if made else ""
    return (
        f"context.policy {policy!r} cannot apply to {workload.source or 'this trace'} "
        f"({workload.fmt}): its prefixes were already planned{how} and are replayed as "
        "written; unset context.policy (drop --policy), or run tracegen on the raw source "
        f"with --policy {policy} to plan it another way"
    )
