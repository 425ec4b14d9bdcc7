"""``synthetic:KEY=VALUE,...`` sources for ``tracegen``: sessions drawn from distributions.

``parse_synthetic`` reads the description (``SYNTHETIC_HELP`` says every key);
``synthetic_workload`` draws the sessions with a caller's generator, vectorized,
all arriving at 0 (``tracegen`` draws the arrivals).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.errors import ConfigError
from workbench.records import Round, Unit, Workload
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
DIST is fixed:N | uniform:LO..HI (integers inclusive for token counts) |
lognormal:MEDIAN,SIGMA (rounded for token counts). A round reuses its whole
conversation so far: prefix = previous prefix + input + output.
Bounds (docs/trace-bounds.md): sessions <= 1,000,000, rounds <= 100,000 a
session (drawn counts are clipped there) and 10,000,000 in all, token counts
<= 10,000,000 (prompt + output of a round too), tool_wait <= 7 days.
Example: synthetic:sessions=100,rounds=uniform:2..20,input=lognormal:2000,1.0,
output=fixed:200,tool_wait=uniform:100..5000,compaction=0.02
Synthetic traces default to --arrival poisson at --rate."""


@dataclass(frozen=True)
class Distribution:
    """``fixed:N``, ``uniform:LO..HI`` or ``lognormal:MEDIAN,SIGMA``."""

    kind: str
    a: float
    b: float = 0.0

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.a:g}"
        sep = ".." if self.kind == "uniform" else ","
        return f"{self.kind}:{self.a:g}{sep}{self.b:g}"

    def draw(self, rng: np.random.Generator, n: int, *, integer: bool, low: int) -> np.ndarray:
        """``n`` values, clipped to ``low``; token counts are integers."""
        if self.kind == "fixed":
            values = np.full(n, self.a, dtype=float)
        elif self.kind == "uniform" and integer:
            values = rng.integers(int(self.a), int(self.b), size=n, endpoint=True).astype(float)
        elif self.kind == "uniform":
            values = rng.uniform(self.a, self.b, size=n)
        else:
            values = rng.lognormal(math.log(self.a), self.b, size=n)
        values = np.maximum(values, low)
        if not integer:
            return values
        # past the bound the workload check refuses it; clipping first keeps int64 exact
        return np.rint(np.minimum(values, bounds.MAX_ROUND_TOKENS + 1)).astype(np.int64)


def parse_distribution(key: str, text: str) -> Distribution:
    """Parse one ``DIST`` (a bare number means ``fixed``); ``ConfigError`` names the key."""
    kind, _, arg = text.partition(":") if ":" in text else ("fixed", "", text)
    try:
        if kind == "fixed":
            dist = Distribution("fixed", float(arg))
        elif kind == "uniform":
            lo, hi = arg.split("..")
            dist = Distribution("uniform", float(lo), float(hi))
        elif kind == "lognormal":
            median, sigma = arg.split(",")
            dist = Distribution("lognormal", float(median), float(sigma))
        else:
            raise ValueError(kind)
    except ValueError:
        raise ConfigError(
            f"synthetic {key}={text!r}: expected fixed:N, uniform:LO..HI or lognormal:MEDIAN,SIGMA"
        ) from None
    bad = not (math.isfinite(dist.a) and math.isfinite(dist.b) and dist.a >= 0 and dist.b >= 0)
    if bad or (kind == "uniform" and dist.b < dist.a) or (kind == "lognormal" and dist.a <= 0):
        raise ConfigError(f"synthetic {key}={text!r}: parameters out of range")
    cap = _CAPS.get(key, bounds.MAX_ROUND_TOKENS)
    if (dist.b if kind == "uniform" else dist.a) > cap or (kind == "lognormal" and dist.b > 4):
        raise ConfigError(f"synthetic {key}={text!r}: past the bound of {cap:,.0f} "
                          f"({bounds.DOC}; a lognormal sigma is at most 4)")
    return dist


