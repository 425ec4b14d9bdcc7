"""Fit the embedded engine's cost model (``sim.cost``) from a real engine's records.

``calibrate(run_dirs)`` reads the records of one or more runs against a real
server and fits the three parts of the step-time model (``docs/calibration.md``):

- **prefill**: ``a·T² + b·T + c`` ms for T uncached prompt tokens, fitted to the
  TTFT of requests whose prefill ran alone (no other request in flight from their
  dispatch to their first token). The same requests also get a fit with a
  cached-token term (``+ d·C``) that is reported, not used: the engine's model
  charges nothing for cached tokens;
- **decode**: ``max(floor, a·u² + b·u + c)`` ms with u = KV tokens attended by the
  step / KV capacity. Only inter-token gaps that no other request's prefill
  overlapped count (a step that mixed in a prefill chunk is not a decode step);
  the batch's KV is rebuilt from the records (each in-flight request attends its
  prompt plus the tokens it had received). One observation per request: its mean
  clean gap against the means of u² and u over those gaps (the mean of the model
  is linear in its coefficients, so this is exact for the model and aims at the
  TPOT the request reports). ``a`` is fitted only when the runs' u spans more
  than ``QUADRATIC_SPAN`` of the capacity, else 0. A fit on (batch size, KV
  tokens) is reported beside it;
  A per-sequence term ``s·batch`` (``decode_seq_ms``) is fitted with them when the
  batch varied;
- **floor**: the 5th percentile of the requests' mean clean gaps;
- **request overhead** (``fit_overhead``): the share of the prefill constant that is
  a per-request latency beside the engine (``request_overhead_ms``), chosen by
  replaying the runs whose requests overlapped.

Lone requests whose tokens all came in one burst (a server that delivered the
stream at its end) give neither a TTFT nor decode gaps (docs/calibration.md).

Fits minimise absolute, not squared, error (least absolute deviations by
iteratively reweighted least squares): they aim at the median, which is what a
p50 prediction needs, and one stalled request on a busy machine does not drag a
coefficient.

Each part reports its own error (median and mean absolute percentage error on the
samples it was fitted to). ``Calibration.engine`` is a knob mapping that
``simulate`` (``--engine-config``) and ``sim serve`` (``--engine-config``) take.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from workbench.config import RunConfig

from workbench.errors import ConfigError
from workbench.records import RequestRecord, RunResult
from workbench.sim.config import EngineConfig

NS_PER_MS = 1e6
MIN_SAMPLES = 3
QUADRATIC_SPAN = 0.1  # u range (share of KV capacity) below which a·u² is not fitted
LAD_ITERATIONS = 100
LATE_SHARE = 0.01  # a stream whose tokens all came within 1 % of its TTFT came in one burst
SPLIT_STEPS = 11  # shares of the lone-prefill constant tried as per-request overhead


@dataclass
class Sample:
    """What calibration reads of one ok request (times in ns on its run's clock)."""

    dispatch: int
    first: int
    end: int
    times: np.ndarray  # token event times
    counts: np.ndarray  # tokens per event
    prompt: int
    cached: int
    request_id: str = ""

    @property
    def first_delivered_late(self) -> bool:
        """The first token arrived with all the others (a stream of several tokens read
        in one burst): its time is the response's end, not when the engine made it."""
        span = int(self.times[-1] - self.first)
        return self.times.size > 1 and span < LATE_SHARE * (self.first - self.dispatch)


@dataclass
class Calibration:
    engine: dict[str, Any]
    fit: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "fit": self.fit}

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return p


def _samples(records: Sequence[RequestRecord]) -> list[Sample]:
    out = []
    for r in records:
        if r.status != "ok" or r.dispatch_ns is None or not r.token_times_ns:
            continue
        if r.prompt_tokens is None:
            continue
        out.append(Sample(
            r.dispatch_ns, r.token_times_ns[0], r.end_ns or r.token_times_ns[-1],
            np.asarray(r.token_times_ns, dtype=np.int64),
            np.asarray(r.token_counts or [1] * len(r.token_times_ns), dtype=np.int64),
            int(r.prompt_tokens), int(r.cached_tokens or 0), r.request_id,
        ))  # fmt: skip
    return out


