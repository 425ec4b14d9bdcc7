"""The replay plan (pure): what every unit will send, before anything is sent.

Applies axis 2 (context policy) and the output-length policy to each unit's
rounds and axis 3's schedule to its release time. ``dry_run`` prints this; the
runner and ``simulate`` execute it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.arrival.schedule import arrival_span, release_offsets_ms
from workbench.config import RunConfig, parse_output_policy
from workbench.context.policy import DEFAULT_POLICY, make_policy, plan_rounds
from workbench.records import Round, Unit, Workload
from workbench.workloads.trace_stats import ideal_prefix_hit_rate


@dataclass(frozen=True, slots=True)
class RoundPlan:
    round: Round
    prefix_len: int
    input_len: int
    output_len: int
    folded_prefix_tokens: int = 0
    major_compaction: bool = False

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + self.input_len


@dataclass(frozen=True, slots=True)
class UnitPlan:
    ordinal: int
    unit: Unit
    offset_ms: float
    rounds: tuple[RoundPlan, ...]


@dataclass(frozen=True)
class Plan:
    units: tuple[UnitPlan, ...]
    policy: str | None
    block_size: int | None = None  # token size of one hash id block (Mooncake/Dynamo traces)
    # the prefix hit rate of an infinite cache over this plan's workload, under the policy
    # as configured (its options too): the manifest's ``ideal_prefix_hit_rate``
    ideal_prefix_hit_rate: float = 0.0

    @property
    def n_rounds(self) -> int:
        return sum(len(u.rounds) for u in self.units)

    def completion(self, recorded: int, skipped: int, *, looped: bool) -> dict[str, Any]:
        """How much of the plan ran: ``status`` ``completed`` only when every planned round
        has a record and none was skipped, else ``partial`` (a context-guard skip, a
        session ended by an error, a unit that never ran). ``looped`` (closed-loop with
        a duration) replays rounds more or fewer times than planned: only skips count.
        """
        missing = 0 if looped else max(self.n_rounds - recorded, 0)
        status = "partial" if skipped or missing else "completed"
        return {"status": status, "planned_rounds": self.n_rounds, "recorded_rounds": recorded,
                "skipped_rounds": skipped, "not_sent_rounds": missing}

    def totals(self) -> dict[str, Any]:
        rounds = [r for u in self.units for r in u.rounds]
        prefix = sum(r.prefix_len for r in rounds)
        prompt = sum(r.prompt_len for r in rounds)
        return {
            "units": len(self.units),
            "rounds": len(rounds),
            "total_prompt_tokens": prompt,
            "total_prefix_tokens": prefix,
            "total_output_tokens": sum(r.output_len for r in rounds),
            "folded_prefix_tokens": sum(r.folded_prefix_tokens for r in rounds),
            "planned_prefix_hit_rate": prefix / prompt if prompt else 0.0,
            **self.arrival(),
        }

    def arrival(self) -> dict[str, Any]:
        """The span of release times (after mode and rate), warned about past a day."""
        return arrival_span([u.offset_ms for u in self.units])


def effective_policy(cfg: RunConfig, workload: Workload) -> str | None:
    """The policy that applies: the configured one, else trace-reported for conversations."""
    if cfg.policy_name is not None:
        return cfg.policy_name
    if workload.has_sessions and not workload.has_hash_ids:
        return DEFAULT_POLICY
    return None


def build_plan(cfg: RunConfig, workload: Workload) -> Plan:
    policy_name = effective_policy(cfg, workload)
    policy = make_policy(policy_name or DEFAULT_POLICY, cfg.context.options)
    kind, amount = parse_output_policy(cfg.arrival.output_len)
    offsets = release_offsets_ms(workload.units, cfg.arrival.mode, cfg.arrival.rate,
                                 cfg.arrival_process(), cfg.seed)
    units = []
    for ordinal, (unit, offset) in enumerate(zip(workload.units, offsets, strict=True)):
        rounds = unit.rounds
        outputs = _output_lengths(rounds, kind, amount)
        if policy_name is None:
            plans = tuple(
                RoundPlan(r, r.prefix_len, r.input_len, o)
                for r, o in zip(rounds, outputs, strict=True)
            )
        else:
            planned = plan_rounds(rounds, policy, outputs)
            plans = tuple(
                RoundPlan(r, p.prefix_len, p.input_len, o, p.folded_prefix_tokens,
                          p.major_compaction)
                for r, p, o in zip(rounds, planned, outputs, strict=True)
            )
        units.append(UnitPlan(ordinal, unit, offset, plans))
    ideal = ideal_prefix_hit_rate(workload, policy)
    return Plan(tuple(units), policy_name, workload.block_size, ideal)


def _output_lengths(rounds: tuple[Round, ...], kind: str, amount: int) -> list[int]:
    if kind == "fixed":
        return [amount] * len(rounds)
    if kind == "budget":
        per = max(amount // max(len(rounds), 1), 1)
        return [per] * len(rounds)
    return [max(r.output_len, 1) for r in rounds]
