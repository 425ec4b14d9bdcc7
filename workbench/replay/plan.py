"""The replay plan (pure): what every unit will send, before anything is sent.

Context policy, output-length policy and release offsets applied to each unit; a
session graph's roots carry their children (``ChildPlan``, docs/session-graphs.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from workbench.arrival.schedule import arrival_span, release_offsets_ms
from workbench.config import ArrivalSpec, RunConfig
from workbench.config.arrival import parse_output_policy
from workbench.context.policy import (
    DEFAULT_POLICY,
    ContextPolicy,
    effective_policy,
    make_policy,
    plan_rounds,
)
from workbench.durations import duration_text
from workbench.records import Prompted, Round, Spawn, Unit, UnitStream, Workload
from workbench.workloads.trace_stats import ideal_prefix_hit_rate


@dataclass(frozen=True, slots=True)
class RoundPlan(Prompted):
    round: Round
    prefix_len: int
    input_len: int
    output_len: int
    folded_prefix_tokens: int = 0
    major_compaction: bool = False


@dataclass(frozen=True, slots=True)
class UnitPlan:
    ordinal: int
    unit: Unit
    offset_ms: float
    rounds: tuple[RoundPlan, ...]
    children: tuple[ChildPlan, ...] = ()
    depth: int = 0  # 0: a root (an agent task); a child is its parent's depth + 1

    def tree(self) -> Iterator[UnitPlan]:
        """This unit and every descendant, depth first (children in file order)."""
        yield self
        for child in self.children:
            yield from child.plan.tree()


@dataclass(frozen=True, slots=True)
class ChildPlan:
    """A sub-agent of a unit: when it starts (``spawn``) and what it sends (``plan``)."""

    spawn: Spawn
    plan: UnitPlan


class PlanStream(Sequence[UnitPlan]):
    """A streamed workload's plan (docs/virtual-time.md, "Streamed runs"): unit ``i``'s plan
    built when asked for, only the last one kept; the release offsets are held."""

    def __init__(self, units: UnitStream, offsets: Sequence[float], planner: RoundPlanner) -> None:
        self.units = units
        self.offsets = offsets
        self.planner = planner
        self.n_rounds = units.n_rounds
        # (arrival, file order) is file order when the offsets never go down
        self.in_release_order = all(a <= b for a, b in itertools.pairwise(offsets))
        self._last: UnitPlan | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_last": None}  # (to a worker process: what it needs)

    def __len__(self) -> int:
        return len(self.units)

    @overload
    def __getitem__(self, i: int) -> UnitPlan: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[UnitPlan, ...]: ...

    def __getitem__(self, i: int | slice) -> UnitPlan | tuple[UnitPlan, ...]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            return tuple(self[k] for k in range(start, stop, step))
        i = i + len(self) if i < 0 else i
        last = self._last
        if last is None or last.ordinal != i:
            unit = self.units[i]
            last = self._last = UnitPlan(i, unit, self.offsets[i], self.planner(unit))
        return last

    def __iter__(self) -> Iterator[UnitPlan]:
        for k, (unit, offset) in enumerate(zip(self.units, self.offsets, strict=True)):
            yield UnitPlan(k, unit, offset, self.planner(unit))


@dataclass(frozen=True)
class Plan:
    units: Sequence[UnitPlan]  # a tuple, or a PlanStream (a streamed workload's)
    policy: str | None
    block_size: int | None = None  # token size of one hash id block (Mooncake/Dynamo traces)
    # an infinite cache's prefix hit rate over the workload under the configured policy
    ideal_prefix_hit_rate: float = 0.0

    def all_units(self) -> Iterator[UnitPlan]:
        """Every unit: each root, then its descendants (depth first)."""
        for u in self.units:
            yield from u.tree()

    @property
    def n_rounds(self) -> int:
        if isinstance(self.units, PlanStream):
            return self.units.n_rounds
        return sum(len(u.rounds) for u in self.all_units())

    def completion(self, recorded: int, skipped: int, *, looped: bool) -> dict[str, Any]:
        """``completed`` when every planned round has a record and none was skipped, else
        ``partial``; ``looped`` (closed loop with a duration): only skips count."""
        missing = 0 if looped else max(self.n_rounds - recorded, 0)
        status = "partial" if skipped or missing else "completed"
        return {"status": status, "planned_rounds": self.n_rounds, "recorded_rounds": recorded,
                "skipped_rounds": skipped, "not_sent_rounds": missing}

    def totals(self) -> dict[str, Any]:
        """The plan's sizes, summed in one pass (a streamed plan's units are built for
        it one at a time and dropped)."""
        units = rounds = prefix = prompt = output = folded = 0
        for u in self.all_units():
            units += 1
            for r in u.rounds:
                rounds += 1
                prefix += r.prefix_len
                prompt += r.prompt_len
                output += r.output_len
                folded += r.folded_prefix_tokens
        return {
            "units": units,
            **({"agent_tasks": len(self.units)} if self.is_graph else {}),
            "rounds": rounds,
            "total_prompt_tokens": prompt,
            "total_prefix_tokens": prefix,
            "total_output_tokens": output,
            "folded_prefix_tokens": folded,
            "planned_prefix_hit_rate": prefix / prompt if prompt else 0.0,
            **self.arrival(),
        }

    def over_context(self, limit: int) -> dict[str, int]:
        """The planned rounds the context guard's rule would stop at ``limit`` (prompt +
        output ≥ ``limit``, docs/real-engines.md): how many, in how many units, and the
        longest prompt + output of the plan."""
        rounds = units = over = planned = longest = 0
        for u in self.all_units():
            units += 1
            hit = False
            for r in u.rounds:
                rounds += 1
                need = r.prompt_len + r.output_len
                longest = max(longest, need)
                if need >= limit:
                    over, hit = over + 1, True
            planned += hit
        return {"rounds": rounds, "units": units, "rounds_over": over, "units_over": planned,
                "longest": longest}

    @property
    def is_graph(self) -> bool:
        if isinstance(self.units, PlanStream):  # streamed workloads have no sub-agents
            return False
        return any(u.children for u in self.units)

    def arrival(self) -> dict[str, Any]:
        """The span of release times (after mode and rate), warned about past a day."""
        if isinstance(self.units, PlanStream):
            return arrival_span(self.units.offsets)
        return arrival_span([u.offset_ms for u in self.units])


@dataclass(frozen=True)
class RoundPlanner:
    """A unit's rounds as planned: output-length policy, then the context policy unless
    None (a class, not a closure: a streamed plan pickles to a worker process)."""

    policy: ContextPolicy | None
    kind: str
    amount: int

    def __call__(self, unit: Unit) -> tuple[RoundPlan, ...]:
        rounds = unit.rounds
        outputs = _output_lengths(rounds, self.kind, self.amount)
        if self.policy is None:
            return tuple(
                RoundPlan(r, r.prefix_len, r.input_len, o)
                for r, o in zip(rounds, outputs, strict=True)
            )
        planned = plan_rounds(rounds, self.policy, outputs)
        return tuple(
            RoundPlan(r, p.prefix_len, p.input_len, o, p.folded_prefix_tokens,
                      p.major_compaction)
            for r, p, o in zip(rounds, planned, outputs, strict=True)
        )


def build_plan(cfg: RunConfig, workload: Workload) -> Plan:
    """Every unit's rounds as planned and its release offset; a session graph's roots are
    released, carrying their descendants."""
    a, c = cfg.arrival, cfg.context
    output = parse_output_policy(a.output_len)
    # the configured policy (checked to apply: ContextSpec.check_applies), else the default
    policy = effective_policy(workload, make_policy(c.policy_name or DEFAULT_POLICY, c.options))
    round_plans = RoundPlanner(policy, *output)
    units = workload.units
    graph, released, offsets = _released(cfg, workload)
    planned: PlanStream | tuple[UnitPlan, ...]
    if isinstance(units, UnitStream):  # built unit by unit as the run asks
        planned = PlanStream(units, offsets, round_plans)
    elif graph:
        planned = _graph_units(workload, round_plans, released, offsets)
    else:
        planned = tuple(UnitPlan(ordinal, unit, offset, round_plans(unit))
                        for ordinal, (unit, offset) in enumerate(zip(units, offsets,
                                                                     strict=True)))
    ideal = ideal_prefix_hit_rate(workload, policy)
    return Plan(planned, None if policy is None else policy.name, workload.block_size, ideal)


def _released(cfg: RunConfig, workload: Workload) -> tuple[bool, Sequence[Unit], list[float]]:
    """(whether the units are a session graph, the units released, their release offsets
    after mode and rate): a graph's roots are released, each carrying its descendants."""
    a, units = cfg.arrival, workload.units
    graph = not isinstance(units, UnitStream) and any(u.spawn is not None for u in units)
    released = tuple(u for u in units if u.spawn is None) if graph else units
    return graph, released, release_offsets_ms(released, a.mode, a.rate,
                                               a.arrival_process(), cfg.seed)