def _errors(pred: np.ndarray, meas: np.ndarray) -> dict[str, float | int]:
    pct = np.abs(pred - meas) / np.maximum(meas, 1e-9) * 100
    return {
        "samples": int(meas.size),
        "median_abs_pct_error": float(np.median(pct)),
        "mean_abs_pct_error": float(pct.mean()),
    }


def _lstsq(cols: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Least absolute deviations: IRLS from the least-squares start, bounded in rounds."""
    x = np.column_stack(cols)
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)  # columns of very different size
    xs = x / scale
    coef, *_ = np.linalg.lstsq(xs, y, rcond=None)
    eps = 1e-9 * max(float(np.abs(y).max()), 1e-300)
    for _ in range(LAD_ITERATIONS):
        w = 1.0 / np.sqrt(np.maximum(np.abs(y - xs @ coef), eps))
        new, *_ = np.linalg.lstsq(xs * w[:, None], y * w, rcond=None)
        if np.allclose(new, coef, rtol=1e-12, atol=0):
            coef = new
            break
        coef = new
    return np.asarray(coef / scale, dtype=float)


def fit_prefill(samples: list[Sample]) -> tuple[tuple[float, float, float], dict[str, Any]]:
    """``(a, b, c)`` of the prefill polynomial and its error report."""
    busy = [(s.dispatch, s.end) for s in samples]
    alone, late = [], 0
    for i, s in enumerate(samples):
        if not any(j != i and lo < s.first and hi > s.dispatch for j, (lo, hi) in enumerate(busy)):
            if s.first_delivered_late:
                late += 1
            else:
                alone.append(s)
    if len(alone) < MIN_SAMPLES:
        raise ConfigError(
            f"calibration needs >= {MIN_SAMPLES} requests whose prefill ran alone (no other "
            f"request in flight) and a first token delivered before the rest, found "
            f"{len(alone)} ({late} more came in one burst): add a run with max_concurrency 1"
        )
    t = np.array([s.prompt - s.cached for s in alone], dtype=float)
    c = np.array([s.cached for s in alone], dtype=float)
    y = np.array([(s.first - s.dispatch) / NS_PER_MS for s in alone])
    one = np.ones_like(t)
    a, b, k = _lstsq([t * t, t, one], y)
    form = "a*T^2 + b*T + c"
    if a < 0 or b < 0:  # a concave or decreasing fit extrapolates badly: the linear one
        a, (b, k) = 0.0, _lstsq([t, one], y)
        form = "b*T + c (the quadratic fit was not convex and increasing)"
    if b < 0:
        a, b, k = 0.0, 0.0, float(np.median(y))
        form = "c (TTFT did not grow with uncached tokens)"
    pred = a * t * t + b * t + k
    with_cached = _lstsq([t * t, t, c, one], y)
    report = {
        "form": form,
        "coeffs": [float(a), float(b), float(k)],
        "first_token_with_the_rest": late,
        "uncached_tokens_range": [float(t.min()), float(t.max())],
        "cached_tokens_range": [float(c.min()), float(c.max())],
        **_errors(pred, y),
        "with_cached_term": {
            "coeffs_T2_T_C_1": [float(x) for x in with_cached],
            **_errors(np.column_stack([t * t, t, c, one]) @ with_cached, y),
            "note": "reported only: the engine's model charges nothing for cached tokens",
        },
    }
    return (float(a), float(b), float(k)), report


def _decode_gaps(
    samples: list[Sample],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per clean decode gap: (gap ms per token, batch size, KV tokens) at its midpoint,
    and the index of the request it belongs to. A request whose tokens all came in
    one burst has no gap of its own (it still counts in the batch of the others)."""
    prefill = np.array([(s.dispatch, s.first) for s in samples], dtype=np.int64)
    mids, gaps, owner = [], [], []
    for i, s in enumerate(samples):
        if s.times.size < 2 or s.first_delivered_late:  # no gap of it was measured
            continue
        lo, hi = s.times[:-1], s.times[1:]
        step = (hi - lo) / NS_PER_MS / np.maximum(s.counts[1:], 1)
        clean = np.ones(lo.size, dtype=bool)
        for j, (p0, p1) in enumerate(prefill):
            if j != i:
                clean &= ~((lo < p1) & (hi > p0))
        keep = clean  # zero gaps too: tokens that arrived together
        mids.append((lo[keep] + hi[keep]) // 2)
        gaps.append(step[keep])
        owner.append(np.full(int(keep.sum()), i))
    if not mids:
        return np.array([]), np.array([]), np.array([]), np.array([], dtype=int)
    mid = np.concatenate(mids)
    gap = np.concatenate(gaps)
    batch = np.zeros(mid.size)
    kv = np.zeros(mid.size)
    for s in samples:
        inside = (mid >= s.first) & (mid <= s.times[-1])
        got = np.cumsum(s.counts)[np.clip(np.searchsorted(s.times, mid, "right") - 1, 0, None)]
        batch += inside
        kv += np.where(inside, s.prompt + got, 0)
    return gap, batch, kv, np.concatenate(owner)


def fit_decode(
    samples: list[Sample], capacity_tokens: int
) -> tuple[tuple[float, float, float], float, dict[str, Any]]:
    """``(a, b, c)`` of the decode polynomial in u, the floor, and the error report."""
    gap, batch, kv, owner = _decode_gaps(samples)
    reqs = np.unique(owner)
    if reqs.size < MIN_SAMPLES:
        raise ConfigError(
            f"calibration needs >= {MIN_SAMPLES} requests with decode gaps no prefill "
            f"overlapped, found {reqs.size}: use outputs of more than one token"
        )
    u = np.minimum(kv / capacity_tokens, 1.0)

    def per_request(v: np.ndarray) -> np.ndarray:
        return np.bincount(owner, weights=v)[reqs] / np.bincount(owner)[reqs]

    y, mu, mu2 = per_request(gap), per_request(u), per_request(u * u)
    mb, mkv = per_request(batch), per_request(kv)
    one = np.ones_like(y)
    quadratic = float(u.max() - u.min()) > QUADRATIC_SPAN
    cols = [mu2, mu] if quadratic else [mu]
    seq = 0.0
    if float(batch.max() - batch.min()) >= 1:  # the batch varied: its own term
        *coef, seq, c = _lstsq([*cols, mb, one], y)
    if seq <= 0 or float(batch.max() - batch.min()) < 1:
        seq, (*coef, c) = 0.0, _lstsq([*cols, one], y)
    a, b = (coef[0], coef[1]) if quadratic else (0.0, coef[0])
    if a < 0 or b < 0:  # a step that gets cheaper with more KV: noise, so no KV term
        a = b = 0.0
        if seq > 0:
            seq, c = _lstsq([mb, one], y)
        if seq <= 0:
            seq, c = 0.0, float(np.median(y))
    floor = float(np.percentile(y, 5))
    per_gap = np.maximum(floor, a * u * u + b * u + c + seq * batch)
    pred = per_request(per_gap)
    bk = _lstsq([mb, mkv, one], y)
    report = {
        "form": "max(floor, a*u^2 + b*u + c + s*batch), u = KV tokens / capacity"
        + ("" if quadratic else f" (a = 0: u spans <= {QUADRATIC_SPAN})"),
        "coeffs": [float(a), float(b), float(c)],
        "seq_ms": float(seq),
        "floor_ms": floor,
        "capacity_tokens": int(capacity_tokens),
        "gaps": int(gap.size),
        "batch_range": [float(batch.min()), float(batch.max())],
        "kv_tokens_range": [float(kv.min()), float(kv.max())],
        **_errors(pred, y),
        "batch_and_context": {
            "form": "p*batch + q*kv_tokens + r (per request means)",
            "coeffs_batch_kv_1": [float(x) for x in bk],
            **_errors(np.column_stack([mb, mkv, one]) @ bk, y),
            "note": "reported only: the engine's model sees the KV through u = kv / capacity",
        },
    }
    return (float(a), float(b), float(c)), floor, report


def calibrate(
    run_dirs: Sequence[str | Path],
    *,
    base: dict[str, Any] | None = None,
    self_check: bool = True,
) -> Calibration:
    """Fit the cost model from the runs in ``run_dirs``; ``base`` holds the engine knobs
    that are not fitted (``block_size``, ``num_blocks``, ``max_num_seqs`` ... of the real
    server; the block size defaults to the runs' detected one)."""
    from workbench.storage.rundir import load

    if not run_dirs:
        raise ConfigError("calibrate needs at least one run directory")
    results = [load(d) for d in run_dirs]
    samples = [s for r in results for s in _samples(r.records)]
    if not samples:
        raise ConfigError(f"no ok request with token times in {', '.join(map(str, run_dirs))}")
    knobs = dict(base or {})
    detected = {int(b) for r in results if (b := r.manifest.get("block_size")) is not None}
    if "block_size" not in knobs and len(detected) == 1:
        knobs["block_size"] = detected.pop()
    cfg = EngineConfig.from_knobs(**knobs)
    prefill, prefill_report = fit_prefill(samples)
    decode, floor, decode_report = fit_decode(samples, cfg.capacity_tokens)
    knobs.update(prefill_coeffs=list(prefill), decode_coeffs=list(decode), decode_floor_ms=floor,
                 decode_seq_ms=decode_report["seq_ms"])  # fmt: skip
    EngineConfig.from_knobs(**knobs)  # the result must be a valid engine
    overhead_report = fit_overhead(results, knobs)
    fit: dict[str, Any] = {
        "runs": [str(r.run_dir) for r in results],
        "requests": len(samples),
        "prefill": prefill_report,
        "decode": decode_report,
        "request_overhead": overhead_report,
    }
    cal = Calibration(knobs, fit)
    if self_check:
        fit["replay"] = [predict(r.run_dir or "", cal.engine) for r in results]
    return cal


def _replay_config(measured: RunResult) -> RunConfig:
    """The measured run's config, aimed at the embedded engine in virtual time."""
    from workbench.config import RunConfig

    conf = dict(measured.manifest.get("config") or {})
    if not conf:
        raise ConfigError(f"{measured.run_dir}: manifest.json has no config to replay")
    conf.update(target={"url": "sim", "engine": {}}, out_dir=None, run_id=None)
    conf.pop("executor", None)
    return RunConfig.from_dict(conf)


def _ttft_ms(records: Sequence[RequestRecord]) -> dict[str, float]:
    return {
        r.request_id: (r.first_token_ns - r.dispatch_ns) / NS_PER_MS
        for r in records
        if r.status == "ok" and r.first_token_ns is not None and r.dispatch_ns is not None
    }


def fit_overhead(results: Sequence[RunResult], knobs: dict[str, Any]) -> dict[str, Any]:
    """Split the lone-prefill constant ``c`` into engine time and a per-request overhead.

    A lone request's TTFT cannot tell the two apart: ``c`` is whatever its TTFT has
    beyond ``a·T² + b·T``. Engine time is paid once per step (and delays every
    request in it); the overhead once per request, beside the engine. Runs where
    requests overlapped tell them apart: each share of ``c`` in ``SPLIT_STEPS`` steps
    from 0 to 1 is tried as ``request_overhead_ms`` (the rest staying in ``c``),
    those runs are replayed in virtual time, and the share whose TTFTs of the
    overlapped requests are nearest the measured ones (median absolute relative
    error) is kept; sets ``knobs`` accordingly. Requests whose first token came with
    the rest are left out (their TTFT is the whole response's time)."""
    from workbench.executors.virtual import simulate

    a, b, c = knobs["prefill_coeffs"]
    overlapping = []
    for r in results:
        ss = _samples(r.records)
        measured = {x.request_id: (x.first - x.dispatch) / NS_PER_MS
                    for i, x in enumerate(ss) if not x.first_delivered_late
                    and any(j != i and y.dispatch < x.first and y.end > x.dispatch
                            for j, y in enumerate(ss))}  # fmt: skip
        if measured:  # the requests whose TTFT another request's steps may have delayed
            overlapping.append((_replay_config(r), measured))
    if not overlapping or c <= 0:
        knobs["request_overhead_ms"] = 0.0
        note = "no run with overlapping requests (or no constant) to split c by"
        return {"share_of_c": 0.0, "request_overhead_ms": 0.0, "note": note}
    tried = []
    for share in np.linspace(0.0, 1.0, SPLIT_STEPS):
        engine = {**knobs, "prefill_coeffs": [a, b, c * (1 - share)],
                  "request_overhead_ms": c * share}  # fmt: skip
        pct = []
        for cfg, measured in overlapping:
            sim = _ttft_ms(simulate(cfg, engine=dict(engine)).records)
            pct += [abs(sim[k] - m) / m * 100 for k, m in measured.items() if k in sim and m > 0]
        tried.append((float(np.median(pct)) if pct else float("inf"), float(share)))
    err, share = min(tried, key=lambda t: t[0])  # the first (smallest share) of equal errors
    knobs.update(prefill_coeffs=[a, b, c * (1 - share)], request_overhead_ms=c * share)
    return {
        "share_of_c": share,
        "request_overhead_ms": c * share,
        "prefill_c_ms": c * (1 - share),
        "runs": len(overlapping),
        "median_abs_pct_error": err,
        "tried": [{"share": sh, "median_abs_pct_error": e} for e, sh in tried],
    }


def predict(run_dir: str | Path, engine: dict[str, Any]) -> dict[str, Any]:
    """Replay a measured run's config in virtual time against ``engine`` and compare
    p50 TTFT and p50 TPOT with what was measured: ``{measured, predicted, error_pct}``."""
    from workbench.executors.virtual import simulate
    from workbench.metrics import summarize
    from workbench.storage.rundir import load

    measured = load(run_dir)
    sim = summarize(simulate(_replay_config(measured), engine=dict(engine)))
    real = summarize(measured)
    out: dict[str, Any] = {"run": str(run_dir)}
    for metric in ("ttft_ms", "tpot_ms"):
        m, p = real[metric]["p50"], sim[metric]["p50"]
        err = None if not m or p is None else (p - m) / m * 100
        out[metric] = {"measured_p50": m, "predicted_p50": p, "error_pct": err}
    return out


def predict_repeats(run_dirs: Sequence[str | Path], engine: dict[str, Any]) -> dict[str, Any]:
    """``predict`` for repeated runs of one config: the measured p50s are over all
    their ok records together (each run's own p50 beside them, and their spread as
    a share of the pooled p50); the prediction is one virtual replay."""
    import pandas as pd

    from workbench.executors.virtual import simulate
    from workbench.metrics.frame import to_frame
    from workbench.storage.rundir import load

    if not run_dirs:
        raise ConfigError("predict_repeats needs at least one run directory")
    measured = [load(d) for d in run_dirs]
    configs = {json.dumps(_replay_config(m).to_dict() | {"seed": None}, sort_keys=True,
                          default=str) for m in measured}  # fmt: skip
    if len(configs) != 1:
        raise ConfigError("predict_repeats: the runs differ in more than their seed")
    frames = [to_frame(m) for m in measured]
    frames = [f[(f["status"] == "ok") & ~f["warmup"]] for f in frames]
    sim = to_frame(simulate(_replay_config(measured[0]), engine=dict(engine)))
    sim = sim[(sim["status"] == "ok") & ~sim["warmup"]]
    out: dict[str, Any] = {"runs": [str(d) for d in run_dirs]}
    pooled = pd.concat(frames)
    for metric in ("ttft_ms", "tpot_ms"):
        per_run = [float(f[metric].median()) for f in frames]
        m, p = float(pooled[metric].median()), float(sim[metric].median())
        out[metric] = {
            "measured_p50": m,
            "measured_p50_per_run": per_run,
            "spread_pct": (max(per_run) - min(per_run)) / m * 100 if m else None,
            "predicted_p50": p,
            "error_pct": (p - m) / m * 100 if m else None,
        }
    return out


def read_engine_file(path: str | Path) -> dict[str, Any]:
    """Engine knobs from a JSON or YAML mapping; a calibration file's ``engine`` block."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read engine config: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not JSON or YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("engine"), dict):
        data = data["engine"]
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an engine config is a mapping of engine knobs")
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    return {k: (list(v) if k in names and isinstance(v, tuple) else v) for k, v in data.items()}
