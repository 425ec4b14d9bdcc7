"""``tracegen``: materialize a raw or synthetic session workload into the canonical format.

A raw trace claims prefixes that may not exist at replay time; ``tracegen`` applies a
context policy *once* and writes ``OUT.csv`` (canonical ``session-execution-v2`` rows),
``OUT.manifest.json`` (totals and every parameter), ``OUT.plan.json`` (one object per
round) and, with sub-agents, ``OUT.graph.json``, so every replay of the file runs the
same plan. Options, order of operations and randomness: docs/trace-formats.md,
"session-execution-v2"; synthetic sources: ``SYNTHETIC_HELP``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workbench import __version__
from workbench import safe_write as safe
from workbench.context.policy import (
    MAJOR_COMPACTION_MIN_DROP_RATIO,
    MAJOR_COMPACTION_MIN_DROP_TOKENS,
    POLICIES,
    ContextPolicy,
    effective_policy,
    make_policy,
    plan_rounds,
)
from workbench.errors import WRITE_ERRNOS, ConfigError, OutputWriteError, TraceFormatError
from workbench.records import Unit, Workload
from workbench.traces import canonical
from workbench.traces._io import open_trace
from workbench.traces.bounds import check_workload
from workbench.traces.graph import sidecar_rows
from workbench.traces.load import FORMATS, detect_format, load_trace
from workbench.workloads.synthetic import SYNTHETIC_PREFIX, parse_synthetic, synthetic_workload

log = logging.getLogger(__name__)

SESSION_ORDERS = ("source", "shuffle")
ARRIVAL_PATTERNS = ("source", "poisson", "constant")
RNG_NOTE = "numpy.random.default_rng(seed) (PCG64); draw order: synthetic, shuffle, arrivals"


@dataclass(frozen=True)
class TracegenSpec:
    """Everything that shapes a generated trace besides its source (recorded in the
    manifest): ``arrival=None`` keeps the source arrivals (a synthetic source's default:
    ``poisson``), ``rate`` is sessions/s, ``tool_wait`` the TraceLab reader's option."""

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
    """Generate ``out`` (canonical CSV) + sidecars from ``source``, a session trace
    ``load_trace`` reads or a ``synthetic:...`` description; ``overrides`` are
    ``TracegenSpec`` fields (``policy="monotonic"``, ...)."""
    started = time.perf_counter()
    spec = dataclasses.replace(spec or TracegenSpec(), **overrides).validate()
    _refuse_writing_the_source(source, Path(out))
    rng = np.random.default_rng(spec.seed)
    src = _load_source(source, spec, rng)
    units = _select(src.workload.units, spec, rng)
    units, arrivals, origin, pattern = _arrivals(units, spec, src, rng)
    policy = make_policy(spec.policy, {
        "major_compaction_min_drop_tokens": spec.major_compaction_min_drop_tokens,
        "major_compaction_min_drop_ratio": spec.major_compaction_min_drop_ratio})
    rows, stats = _plan(units, arrivals, policy)
    parameters = _parameters(spec, src, pattern, origin, stats)
    manifest = _manifest(rows, len(units), src, parameters)
    csv_path, manifest_path, plan_path = _write(Path(out), rows, manifest, sidecar_rows(units))
    # prove the file obeys the format with the reader itself (the sidecars we just wrote)
    workload = load_trace(csv_path, fmt=canonical.FORMAT_NAME, sidecars=False)
    workload = dataclasses.replace(workload, meta={
        **workload.meta, "manifest": manifest, "manifest_path": str(manifest_path),
        "plan_path": str(plan_path)})
    log.info("tracegen wrote %d rounds to %s in %.2fs", workload.n_rounds, csv_path,
             time.perf_counter() - started)
    return TracegenResult(csv_path, manifest_path, plan_path, manifest, workload)


def _refuse_writing_the_source(source: str | Path, out: Path) -> None:
    """The output and its sidecars are replaced: none may be the source trace (a path,
    a link to it or from it), or the plan would overwrite what it was made from."""
    if str(source).startswith(SYNTHETIC_PREFIX) or not Path(source).exists():
        return  # no file to lose (a missing one is the reader's error, later)
    for target in (out, *canonical.sidecar_paths(out)):
        try:
            same = target.exists() and os.path.samefile(target, source)
        except OSError:
            same = False
        if same:
            raise ConfigError(f"tracegen cannot write {target}: it is the source trace "
                              f"{source}, which the output would replace; write it elsewhere")