def release_span_ms(cfg: RunConfig, workload: Workload) -> float:
    """The span of ``cfg``'s release offsets (``Plan.arrival``'s), without planning a
    round: what a sweep checks of each point before the first runs."""
    return float(arrival_span(_released(cfg, workload)[2])["arrival_span_ms"])


def _graph_units(workload: Workload, round_plans: RoundPlanner, roots: Sequence[Unit],
                 offsets: Sequence[float]) -> tuple[UnitPlan, ...]:
    """The released ``roots``, each carrying its descendants (ordinals: file order)."""
    ordinal = {id(u): k for k, u in enumerate(workload.units)}
    kids: dict[str, list[Unit]] = {}
    for u in workload.units:
        if u.spawn is not None:
            kids.setdefault(u.spawn.parent_id, []).append(u)

    def plan_of(unit: Unit, offset: float, depth: int) -> UnitPlan:
        children = tuple(
            ChildPlan(c.spawn, plan_of(c, 0.0, depth + 1))
            for c in kids.get(unit.unit_id, ()) if c.spawn is not None
        )
        return UnitPlan(ordinal[id(unit)], unit, offset, round_plans(unit), children, depth)

    return tuple(plan_of(u, off, 0) for u, off in zip(roots, offsets, strict=True))


def _output_lengths(rounds: tuple[Round, ...], kind: str, amount: int) -> list[int]:
    if kind == "fixed":
        return [amount] * len(rounds)
    if kind == "budget":
        per = max(amount // max(len(rounds), 1), 1)
        return [per] * len(rounds)
    return [max(r.output_len, 1) for r in rounds]


# -- how long a run takes at the least (docs/arrival.md, "How long a run takes") ------------
LONG_RUN_MS = 180_000.0
"""A plan whose waits alone take longer than this is announced before it starts."""
SHORTEN = ("--tool-wait-scale, --max-items, or a cap on waits where the reader has one "
           "(weka: --trace-option max_delay_s=S)")
"""What shortens a run, in the flags of the commands that replay (replay, simulate,
sweep); ``workbench plan`` says its own (``workbench.plan.SHORTEN``)."""


@dataclass(frozen=True)
class RunFloor:
    """The least a run can take with a server answering in no time (docs/arrival.md):
    ``longest_ms`` the longest agent task's span, ``span_ms`` the last release offset."""

    floor_ms: float
    span_ms: float
    longest_ms: float
    longest_unit: str
    why: str

    def sentence(self, virtual: bool = False, shorten: str = SHORTEN) -> str:
        """``this run takes at least 51 min: ...``, for runs past ``LONG_RUN_MS``;
        ``shorten``: in the flags of the command that says it."""
        what = "of simulated time" if virtual else ""
        return (f"this run takes at least {duration_text(self.floor_ms)} {what}".rstrip()
                + f" before any server time: {self.why}; to shorten it: {shorten}")


def run_floor(plan: Plan, arrival: ArrivalSpec) -> RunFloor | None:
    """The least time the plan takes under ``arrival``'s tool-wait scale, concurrency cap
    and duration; None for a streamed or empty plan."""
    if isinstance(plan.units, PlanStream) or not plan.units:
        return None
    tool_wait_scale, max_concurrency = arrival.tool_wait_scale, arrival.max_concurrency
    duration_s = arrival.duration_s
    spans = [(_task_span(u, tool_wait_scale), u) for u in plan.units]
    longest, unit = max(spans, key=lambda su: su[0])
    span_ms = max(u.offset_ms for u in plan.units)
    ends = max(u.offset_ms + s for s, u in spans)
    floor = ends
    why = (f"the units' releases span {duration_text(span_ms)}" if span_ms >= longest else
           f"its longest agent task ({unit.unit.unit_id}) waits {duration_text(longest)} on "
           + ("tools" if not unit.children else "tools and sub-agents"))
    if max_concurrency:
        packed = sum(s for s, _ in spans) / max_concurrency
        if packed > floor:
            floor = packed
            why = (f"{len(spans)} agent tasks of {duration_text(sum(s for s, _ in spans))} "
                   f"of tool waits in all share {max_concurrency} "
                   f"slot{'s' if max_concurrency > 1 else ''}")
    if duration_s is not None and duration_s * 1000 > floor:
        floor = duration_s * 1000
        why = f"it loops its units for its duration of {duration_text(floor)}"
    return RunFloor(floor, span_ms, longest, unit.unit.unit_id, why)


def _task_span(u: UnitPlan, scale: float) -> float:
    """How long ``u`` and its descendants take when every request is answered at once:
    each round starts after the previous one's tool wait and after the children its
    ``join_round`` waits for; a child starts ``delay × scale`` after its spawn round."""
    joins: dict[int, float] = {}
    kids: dict[int, list[ChildPlan]] = {}
    for c in u.children:
        kids.setdefault(c.spawn.round_idx, []).append(c)
    t = end = 0.0
    for k, rp in enumerate(u.rounds):
        t = max(t, joins.get(k, 0.0))
        for c in kids.get(k, ()):
            done = t + c.spawn.delay_ms * scale + _task_span(c.plan, scale)
            end = max(end, done)
            if c.spawn.join_round is not None:
                joins[c.spawn.join_round] = max(joins.get(c.spawn.join_round, 0.0), done)
        end = max(end, t)
        if k + 1 < len(u.rounds):
            t += rp.round.tool_wait_after_ms * scale
    return end
