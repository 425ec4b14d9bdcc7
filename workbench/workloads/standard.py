"""Standard workloads in one argument: ``--trace synthetic:KIND,key=value,...``.

``generate(text)`` turns the description into a ``Workload`` (no file, no ``tracegen``
step); ``load_source`` calls it for a path that starts with ``synthetic:`` and
``load_trace`` for the others, so every command and ``RunConfig`` takes it. The kinds
(``random``, ``shared-prefix``, ``agentic``), their keys and the arrival keys every
kind shares: docs/trace-formats.md, "Synthetic workloads".
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.arrival.processes import ArrivalProcess
from workbench.errors import ConfigError
from workbench.plurals import noun
from workbench.records import Round, Unit, Workload
from workbench.registry import Registry
from workbench.traces.bounds import check_workload
from workbench.traces.graph import window as graph_window
from workbench.traces.load import load_trace
from workbench.workloads.synthetic import (
    MAX_ROUNDS_PER_SESSION,
    SYNTHETIC_PREFIX,
    Distribution,
    SessionStream,
    SyntheticSpec,
    parse_distribution,
    split_pairs,
    synthetic_value,
    synthetic_workload,
)

MAX_REQUESTS = 1_000_000
#: an ``agentic`` workload of this many rounds or more stays a stream (``SessionStream``:
#: sessions drawn when the run admits them, docs/virtual-time.md "Streamed runs"); a
#: smaller one is held (the same units either way)
STREAM_MIN_ROUNDS = 100_000
DOC = "docs/trace-formats.md, 'Synthetic workloads'"

#: the ``agentic`` presets; ``coding-agent`` is fitted to the bundled captured Claude Code
#: conversations (``weka/cc_traces_sample.jsonl``: 28 sessions, 12 sub-agents) by
#: ``workbench.workloads.agent_fit.fit``: each length a lognormal through the data's p50
#: and p90, censored at its maximum; sub-agents with their own lengths; fan-out as seen.
#: bench/fit_coding_agent.py recomputes it; table: docs/trace-formats.md.
PRESETS: dict[str, dict[str, str]] = {
    "coding-agent": {
        "rounds": "lognormal:18,0.403,57",
        "first_input": "lognormal:16854,0.286,125560",
        "input": "lognormal:352,2.02,57816",
        "output": "lognormal:260,1.16,6531",
        "tool_wait": "lognormal:11000,1.81,48547000",
        "compaction": "0",
        "subagents": "0.00917",
        "fanout": "uniform:1..3",
        "subagent_rounds": "lognormal:12,0.427,24",
        "subagent_first_input": "lognormal:11677,0.103,13368",
        "subagent_input": "lognormal:2366,1.06,50491",
        "subagent_output": "lognormal:238,0.435,6043",
        "subagent_tool_wait": "lognormal:4000,1.4,65000",
    },
}

_ARRIVAL_KEYS = ("seed", "arrival", "rate", "burstiness")


# the defaults (a frozen, shared value each)
_FIXED_1024 = Distribution("fixed", 1024)
_FIXED_128 = Distribution("fixed", 128)
_FIXED_2048 = Distribution("fixed", 2048)
_FIXED_256 = Distribution("fixed", 256)


@dataclass(frozen=True)
class Timeline:
    """The keys every kind shares: the seed and the units' arrival process."""

    seed: int = 0
    arrival: str = "poisson"
    rate: float = 1.0
    burstiness: float = 1.0

    def process(self) -> ArrivalProcess:
        return ArrivalProcess(self.arrival, self.rate, self.burstiness).check("synthetic")


@dataclass(frozen=True)
class RandomSpec:
    requests: int = 1000
    input: Distribution = _FIXED_1024
    output: Distribution = _FIXED_128


@dataclass(frozen=True)
class SharedPrefixSpec:
    groups: int = 16
    prompts: int = 16
    system: Distribution = _FIXED_2048
    question: Distribution = _FIXED_128
    output: Distribution = _FIXED_256
    block: int = 16


def load_source(path: str | Path, fmt: str = "auto", *,
                window: tuple[int, int | None] | None = None, **options: Any) -> Workload:
    """A ``synthetic:`` description drawn (``generate``, checked against the trace bounds),
    anything else read by ``load_trace``; ``window=(offset, count)``: those units only
    (``traces.graph.window``; a reader that can reads them without holding the file)."""
    if not (isinstance(path, str) and path.startswith(SYNTHETIC_PREFIX)):
        return load_trace(bundled_or_path(path), fmt, window=window, **options)
    workload = generate(str(path))
    check_workload(str(path), workload)
    return workload if window is None else graph_window(workload, *window)


