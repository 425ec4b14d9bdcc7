"""``synthetic:KEY=VALUE,...`` sessions drawn from distributions (``SYNTHETIC_HELP``).

``parse_synthetic`` reads a description; ``synthetic_workload`` draws the sessions,
vectorized, then their sub-agents (each right after its parent); ``SessionStream``
draws sessions without sub-agents on demand (docs/virtual-time.md, "Streamed runs").
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.errors import ConfigError
from workbench.records import Round, Spawn, Unit, UnitStream, Workload
from workbench.traces import bounds, canonical

SYNTHETIC_PREFIX = "synthetic:"
SYNTHETIC_HELP = """\
synthetic:KEY=VALUE,... describes sessions to draw instead of reading a file.
Keys (all optional):
  sessions=N        number of sessions (default 100)
  rounds=DIST       rounds per session, >= 1 (default uniform:2..20)
  input=DIST        fresh tokens appended each round, >= 1 (default lognormal:2000,1.0)
  first_input=DIST  fresh tokens of round 0 (default: same as input)
  output=DIST       output tokens per round, >= 1 (default fixed:200)
  tool_wait=DIST    ms of tool time after each round but the last, >= 0
                    (default uniform:100..5000)
  compaction=P      probability that a round (from round 1) starts a fresh,
                    compacted conversation: its prefix is 0 (default 0)
  subagents=P       probability that a round but the last spawns sub-agents: child
                    sessions that start when the round ends, the next round waits
                    for them (docs/session-graphs.md; default 0: none)
  fanout=DIST       sub-agents a spawning round starts at once, >= 1 (default fixed:1)
  subagent_rounds=DIST, subagent_first_input=DIST, subagent_input=DIST,
  subagent_output=DIST, subagent_tool_wait=DIST
                    a sub-agent's rounds, first prompt, growth, output, tool waits
                    (default: the session's key); a sub-agent spawns none itself
DIST is fixed:N | uniform:LO..HI (integers inclusive for token counts) |
lognormal:MEDIAN,SIGMA[,MAX] (draws above MAX are MAX) | normal:MEAN,SD |
exponential:MEAN (rounded for token counts). A round reuses its whole conversation
so far: prefix = previous prefix + input + output. Sub-agents are held, not
streamed: a workload with subagents > 0 is drawn whole.
Bounds (docs/trace-bounds.md): sessions <= 1,000,000, rounds <= 100,000 a
session (drawn counts are clipped there) and 10,000,000 in all, token counts
<= 10,000,000 (prompt + output of a round too), tool_wait <= 7 days, fanout
<= 1,000 (sub-agents' rounds count in the 10,000,000).
Example: synthetic:sessions=100,rounds=uniform:2..20,input=lognormal:2000,1.0,
output=fixed:200,tool_wait=uniform:100..5000,compaction=0.02
Synthetic traces default to --arrival poisson at --rate."""


@dataclass(frozen=True)
class Distribution:
    """``fixed:N``, ``uniform:LO..HI``, ``lognormal:MEDIAN,SIGMA[,MAX]``, ``normal:MEAN,SD``
    or ``exponential:MEAN``."""

    kind: str
    a: float
    b: float = 0.0
    #: ``lognormal:MEDIAN,SIGMA,MAX``: draws above ``MAX`` are ``MAX`` (censored; inf: none)
    cap: float = math.inf

    def __str__(self) -> str:
        if self.kind in ("fixed", "exponential"):
            return f"{self.kind}:{_num(self.a)}"
        sep = ".." if self.kind == "uniform" else ","
        cap = f",{_num(self.cap)}" if math.isfinite(self.cap) else ""
        return f"{self.kind}:{_num(self.a)}{sep}{_num(self.b)}{cap}"

    def draw(self, rng: np.random.Generator, n: int, *, integer: bool, low: int) -> np.ndarray:
        """``n`` values, clipped to ``low``; token counts are integers."""
        if self.kind == "fixed":
            values = np.full(n, self.a, dtype=float)
        elif self.kind == "uniform" and integer:
            values = rng.integers(int(self.a), int(self.b), size=n, endpoint=True).astype(float)
        elif self.kind == "uniform":
            values = rng.uniform(self.a, self.b, size=n)
        elif self.kind == "normal":
            values = rng.normal(self.a, self.b, size=n)
        elif self.kind == "exponential":
            values = rng.exponential(self.a, size=n)
        else:
            values = rng.lognormal(math.log(self.a), self.b, size=n)
            if math.isfinite(self.cap):
                values = np.minimum(values, self.cap)
        values = np.maximum(values, low)
        if not integer:
            return values
        # past the bound the workload check refuses it; clipping first keeps int64 exact
        return np.rint(np.minimum(values, bounds.MAX_ROUND_TOKENS + 1)).astype(np.int64)


def _num(x: float) -> str:
    """``x`` as ``:g`` writes it, but a whole number past 6 digits in full (not 4.8e+07)."""
    text = f"{x:g}"
    return str(int(x)) if "e" in text and float(x).is_integer() else text


_ARITY = {"fixed": (1,), "uniform": (2,), "lognormal": (2, 3), "normal": (2,), "exponential": (1,)}


def parse_distribution(key: str, text: str) -> Distribution:
    """Parse one ``DIST`` (a bare number means ``fixed``); ``ConfigError`` names the key."""
    kind, _, arg = text.partition(":") if ":" in text else ("fixed", "", text)
    try:
        numbers = [float(x) for x in arg.split(".." if kind == "uniform" else ",")]
        if len(numbers) not in _ARITY.get(kind, ()):
            raise ValueError(kind)
        dist = Distribution(kind, *numbers)
    except ValueError:
        raise ConfigError(
            f"synthetic {key}={text!r}: expected fixed:N, uniform:LO..HI, "
            "lognormal:MEDIAN,SIGMA[,MAX], normal:MEAN,SD or exponential:MEAN"
        ) from None
    bad = not (math.isfinite(dist.a) and math.isfinite(dist.b) and dist.a >= 0 and dist.b >= 0)
    if bad or (kind == "uniform" and dist.b < dist.a) or (
            kind in ("lognormal", "exponential") and dist.a <= 0) or not dist.cap >= dist.a:
        raise ConfigError(f"synthetic {key}={text!r}: parameters out of range")
    cap = _CAPS.get(key, bounds.MAX_ROUND_TOKENS)
    top = dist.b if kind == "uniform" else dist.a + 8 * dist.b if kind == "normal" else dist.a
    if top > cap or (math.isfinite(dist.cap) and dist.cap > cap) or (
            kind == "lognormal" and dist.b > 4):
        raise ConfigError(f"synthetic {key}={text!r}: past the bound of {cap:,.0f} "
                          f"({bounds.DOC}; a lognormal sigma is at most 4)")
    return dist


MAX_SESSIONS = 1_000_000
MAX_ROUNDS_PER_SESSION = 100_000
MAX_ROUNDS = 10_000_000
MAX_FANOUT = 1000  # sub-agents one round starts at once (drawn counts are clipped there)
_CAPS = {"rounds": MAX_ROUNDS_PER_SESSION, "tool_wait": bounds.MAX_WAIT_MS,
         "subagent_rounds": MAX_ROUNDS_PER_SESSION, "subagent_tool_wait": bounds.MAX_WAIT_MS,
         "fanout": MAX_FANOUT}


@dataclass(frozen=True)
class SyntheticSpec:
    """A parsed ``synthetic:`` description; see ``SYNTHETIC_HELP``."""

    sessions: int = 100
    rounds: Distribution = Distribution("uniform", 2, 20)
    input: Distribution = Distribution("lognormal", 2000, 1.0)
    first_input: Distribution | None = None
    output: Distribution = Distribution("fixed", 200)
    tool_wait: Distribution = Distribution("uniform", 100, 5000)
    compaction: float = 0.0
    subagents: float = 0.0
    fanout: Distribution = Distribution("fixed", 1)
    subagent_rounds: Distribution | None = None
    subagent_first_input: Distribution | None = None
    subagent_input: Distribution | None = None
    subagent_output: Distribution | None = None
    subagent_tool_wait: Distribution | None = None

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the distributions (request-factory's field names);
        the sub-agents' only when the spec spawns them."""
        out: dict[str, Any] = {
            "sessions": self.sessions, "rounds": str(self.rounds), "input_len": str(self.input),
            "first_input_len": str(self.first_input or self.input),
            "output_len": str(self.output), "tool_wait_ms": str(self.tool_wait),
            "compaction_probability": self.compaction,
        }
        if self.subagents > 0:
            child = self.child_spec(1)
            out["subagents"] = {
                "probability": self.subagents, "fanout": str(self.fanout),
                **{k: v for k, v in child.describe().items()
                   if k not in ("sessions", "compaction_probability")}}
        return out

    def child_spec(self, sessions: int) -> SyntheticSpec:
        """The sub-agents' sessions as a spec of their own (no sub-agents of theirs)."""
        return SyntheticSpec(
            sessions, self.subagent_rounds or self.rounds,
            self.subagent_input or self.input,
            self.subagent_first_input or self.first_input,
            self.subagent_output or self.output, self.subagent_tool_wait or self.tool_wait,
            self.compaction)


def split_pairs(text: str) -> dict[str, str]:
    """``k=v,k=v,...`` as a dict; a comma-piece without ``=`` continues the previous value
    (``lognormal:2000,1.0``)."""
    pieces: list[list[str]] = []
    for piece in text.split(","):
        if "=" in piece:
            pieces.append(piece.split("=", 1))
        elif pieces and piece:
            pieces[-1][1] += "," + piece
        elif piece:
            raise ConfigError(f"synthetic source: {piece!r} is not KEY=VALUE")
    return {k.strip(): v.strip() for k, v in pieces}


def parse_synthetic(text: str) -> SyntheticSpec:
    """Parse ``synthetic:k=v,...`` (tracegen's sessions)."""
    fields: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(SyntheticSpec)}
    for key, value in split_pairs(text.removeprefix(SYNTHETIC_PREFIX)).items():
        if key not in names:
            raise ConfigError(f"synthetic source: unknown key {key!r}; valid: {sorted(names)}")
        fields[key] = synthetic_value(key, value)
    return SyntheticSpec(**fields)


def synthetic_value(key: str, value: str) -> Any:
    try:
        if key == "sessions":
            n = int(value) if value.isascii() else 0
            if not 1 <= n <= MAX_SESSIONS:
                raise ValueError
            return n
        if key in ("compaction", "subagents"):
            p = float(value)
            if not 0.0 <= p <= 1.0:
                raise ValueError
            return p
    except ValueError:
        want = f"an integer in 1..{MAX_SESSIONS:,}" if key == "sessions" else "a number in 0..1"
        raise ConfigError(f"synthetic source: bad {key}={value!r} (want {want})") from None
    return parse_distribution(key, value)


def synthetic_workload(spec: SyntheticSpec, rng: np.random.Generator,
                       arrivals_ms: Sequence[float] | None = None) -> Workload:
    """Draw the sessions (vectorized; all arrive at 0 — ``tracegen`` draws arrivals — or
    at ``arrivals_ms``, one a session), then their sub-agents (``_draw_fanout``), each
    child right after its parent."""
    cols = _Columns.shared(spec, rng)
    block = _draw_block(spec, cols, spec.sessions, check_total=True)
    kids = _draw_fanout(spec, rng, block) if spec.subagents > 0 else None
    n_kids = 0 if kids is None else len(kids.parents)
    fresh = block.fresh_rounds + (0 if kids is None else kids.block.fresh_rounds)
    meta: dict[str, Any] = {"needs_context_policy": False,
                            "compaction_rounds": fresh - spec.sessions - n_kids}
    if spec.subagents > 0:
        meta["subagents"] = n_kids
    return Workload(tuple(block.units(0, arrivals_ms, kids)), "synthetic", source="synthetic",
                    meta=meta)


def synthetic_stream(
    spec: SyntheticSpec, rng: np.random.Generator, arrivals_ms: Sequence[float] | None = None
) -> Workload:
    """``synthetic_workload``'s units, round for round, drawn on demand (``SessionStream``);
    ``arrivals_ms``: one a session, as ``standard.generate`` sets them."""
    stream = SessionStream(spec, rng, arrivals_ms)
    meta = {"needs_context_policy": False,
            "compaction_rounds": stream.fresh_rounds - spec.sessions}
    return Workload(stream, "synthetic", source="synthetic", meta=meta)


STREAM_BLOCK = 1024  # sessions drawn at once by a stream
_SKIP_CHUNK = 1 << 16  # values drawn at once while a column's generator is moved on


@dataclass
class _Column:
    """One drawn column: its distribution (``None``: uniform [0, 1), the compaction flags)
    on its generator; drawn in pieces it gives what one draw gives (the streamed path)."""

    dist: Distribution | None
    rng: np.random.Generator
    integer: bool = True
    low: int = 1

    def take(self, n: int) -> np.ndarray:
        if self.dist is None:
            return self.rng.random(n)
        return self.dist.draw(self.rng, n, integer=self.integer, low=self.low)

    def skip(self, n: int) -> None:
        for k in range(0, n, _SKIP_CHUNK):
            self.take(min(_SKIP_CHUNK, n - k))

    def copy(self) -> _Column:
        return dataclasses.replace(self, rng=copy.deepcopy(self.rng))


@dataclass
class _Columns:
    """The six columns ``synthetic_workload`` draws, in its order: rounds per session,
    fresh input, first input (if set), output, tool wait, compaction flags."""

    rounds: _Column
    input: _Column
    first: _Column | None
    output: _Column
    wait: _Column
    fresh: _Column

    @classmethod
    def shared(cls, spec: SyntheticSpec, rng: np.random.Generator) -> _Columns:
        """Every column on one generator: drawn whole, one after the other."""
        return cls(_Column(spec.rounds, rng), _Column(spec.input, rng),
                   _Column(spec.first_input, rng) if spec.first_input is not None else None,
                   _Column(spec.output, rng), _Column(spec.tool_wait, rng, False, 0),
                   _Column(None, rng))

    @classmethod
    def positioned(cls, spec: SyntheticSpec, rng: np.random.Generator) -> tuple[_Columns, int]:
        """Each column on its own copy of ``rng``, where ``synthetic_workload``'s one
        generator starts that column (``rng`` ends where it ends), and the rounds in all."""
        one = cls.shared(spec, rng)
        out = one.copies()
        total = 0
        for k in range(0, spec.sessions, _SKIP_CHUNK):
            n = min(_SKIP_CHUNK, spec.sessions - k)
            total += int(np.minimum(one.rounds.take(n), MAX_ROUNDS_PER_SESSION).sum())
        _check_rounds(total)
        for name in ("input", "first", "output", "wait", "fresh"):
            mine, shared = getattr(out, name), getattr(one, name)
            if mine is not None:
                mine.rng = copy.deepcopy(rng)
                shared.skip(spec.sessions if name == "first" else total)
        return out, total

    def copies(self) -> _Columns:
        return _Columns(self.rounds.copy(), self.input.copy(),
                        self.first.copy() if self.first is not None else None,
                        self.output.copy(), self.wait.copy(), self.fresh.copy())


def _check_rounds(total: int) -> None:
    if total > MAX_ROUNDS:
        raise ConfigError(f"synthetic source draws {total:,} rounds, past the bound of "
                          f"{MAX_ROUNDS:,} ({bounds.DOC}); ask for fewer sessions or rounds")


@dataclass
class _Block:
    """Consecutive sessions as columns: where each starts, its rounds, and per round
    prefix, input, output, tool wait (ms)."""

    starts: np.ndarray
    counts: np.ndarray
    prefixes: np.ndarray
    inputs: np.ndarray
    outputs: np.ndarray
    waits: np.ndarray
    fresh_rounds: int

    def units(self, first: int, arrivals_ms: Sequence[float] | None = None,
              fanout: _Fanout | None = None) -> Iterator[Unit]:
        """The sessions as units, numbered from ``first``; each one's sub-agents
        (``fanout``) right after it: ``{id}::sa:{j}``, j from 1 in spawn order."""
        cols = self.columns()
        kids = fanout.block if fanout is not None else None
        kid_cols = kids.columns() if kids is not None else []
        parents = fanout.parents.tolist() if fanout is not None else []
        spawn_at = fanout.rounds.tolist() if fanout is not None else []
        kid_starts = kids.starts.tolist() if kids is not None else []
        kid_counts = kids.counts.tolist() if kids is not None else []
        pos = 0
        for i, (a, n) in enumerate(zip(self.starts.tolist(), self.counts.tolist(),
                                       strict=True)):
            sid = str(first + i)
            at = 0.0 if arrivals_ms is None else float(arrivals_ms[first + i])
            yield _unit(cols, sid, at, a, n)
            j = 0
            while pos < len(parents) and parents[pos] == i:
                j += 1
                k = spawn_at[pos]
                yield _unit(kid_cols, f"{sid}::sa:{j}", at, kid_starts[pos], kid_counts[pos],
                            Spawn(sid, k, "round_end", 0.0, k + 1))
                pos += 1

    def columns(self) -> list[list[Any]]:
        return [c.tolist() for c in (self.prefixes, self.inputs, self.outputs, self.waits)]


def _unit(cols: list[list[Any]], sid: str, at: float, a: int, n: int,
          spawn: Spawn | None = None) -> Unit:
    """Rows ``a .. a+n-1`` of ``cols`` as session ``sid``."""
    rounds = tuple(Round(canonical.request_id(sid, k), sid, k, at, cols[0][a + k],
                         cols[1][a + k], cols[2][a + k], cols[3][a + k]) for k in range(n))
    if spawn is None:
        return Unit(sid, "session", at, rounds)
    return Unit(sid, "session", at, rounds, {"parent_session_id": spawn.parent_id}, spawn)


@dataclass
class _Fanout:
    """The sub-agents of a block: each child's parent (its session's index in the
    block), the parent's round it starts after, and the children's rounds."""

    parents: np.ndarray
    rounds: np.ndarray
    block: _Block


def _draw_fanout(spec: SyntheticSpec, rng: np.random.Generator, block: _Block
                 ) -> _Fanout | None:  # fmt: skip
    """The sub-agents, drawn after the sessions on the same generator (docs/trace-formats.md,
    "Sub-agents in the agentic kind"); None when no round spawns."""
    total = len(block.inputs)
    open_rounds = np.ones(total, dtype=bool)
    open_rounds[block.starts + block.counts - 1] = False
    candidates = np.flatnonzero(open_rounds)
    spawning = candidates[rng.random(candidates.size) < spec.subagents]
    if not spawning.size:
        return None
    fan = np.minimum(spec.fanout.draw(rng, spawning.size, integer=True, low=1), MAX_FANOUT)
    _check_rounds(total + int(fan.sum()))  # a child has a round at least: before drawing
    at = np.repeat(spawning, fan)
    parents = np.searchsorted(block.starts, at, side="right") - 1
    child = spec.child_spec(int(at.size))
    kids = _draw_block(child, _Columns.shared(child, rng), child.sessions)
    _check_rounds(total + int(kids.counts.sum()))
    return _Fanout(parents, at - block.starts[parents], kids)


def _draw_block(spec: SyntheticSpec, cols: _Columns, sessions: int, *,
                check_total: bool = False) -> _Block:
    """The next ``sessions`` sessions from ``cols`` (vectorized over the block): each
    round carries its whole conversation, unless a compaction starts it afresh."""
    counts = np.minimum(cols.rounds.take(sessions), MAX_ROUNDS_PER_SESSION)
    total = int(counts.sum())
    if check_total:
        _check_rounds(total)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    inputs = cols.input.take(total)
    if cols.first is not None:
        inputs[starts] = cols.first.take(sessions)
    outputs = cols.output.take(total)
    waits = cols.wait.take(total)
    waits[starts + counts - 1] = 0.0
    fresh = cols.fresh.take(total) < spec.compaction
    fresh[starts] = True
    seg = np.maximum.accumulate(np.where(fresh, np.arange(total), 0))
    before = np.cumsum(inputs + outputs) - (inputs + outputs)
    prefixes = before - before[seg]
    return _Block(starts, counts, prefixes, inputs, outputs, waits, int(fresh.sum()))


class SessionStream(UnitStream):
    """The sessions of a ``synthetic:`` description, drawn ``STREAM_BLOCK`` at a time in
    order (docs/virtual-time.md, "Streamed runs"): session ``i`` is ``synthetic_workload``'s
    unit ``i``; the totals (``n_rounds``, ``*_tokens``) come from one pass at construction."""

    def __init__(self, spec: SyntheticSpec, rng: np.random.Generator,
                 arrivals_ms: Sequence[float] | None = None) -> None:
        if spec.subagents > 0:
            raise ConfigError("synthetic source: sub-agents (subagents > 0) are drawn whole, "
                              "not streamed; draw them with synthetic_workload, or set "
                              "subagents=0 for a streamed run (docs/trace-formats.md, "
                              "'Synthetic workloads')")
        super().__init__()
        self.spec = spec
        self.arrivals_ms = arrivals_ms
        self._start, self.n_rounds = _Columns.positioned(spec, rng)
        prefix = prompt = output = fresh = 0
        for _, block in self._blocks():
            prefix += int(block.prefixes.sum())
            prompt += int(block.prefixes.sum() + block.inputs.sum())
            output += int(block.outputs.sum())
            fresh += block.fresh_rounds
        self.prefix_tokens, self.prompt_tokens, self.output_tokens = prefix, prompt, output
        self.fresh_rounds = fresh

    def __len__(self) -> int:
        return self.spec.sessions

    def _blocks(self) -> Iterator[tuple[int, _Block]]:
        cols = self._start.copies()
        for first in range(0, self.spec.sessions, STREAM_BLOCK):
            n = min(STREAM_BLOCK, self.spec.sessions - first)
            yield first, _draw_block(self.spec, cols, n)

    def __iter__(self) -> Iterator[Unit]:
        for first, block in self._blocks():
            yield from block.units(first, self.arrivals_ms)