MAX_SESSIONS = 1_000_000
MAX_ROUNDS_PER_SESSION = 100_000
MAX_ROUNDS = 10_000_000
_CAPS = {"rounds": MAX_ROUNDS_PER_SESSION, "tool_wait": bounds.MAX_WAIT_MS}


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

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the distributions (request-factory's field names)."""
        return {
            "sessions": self.sessions, "rounds": str(self.rounds), "input_len": str(self.input),
            "first_input_len": str(self.first_input or self.input),
            "output_len": str(self.output), "tool_wait_ms": str(self.tool_wait),
            "compaction_probability": self.compaction,
        }


def parse_synthetic(text: str) -> SyntheticSpec:
    """Parse ``synthetic:k=v,...``; a comma-piece without ``=`` continues the previous value."""
    pieces: list[list[str]] = []
    for piece in text.removeprefix(SYNTHETIC_PREFIX).split(","):
        if "=" in piece:
            pieces.append(piece.split("=", 1))
        elif pieces and piece:
            pieces[-1][1] += "," + piece
        elif piece:
            raise ConfigError(f"synthetic source: {piece!r} is not KEY=VALUE")
    fields: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(SyntheticSpec)}
    for key, value in ((k.strip(), v.strip()) for k, v in pieces):
        if key not in names:
            raise ConfigError(f"synthetic source: unknown key {key!r}; valid: {sorted(names)}")
        fields[key] = _synthetic_value(key, value)
    return SyntheticSpec(**fields)


def _synthetic_value(key: str, value: str) -> Any:
    try:
        if key == "sessions":
            n = int(value) if value.isascii() else 0
            if not 1 <= n <= MAX_SESSIONS:
                raise ValueError
            return n
        if key == "compaction":
            p = float(value)
            if not 0.0 <= p <= 1.0:
                raise ValueError
            return p
    except ValueError:
        want = f"an integer in 1..{MAX_SESSIONS:,}" if key == "sessions" else "a number in 0..1"
        raise ConfigError(f"synthetic source: bad {key}={value!r} (want {want})") from None
    return parse_distribution(key, value)


def synthetic_workload(spec: SyntheticSpec, rng: np.random.Generator) -> Workload:
    """Draw the sessions (vectorized; all arrive at 0 — ``tracegen`` draws arrivals)."""
    counts = np.minimum(spec.rounds.draw(rng, spec.sessions, integer=True, low=1),
                        MAX_ROUNDS_PER_SESSION)
    total = int(counts.sum())
    if total > MAX_ROUNDS:
        raise ConfigError(f"synthetic source draws {total:,} rounds, past the bound of "
                          f"{MAX_ROUNDS:,} ({bounds.DOC}); ask for fewer sessions or rounds")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    inputs = spec.input.draw(rng, total, integer=True, low=1)
    if spec.first_input is not None:
        inputs[starts] = spec.first_input.draw(rng, spec.sessions, integer=True, low=1)
    outputs = spec.output.draw(rng, total, integer=True, low=1)
    waits = spec.tool_wait.draw(rng, total, integer=False, low=0)
    waits[starts + counts - 1] = 0.0
    fresh = rng.random(total) < spec.compaction
    fresh[starts] = True
    seg = np.maximum.accumulate(np.where(fresh, np.arange(total), 0))
    before = np.cumsum(inputs + outputs) - (inputs + outputs)
    prefixes = before - before[seg]
    cols = [c.tolist() for c in (prefixes, inputs, outputs, waits)]
    units = []
    for s, (a, n) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)):
        sid = str(s)
        rounds = tuple(
            Round(canonical.request_id(sid, k), sid, k, 0.0, cols[0][a + k], cols[1][a + k],
                  cols[2][a + k], cols[3][a + k])
            for k in range(n)
        )
        units.append(Unit(sid, "session", 0.0, rounds))
    meta = {"needs_context_policy": False, "compaction_rounds": int(fresh.sum()) - spec.sessions}
    return Workload(tuple(units), "synthetic", source="synthetic", meta=meta)