def _write(
    out: Path, rows: list[canonical.CanonicalRow], manifest: dict[str, Any],
    graph: list[dict[str, Any]] | None = None,
) -> tuple[Path, Path, Path]:
    """CSV, manifest and plan sidecar; an output that cannot be written is one ConfigError."""
    for target in (out, *canonical.sidecar_paths(out)):
        # each is written as <name>.tmp and renamed over <name>: a FIFO, a device or a
        # directory there would be replaced (or the rename fail half-way), so refuse first
        if target.exists() and not target.is_file():
            raise ConfigError(f"tracegen cannot write {target}: it exists and is not a "
                              "regular file (tracegen would replace it)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        csv_path = canonical.write_session_execution_v2(out, rows)
        manifest_path, plan_path = canonical.sidecar_paths(csv_path)
        safe.write_file(manifest_path,
                        orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
        safe.write_file(plan_path, orjson.dumps(_plan_rows(rows)) + b"\n")
        graph_path = canonical.graph_sidecar_path(csv_path)
        if graph:  # sub-agents (docs/session-graphs.md); none: no file, output unchanged
            safe.write_file(graph_path,
                            orjson.dumps(graph, option=orjson.OPT_INDENT_2) + b"\n")
        elif graph_path.is_file():  # a stale graph of an earlier output must not apply
            graph_path.unlink()
    except OSError as exc:
        where = exc.filename or out
        if exc.errno in WRITE_ERRNOS:  # a full disk: a failed write (exit 5), not a config
            raise OutputWriteError(where, exc) from None
        raise ConfigError(f"tracegen cannot write {where}: {exc.strerror or exc}") from None
    return csv_path, manifest_path, plan_path


def _load_source(source: str | Path, spec: TracegenSpec, rng: np.random.Generator) -> _Source:
    """A session workload and the provenance fields of the manifest."""
    text = str(source)
    if text.startswith(SYNTHETIC_PREFIX):
        synth = parse_synthetic(text)
        workload = synthetic_workload(synth, rng)
        try:
            check_workload(text, workload)  # a conversation that grew past the bounds
        except TraceFormatError as exc:
            raise ConfigError(f"synthetic source: {exc.rule}") from None
        described = {**synth.describe(), "compaction_rounds": workload.meta["compaction_rounds"]}
        raw = text.encode()
        info = {"source_path": text, "source_schema": "synthetic", "generator": "synthetic",
                "source_sha256": hashlib.sha256(raw).hexdigest(), "source_bytes": len(raw),
                "synthetic": described}
        return _Source(workload, info)
    path = Path(source)
    if not path.exists() and not path.is_symlink():
        raise TraceFormatError(path, 0, "no such file (nor a synthetic: description)")
    fmt = spec.fmt
    name = detect_format(path) if fmt == "auto" else FORMATS.canonical(fmt)
    options: dict[str, Any] = {"tool_wait": spec.tool_wait} if name == "tracelab" else {}
    workload = load_trace(path, fmt=fmt, **options)
    if not workload.units or not all(u.is_session for u in workload.units):
        raise ConfigError(f"tracegen needs session units; {path} ({workload.fmt}) has others")
    effective_policy(workload, spec.policy)  # a planned file takes only its identity policy
    data = open_trace(path)  # checked like the reader's read (regular, bounded)
    info = {"source_path": str(path), "source_schema": workload.fmt, "generator": "coding-session",
            "source_sha256": hashlib.sha256(data).hexdigest(), "source_bytes": len(data)}
    if "tool_wait" in workload.meta:
        info["tool_wait"] = workload.meta["tool_wait"]
        info["tool_latency_source"] = workload.meta.get("tool_latency_source")
    return _Source(workload, info)


def _select(units: Sequence[Unit], spec: TracegenSpec, rng: np.random.Generator) -> list[Unit]:
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
    shift = float(raw.min()) if n else 0.0
    # what was subtracted from the source's own clock: a reader that already rebased its
    # arrivals (TraceLab JSONL: epoch ms) says by how much in its meta
    origin = shift + (float(src.workload.meta.get("arrival_origin_ms", 0.0))
                      if pattern == "source" else 0.0)
    return units, (raw - shift).tolist(), origin, pattern


def _plan(
    units: list[Unit], arrivals: list[float], policy: ContextPolicy
) -> tuple[list[canonical.CanonicalRow], dict[str, int]]:
    """Apply the policy per session (``plan_rounds``) into canonical rows; count the folded
    prefix (reported but not reused, ``max(P - p, 0)``: request-factory's count)."""
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
            # the canonical id whatever the reader named the round (batchbench's
            # ``{trajectory}_request_{k}`` is not one): the file must read back
            rows.append((canonical.request_id(sid, k), sid, k, arrival, pl.prefix_len,
                         pl.input_len, raw.output_len, raw.tool_wait_after_ms))
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