def bundled_or_path(path: str | Path) -> str | Path:
    """``path`` as given, unless it names no file but a bundled trace
    (``mooncake/conversation_trace_head600.jsonl``, ``workbench.data``): then that
    trace's file. So every command takes the names the notebooks and ``plan`` list."""
    from workbench import data

    if Path(path).exists() or str(path) not in data.files():
        return path
    return str(data.path(str(path)))


def generate(text: str) -> Workload:
    """The workload ``text`` describes (``synthetic:KIND,k=v,...``); ``ConfigError`` names the
    key and the rule. A description without a kind is ``agentic`` (tracegen's keys)."""
    body = text.removeprefix(SYNTHETIC_PREFIX)
    head, _, rest = body.partition(",")
    kind = head.strip() if "=" not in head else "agentic"
    if "=" in head:
        rest = body
    if kind not in KINDS:
        raise ConfigError(f"synthetic source: unknown kind {kind!r}; valid: "
                          f"{', '.join(KINDS.names())} ({DOC})")
    pairs = split_pairs(rest)
    timeline = _timeline({k: v for k, v in pairs.items() if k in _ARRIVAL_KEYS})
    own = {k: v for k, v in pairs.items() if k not in _ARRIVAL_KEYS}
    seeds = np.random.SeedSequence(timeline.seed).spawn(2)
    rng = np.random.default_rng(seeds[0])
    spec, units = KINDS.get(kind)(own, rng, kind)
    process = timeline.process()
    arrival_seed = int(seeds[1].generate_state(1)[0])
    held: Sequence[Unit]
    if isinstance(spec, SyntheticSpec) and spec.subagents > 0:  # a graph: held, never streamed
        held = _with_subagents(spec, rng, process.offsets_ms(spec.sessions, arrival_seed))
    elif isinstance(spec, SyntheticSpec):  # sessions drawn as a stream; held when small
        stream = SessionStream(spec, rng, process.offsets_ms(spec.sessions, arrival_seed))
        held = stream if stream.n_rounds >= STREAM_MIN_ROUNDS else tuple(stream)
    else:
        offsets = process.offsets_ms(len(units), arrival_seed)
        held = tuple(dataclasses.replace(u, arrival_ms=a,
                                         rounds=tuple(dataclasses.replace(r, arrival_ms=a)
                                                      for r in u.rounds))
                     for u, a in zip(units, offsets, strict=True))
    described = spec.describe() if isinstance(spec, SyntheticSpec) else {
        f.name: _text(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    generator = {"kind": kind, "description": text, "parameters": described,
                 "seed": timeline.seed, "arrival": process.describe(),
                 "rng": "numpy default_rng(SeedSequence(seed).spawn(2)): lengths, arrivals"}
    block = spec.block if isinstance(spec, SharedPrefixSpec) else None
    # drawn rounds are already what is sent: no context policy plans them again
    meta = {"needs_context_policy": False, "generator": generator}
    return Workload(held, "synthetic", source=text, block_size=block, meta=meta)


def _with_subagents(spec: SyntheticSpec, rng: np.random.Generator,
                    arrivals_ms: Sequence[float]) -> tuple[Unit, ...]:
    """Sessions and their sub-agents, held: a workload of ``STREAM_MIN_ROUNDS`` rounds or
    more (sessions counted first, on a copy of the generator; then with the children)
    would be streamed, which sub-agents are not (``SessionStream``): refused."""
    counts = spec.rounds.draw(copy.deepcopy(rng), spec.sessions, integer=True, low=1)
    if int(np.minimum(counts, MAX_ROUNDS_PER_SESSION).sum()) < STREAM_MIN_ROUNDS:
        units = synthetic_workload(spec, rng, arrivals_ms).units
        if sum(len(u.rounds) for u in units) < STREAM_MIN_ROUNDS:
            return tuple(units)
    raise ConfigError(f"synthetic agentic: sub-agents (subagents={spec.subagents:g}) are held "
                      f"in memory, never streamed: the sessions and their sub-agents must draw "
                      f"fewer than {STREAM_MIN_ROUNDS:,} rounds; ask for fewer sessions, or "
                      f"subagents=0 for a streamed run ({DOC})")


def _text(value: Any) -> Any:
    return str(value) if isinstance(value, Distribution) else value


def _timeline(pairs: dict[str, str]) -> Timeline:
    fields: dict[str, Any] = {}
    for key, value in pairs.items():
        try:
            fields[key] = {"seed": int, "arrival": str}.get(key, float)(value)
            if key == "seed" and fields[key] < 0:
                raise ValueError
        except ValueError:
            want = "an integer >= 0" if key == "seed" else "a number"
            raise ConfigError(f"synthetic source: bad {key}={value!r} (want {want})") from None
    return Timeline(**fields)


def _fields(cls: type, pairs: dict[str, str], kind: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        if key not in names:
            valid = sorted([*names, *_ARRIVAL_KEYS])
            raise ConfigError(f"synthetic {kind}: unknown key {key!r}; valid: {valid} ({DOC})")
        if isinstance(names[key].default, Distribution):
            out[key] = parse_distribution(key, value)
            continue
        top = MAX_REQUESTS if key != "block" else 4096
        try:
            n = int(value)
            if not 1 <= n <= top:
                raise ValueError
        except ValueError:
            raise ConfigError(f"synthetic {kind}: bad {key}={value!r} "
                              f"(want an integer in 1..{top:,})") from None
        out[key] = n
    spec = cls(**out)
    if isinstance(spec, SharedPrefixSpec) and spec.groups * spec.prompts > MAX_REQUESTS:
        raise ConfigError(f"synthetic shared-prefix: groups × prompts past {MAX_REQUESTS:,}")
    return spec


def _agentic_spec(pairs: dict[str, str]) -> SyntheticSpec:
    preset = pairs.pop("preset", None)
    base: dict[str, str] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"synthetic agentic: unknown preset {preset!r}; valid: "
                              f"{', '.join(PRESETS)} ({DOC})")
        base = dict(PRESETS[preset])
    merged = {**base, **pairs}
    names = {f.name for f in dataclasses.fields(SyntheticSpec)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise ConfigError(f"synthetic agentic: unknown {noun(len(unknown), 'key')} {unknown}; "
                          "valid: "
                          f"{sorted([*names, 'preset', *_ARRIVAL_KEYS])} ({DOC})")
    return SyntheticSpec(**{k: synthetic_value(k, v) for k, v in merged.items()})


def _random(spec: RandomSpec, rng: np.random.Generator) -> list[Unit]:
    n = spec.requests
    inputs = spec.input.draw(rng, n, integer=True, low=1).tolist()
    outputs = spec.output.draw(rng, n, integer=True, low=1).tolist()
    return [_request(f"random_{i:07d}", 0, inp, out, None)
            for i, (inp, out) in enumerate(zip(inputs, outputs, strict=True))]


def _shared_prefix(spec: SharedPrefixSpec, rng: np.random.Generator) -> list[Unit]:
    """Requests in a seeded random order; a group's system prompt is whole blocks (rounded
    up) of ids only that group uses, each question blocks of its own: the first request of
    a group reports prefix 0, the later ones the system prompt's length."""
    g, m, bs = spec.groups, spec.prompts, spec.block
    blocks = -(-spec.system.draw(rng, g, integer=True, low=1) // bs)
    questions = spec.question.draw(rng, g * m, integer=True, low=1).tolist()
    outputs = spec.output.draw(rng, g * m, integer=True, low=1).tolist()
    order = rng.permutation(g * m).tolist()
    starts = np.concatenate(([0], np.cumsum(blocks)))
    next_id = int(starts[-1])
    seen: set[int] = set()
    units = []
    for k in order:
        group = k // m
        system = list(range(int(starts[group]), int(starts[group + 1])))
        q = questions[k]
        own = list(range(next_id, next_id + -(-q // bs)))
        next_id += len(own)
        sys_len = len(system) * bs
        prefix = sys_len if group in seen else 0
        seen.add(group)
        units.append(_request(f"group{group:04d}_q{k % m:05d}", prefix, sys_len - prefix + q,
                              outputs[k], (*system, *own)))
    return units


def _request(rid: str, prefix: int, inp: int, out: int,
             hash_ids: tuple[int, ...] | None) -> Unit:
    return Unit(rid, "independent", 0.0,
                (Round(rid, rid, 0, 0.0, prefix, inp, out, 0.0, hash_ids),))


#: a synthetic kind: ``(own keys, rng, its name) -> (spec, units)``; ``agentic`` draws its
#: sessions later, as a stream (``SessionStream``). A new kind is one function and one line.
Kind = Callable[[dict[str, str], np.random.Generator, str], tuple[Any, list[Unit]]]


def _drawn(cls: type, draw: Callable[[Any, np.random.Generator], list[Unit]]) -> Kind:
    """A kind whose parameters are ``cls``'s fields and whose units ``draw`` makes."""
    def kind(own: dict[str, str], rng: np.random.Generator, name: str) -> tuple[Any, list[Unit]]:
        spec = _fields(cls, own, name)
        return spec, draw(spec, rng)
    return kind


KINDS: Registry[Kind] = Registry("synthetic kind")
KINDS.add("random", _drawn(RandomSpec, _random))
KINDS.add("shared-prefix", _drawn(SharedPrefixSpec, _shared_prefix))
KINDS.add("agentic", lambda own, _rng, _name: (_agentic_spec(own), []))
