"""``tracegen``: materialize a raw or synthetic session workload into the canonical format.

A raw trace (session CSV, TraceLab JSONL) claims prefixes that may not exist at
replay time; a context policy (axis 2) decides what each round really reuses.
``tracegen`` applies it *once* and writes the result as a canonical
``session-execution-v2`` CSV plus two sidecars, so every replay of the file
(simulated or live) runs exactly the same plan:

- ``OUT.csv`` — the canonical rows (``workbench.traces.canonical``);
- ``OUT.manifest.json`` — totals recomputed from the rows and every parameter
  that shaped them (source hash, policy and thresholds, selection, arrivals,
  seed, folded/compaction counts);
- ``OUT.plan.json`` — one object per round with its predecessor request id.

Order of operations (request-factory's): pick the session order (``source``
or ``shuffle``), keep the first ``max_sessions``, *then* draw arrivals, so a
capped trace keeps the offered rate. Without an arrival pattern the source
arrivals are kept and the selected sessions are emitted in (stable) arrival
order, as the canonical format requires. Arrivals are rebased so the first
session arrives at 0 (``arrival_origin_ms`` is what was subtracted).

All randomness comes from one ``numpy.random.default_rng(seed)``, consumed in
a fixed order: synthetic draws, then the shuffle, then the arrival gaps.
Synthetic sources (``synthetic:key=value,...``) are documented in
``SYNTHETIC_HELP`` below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workbench import __version__
from workbench.context.policy import (
    MAJOR_COMPACTION_MIN_DROP_RATIO,
    MAJOR_COMPACTION_MIN_DROP_TOKENS,
    POLICIES,
    ContextPolicy,
    PrefixPreserving,
    plan_rounds,
)
from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import canonical
from workbench.traces.base import FORMATS, detect_format, load_trace

log = logging.getLogger(__name__)

SESSION_ORDERS = ("source", "shuffle")
ARRIVAL_PATTERNS = ("source", "poisson", "constant")
RNG_NOTE = "numpy.random.default_rng(seed) (PCG64); draw order: synthetic, shuffle, arrivals"


@dataclass(frozen=True)
class TracegenSpec:
    """Everything that shapes a generated trace besides its source (recorded in the manifest).

    ``arrival=None`` keeps the source arrivals (synthetic sources default to
    ``poisson``); ``rate`` is sessions per second; ``tool_wait`` is passed to
    the TraceLab reader (``union`` or ``sum``).
    """

    policy: str = "trace-reported"
    session_order: str = "source"
    max_sessions: int | None = None
    arrival: str | None = None
    rate: float = 1.0
    seed: int = 0
    fmt: str = "auto"
    tool_wait: str = "union"
    major_compaction_min_drop_tokens: int = MAJOR_COMPACTION_MIN_DROP_TOKENS
    major_compaction_min_drop_ratio: float = MAJOR_COMPACTION_MIN_DROP_RATIO

    def validate(self) -> TracegenSpec:
        """Check every value and resolve aliases (``monotonic``); errors name the option."""
        policy = POLICIES.canonical(self.policy)
        if self.session_order not in SESSION_ORDERS:
            raise ConfigError(f"session_order must be one of {SESSION_ORDERS}")
        if self.arrival is not None and self.arrival not in ARRIVAL_PATTERNS:
            raise ConfigError(f"arrival must be one of {ARRIVAL_PATTERNS}, got {self.arrival!r}")
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if not self.rate > 0 or not np.isfinite(self.rate):
            raise ConfigError(f"rate must be a finite number > 0, got {self.rate}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.tool_wait not in ("union", "sum"):
            raise ConfigError(f"tool_wait must be 'union' or 'sum', got {self.tool_wait!r}")
        return dataclasses.replace(self, policy=policy)


@dataclass(frozen=True)
class TracegenResult:
    """Where the files went, the manifest written, and the workload read back from them."""

    csv_path: Path
    manifest_path: Path
    plan_path: Path
    manifest: dict[str, Any]
    workload: Workload


@dataclass(frozen=True)
class _Source:
    workload: Workload
    info: dict[str, Any]


def tracegen(
    source: str | Path, out: str | Path, spec: TracegenSpec | None = None, **overrides: Any
) -> TracegenResult:
    """Generate ``out`` (canonical CSV) + sidecars from ``source``; see the module docstring.

    ``source`` is a trace path (raw session CSV, TraceLab JSONL or any session
    format ``load_trace`` reads) or a ``synthetic:...`` description.
    ``overrides`` are ``TracegenSpec`` fields (``policy="monotonic"``, ...).
    The written file is read back with the canonical reader before returning.
    """
    started = time.perf_counter()
    spec = dataclasses.replace(spec or TracegenSpec(), **overrides).validate()
    rng = np.random.default_rng(spec.seed)
    src = _load_source(source, spec, rng)
    units = _select(src.workload.units, spec, rng)
    units, arrivals, origin, pattern = _arrivals(units, spec, src, rng)
    rows, stats = _plan(units, arrivals, _policy(spec))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    csv_path = canonical.write_session_execution_v2(out, rows)
    manifest_path, plan_path = canonical.sidecar_paths(csv_path)
    parameters = _parameters(spec, src, pattern, origin, stats)
    manifest = _manifest(rows, len(units), src, parameters)
    manifest_path.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    plan_path.write_bytes(orjson.dumps(_plan_rows(rows)) + b"\n")
    # prove the file obeys the format with the reader itself (the sidecars we just wrote)
    workload = load_trace(csv_path, fmt=canonical.FORMAT_NAME, sidecars=False)
    workload = dataclasses.replace(workload, meta={
        **workload.meta, "manifest": manifest, "manifest_path": str(manifest_path),
        "plan_path": str(plan_path)})
    log.info("tracegen wrote %d rounds to %s in %.2fs", workload.n_rounds, csv_path,
             time.perf_counter() - started)
    return TracegenResult(csv_path, manifest_path, plan_path, manifest, workload)


def _load_source(source: str | Path, spec: TracegenSpec, rng: np.random.Generator) -> _Source:
    """A session workload and the provenance fields of the manifest."""
    text = str(source)
    if text.startswith(SYNTHETIC_PREFIX):
        synth = parse_synthetic(text)
        workload = synthetic_workload(synth, rng)
        described = {**synth.describe(), "compaction_rounds": workload.meta["compaction_rounds"]}
        raw = text.encode()
        info = {"source_path": text, "source_schema": "synthetic", "generator": "synthetic",
                "source_sha256": hashlib.sha256(raw).hexdigest(), "source_bytes": len(raw),
                "synthetic": described}
        return _Source(workload, info)
    path = Path(source)
    if not path.is_file():
        raise TraceFormatError(path, 0, "no such file (nor a synthetic: description)")
    fmt = spec.fmt
    options = {"tool_wait": spec.tool_wait} if _is_tracelab(path, fmt) else {}
    workload = load_trace(path, fmt=fmt, **options)
    if not workload.units or not all(u.is_session for u in workload.units):
        raise ConfigError(f"tracegen needs session units; {path} ({workload.fmt}) has others")
    data = path.read_bytes()
    info = {"source_path": str(path), "source_schema": workload.fmt, "generator": "coding-session",
            "source_sha256": hashlib.sha256(data).hexdigest(), "source_bytes": len(data)}
    if "tool_wait" in workload.meta:
        info["tool_wait"] = workload.meta["tool_wait"]
        info["tool_latency_source"] = workload.meta.get("tool_latency_source")
    return _Source(workload, info)


def _is_tracelab(path: Path, fmt: str) -> bool:
    name = detect_format(path) if fmt == "auto" else FORMATS.canonical(fmt)
    return name == "tracelab"


def _select(units: tuple[Unit, ...], spec: TracegenSpec, rng: np.random.Generator) -> list[Unit]:
    """Session order (source or a seeded permutation), then the first ``max_sessions``."""
    if spec.session_order == "shuffle":
        order = rng.permutation(len(units)).tolist()
        units = tuple(units[k] for k in order)
    return list(units[: spec.max_sessions])


def _arrivals(
    units: list[Unit], spec: TracegenSpec, src: _Source, rng: np.random.Generator
) -> tuple[list[Unit], list[float], float, str]:
    """Emission order, rebased arrivals (ms), the origin subtracted, and the pattern used."""
    pattern = spec.arrival or ("poisson" if "synthetic" in src.info else "source")
    n = len(units)
    if pattern == "source":
        raw = np.array([u.arrival_ms for u in units], dtype=float)
        order = np.argsort(raw, kind="stable")
        units = [units[k] for k in order.tolist()]
        raw = raw[order]
    elif pattern == "constant":
        raw = np.arange(n, dtype=float) * (1000.0 / spec.rate)
    else:
        gaps = rng.exponential(1000.0 / spec.rate, size=max(n - 1, 0))
        raw = np.concatenate(([0.0], np.cumsum(gaps)))
    origin = float(raw.min())
    return units, (raw - origin).tolist(), origin, pattern


def _policy(spec: TracegenSpec) -> ContextPolicy:
    if spec.policy == "prefix-preserving":
        return PrefixPreserving(
            spec.major_compaction_min_drop_tokens, spec.major_compaction_min_drop_ratio
        )
    return POLICIES.get(spec.policy)


def _plan(
    units: list[Unit], arrivals: list[float], policy: ContextPolicy
) -> tuple[list[canonical.CanonicalRow], dict[str, int]]:
    """Apply the policy per session (``plan_rounds``) into canonical rows; count folds.

    ``folded`` is the reported prefix the plan does not reuse, ``max(P - p, 0)``
    (request-factory's count for both policies).
    """
    rows: list[canonical.CanonicalRow] = []
    folded = folded_rounds = folded_first = major = 0
    for unit, arrival in zip(units, arrivals, strict=True):
        sid = unit.unit_id
        plans = plan_rounds(unit.rounds, policy)
        for k, (raw, pl) in enumerate(zip(unit.rounds, plans, strict=True)):
            f = raw.prefix_len - pl.prefix_len
            if f > 0:
                folded += f
                folded_rounds += 1
                folded_first += k == 0
            major += pl.major_compaction
            same = raw.round_idx == k and raw.session_id == sid  # readers emit canonical ids
            rid = raw.request_id if same else canonical.request_id(sid, k)
            rows.append((rid, sid, k, arrival, pl.prefix_len, pl.input_len, raw.output_len,
                         raw.tool_wait_after_ms))
    stats = {"folded_prefix_tokens": folded, "folded_rounds": folded_rounds,
             "folded_first_rounds": folded_first, "major_compaction_rounds": major}
    return rows, stats


def _parameters(
    spec: TracegenSpec, src: _Source, pattern: str, origin: float, stats: dict[str, int]
) -> dict[str, Any]:
    info = {k: v for k, v in src.info.items() if k != "generator"}
    return {
        **info,
        "context_policy": spec.policy,
        "major_compaction_min_drop_tokens": spec.major_compaction_min_drop_tokens,
        "major_compaction_min_drop_ratio": spec.major_compaction_min_drop_ratio,
        "selection_rule": "first_n_in_session_order",
        "max_sessions": spec.max_sessions,
        "session_order": spec.session_order,
        "emission_order": "source arrival (stable)" if pattern == "source" else "selection",
        "arrival_pattern": pattern,
        "arrival_rate_per_second": None if pattern == "source" else spec.rate,
        "seed": spec.seed,
        "rng": RNG_NOTE,
        "arrival_origin_ms": origin,
        **stats,
    }


def _manifest(
    rows: list[canonical.CanonicalRow], sessions: int, src: _Source, parameters: dict[str, Any]
) -> dict[str, Any]:
    """Totals recomputed from the emitted rows (vectorized) plus the parameters."""
    cols = np.array([r[4:7] for r in rows], dtype=np.int64).reshape(-1, 3)
    prefix, prompt = int(cols[:, 0].sum()), int(cols[:, :2].sum())
    return {
        "schema": canonical.FORMAT_NAME,
        "generator": src.info["generator"],
        "generator_version": f"workbench {__version__}",
        "millisecond_decimals": canonical.MS_DECIMALS,
        "sessions": sessions,
        "rounds": len(rows),
        "total_prompt_tokens": prompt,
        "total_prefix_tokens": prefix,
        "total_output_tokens": int(cols[:, 2].sum()),
        "planned_prefix_hit_rate": prefix / prompt if prompt else 0.0,
        "parameters": parameters,
    }


def _plan_rows(rows: list[canonical.CanonicalRow]) -> list[dict[str, Any]]:
    """The per-round plan sidecar; ms fields as 6-decimal strings, like the CSV."""
    out: list[dict[str, Any]] = []
    prev: str | None = None
    for rid, sid, idx, arrival, prefix, inp, outp, wait in rows:
        out.append({
            "request_id": rid, "session_id": sid, "round_idx": idx,
            "session_arrival_time_ms": f"{arrival:.6f}",
            "predecessor_request_id": prev if idx else None, "prefix_len": prefix,
            "input_len": inp, "output_len": outp, "tool_wait_after_ms": f"{wait:.6f}",
        })
        prev = rid
    return out


# --- synthetic sources --------------------------------------------------------------

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
        return np.rint(values).astype(np.int64) if integer else values


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
    return dist


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
            n = int(value)
            if n < 1:
                raise ValueError
            return n
        if key == "compaction":
            p = float(value)
            if not 0.0 <= p <= 1.0:
                raise ValueError
            return p
    except ValueError:
        raise ConfigError(f"synthetic source: bad {key}={value!r}") from None
    return parse_distribution(key, value)


def synthetic_workload(spec: SyntheticSpec, rng: np.random.Generator) -> Workload:
    """Draw the sessions (vectorized; all arrive at 0 — ``tracegen`` draws arrivals)."""
    counts = spec.rounds.draw(rng, spec.sessions, integer=True, low=1)
    total = int(counts.sum())
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
