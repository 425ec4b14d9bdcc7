"""Fit the embedded engine's cost model (``sim.cost``) from a real engine's records.

``calibrate(run_dirs)`` fits the prefill polynomial, the decode polynomial and its floor,
and the split of the lone prefill constant (``calibration.split``), each by least absolute
deviations on clean samples, with its own error report; what is fitted from what is
docs/calibration.md's ("What is fitted, from what"). ``Calibration.engine`` is a knob
mapping ``simulate`` and ``sim serve`` take (``--engine-config``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench import safe_write as safe
from workbench.calibration.predict import predict
from workbench.calibration.samples import NS_PER_MS, Sample, overlapped, read_samples
from workbench.calibration.split import fit_split
from workbench.errors import ConfigError
from workbench.sim.config import EngineConfig

MIN_SAMPLES = 3
QUADRATIC_SPAN = 0.1  # u range (share of KV capacity) below which a·u² is not fitted
LAD_ITERATIONS = 100


@dataclass
class Calibration:
    engine: dict[str, Any]
    fit: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "fit": self.fit}

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        safe.write_file(p, json.dumps(self.to_dict(), indent=2) + "\n")
        return p


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


def _held_out(n: int, params: int, predict_without: Any, measured: np.ndarray
              ) -> dict[str, Any]:
    """Leave-one-out: each of the ``n`` samples predicted by the fit of the others
    (``predict_without(i)``); with no more samples than the fit has parameters there is
    none to hold out (the rest would not determine the fit), and it says so."""
    out: dict[str, Any] = {"method": "leave-one-out", "samples": n}
    if n <= params:
        return {**out, "note": f"no held-out error: {n} samples fit {params} parameters"}
    pred = np.array([predict_without(i) for i in range(n)])
    err = _errors(pred, measured)
    return {**out, "median_abs_pct_error": err["median_abs_pct_error"],
            "mean_abs_pct_error": err["mean_abs_pct_error"]}


def _stated(in_sample: float, held: dict[str, Any]) -> dict[str, Any]:
    """The error a part states: the larger of its in-sample and held-out medians, or none
    (with the held-out's note) when nothing could be held out."""
    if "median_abs_pct_error" not in held:
        return {"median_abs_pct_error": None, "note": held["note"]}
    return {"median_abs_pct_error": max(in_sample, held["median_abs_pct_error"])}


def _prefill_coeffs(t: np.ndarray, y: np.ndarray) -> tuple[float, float, float, str, int]:
    """``(a, b, c)``, the form kept and its number of parameters (docs/calibration.md)."""
    one = np.ones_like(t)
    a, b, k = _lstsq([t * t, t, one], y)
    form, params = "a*T^2 + b*T + c", 3
    if a < 0 or b < 0:  # a concave or decreasing fit extrapolates badly: the linear one
        a, (b, k) = 0.0, _lstsq([t, one], y)
        form, params = "b*T + c (the quadratic fit was not convex and increasing)", 2
    if b < 0:
        a, b, k = 0.0, 0.0, float(np.median(y))
        form, params = "c (TTFT did not grow with uncached tokens)", 1
    return float(a), float(b), float(k), form, params


def fit_prefill(samples: list[Sample]) -> tuple[tuple[float, float, float], dict[str, Any]]:
    """``(a, b, c)`` of the prefill polynomial and its error report."""
    alone, late = [], 0
    for s, busy in zip(samples, overlapped(samples), strict=True):
        if not busy:
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
    y = np.array([s.ttft_ms for s in alone])
    one = np.ones_like(t)
    a, b, k, form, params = _prefill_coeffs(t, y)
    pred = a * t * t + b * t + k

    def without(i: int) -> float:
        keep = np.arange(t.size) != i
        a_, b_, k_, *_ = _prefill_coeffs(t[keep], y[keep])
        return a_ * t[i] * t[i] + b_ * t[i] + k_

    held = _held_out(t.size, params, without, y)
    with_cached = _lstsq([t * t, t, c, one], y)
    errors = _errors(pred, y)
    report = {
        "form": form,
        "coeffs": [float(a), float(b), float(k)],
        "first_token_with_the_rest": late,
        "uncached_tokens_range": [float(t.min()), float(t.max())],
        "cached_tokens_range": [float(c.min()), float(c.max())],
        **errors,
        "held_out": held,
        "stated_error": _stated(errors["median_abs_pct_error"], held),
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
    and its request's index (docs/calibration.md, "decode")."""
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


def _decode_coeffs(gap: np.ndarray, batch: np.ndarray, u: np.ndarray, owner: np.ndarray,
                   reqs: np.ndarray) -> tuple[float, float, float, float, float, int]:
    """``(a, b, c, s, floor)`` from the gaps of the requests ``reqs`` (one observation per
    request: its mean gap) and the number of coefficients fitted (the floor, a percentile
    of the means, not counted)."""
    counts = np.bincount(owner)[reqs]

    def per_request(v: np.ndarray) -> np.ndarray:
        return np.bincount(owner, weights=v)[reqs] / counts

    y, mu, mu2, mb = per_request(gap), per_request(u), per_request(u * u), per_request(batch)
    one = np.ones_like(y)
    quadratic = float(u.max() - u.min()) > QUADRATIC_SPAN
    cols = [mu2, mu] if quadratic else [mu]
    seq = 0.0
    varied = float(batch.max() - batch.min()) >= 1
    if varied:  # the batch varied: its own term
        *coef, seq, c = _lstsq([*cols, mb, one], y)
    if seq <= 0 or not varied:
        seq, (*coef, c) = 0.0, _lstsq([*cols, one], y)
    a, b = (coef[0], coef[1]) if quadratic else (0.0, coef[0])
    params = len(cols) + 1 + (seq > 0)
    if a < 0 or b < 0:  # a step that gets cheaper with more KV: noise, so no KV term
        a = b = 0.0
        if seq > 0:
            seq, c = _lstsq([mb, one], y)
        if seq <= 0:
            seq, c = 0.0, float(np.median(y))
        params = 1 + (seq > 0)
    floor = float(np.percentile(y, 5))
    return float(a), float(b), float(c), float(seq), floor, int(params)


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

    y, mkv = per_request(gap), per_request(kv)
    mb = per_request(batch)
    one = np.ones_like(y)
    quadratic = float(u.max() - u.min()) > QUADRATIC_SPAN
    a, b, c, seq, floor, params = _decode_coeffs(gap, batch, u, owner, reqs)
    per_gap = np.maximum(floor, a * u * u + b * u + c + seq * batch)
    pred = per_request(per_gap)

    def without(i: int) -> float:
        keep = owner != reqs[i]
        a_, b_, c_, s_, f_, _ = _decode_coeffs(gap[keep], batch[keep], u[keep], owner[keep],
                                              np.delete(reqs, i))
        mine = ~keep
        return float(np.maximum(f_, a_ * u[mine] ** 2 + b_ * u[mine] + c_
                                + s_ * batch[mine]).mean())

    held = _held_out(reqs.size, params, without, y)
    errors = _errors(pred, y)
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
        **errors,
        "held_out": held,
        "stated_error": _stated(errors["median_abs_pct_error"], held),
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
    """Fit the cost model from the runs in ``run_dirs``; ``base``: the real server's knobs
    that are not fitted (``block_size`` defaults to the runs' detected one)."""
    from workbench.storage.rundir import load

    if not run_dirs:
        raise ConfigError("calibrate needs at least one run directory")
    results = [load(d) for d in run_dirs]
    found = [s for r in results for s in read_samples(r.records)]
    if not found:
        raise ConfigError(f"no ok request with token times in {', '.join(map(str, run_dirs))}")
    knobs = dict(base or {})
    detected = {int(b) for r in results if (b := r.manifest.block_size) is not None}
    if "block_size" not in knobs and len(detected) == 1:
        knobs["block_size"] = detected.pop()
    cfg = EngineConfig.from_knobs(**knobs)
    prefill, prefill_report = fit_prefill(found)
    decode, floor, decode_report = fit_decode(found, cfg.capacity_tokens)
    knobs.update(prefill_coeffs=list(prefill), decode_coeffs=list(decode), decode_floor_ms=floor,
                 decode_seq_ms=decode_report["seq_ms"])  # fmt: skip
    EngineConfig.from_knobs(**knobs)  # the result must be a valid engine
    split_report = fit_split(results, knobs)
    fit: dict[str, Any] = {
        "runs": [str(r.run_dir) for r in results],
        "requests": len(found),
        "prefill": prefill_report,
        "decode": decode_report,
        "lone_constant": split_report,
    }
    cal = Calibration(knobs, fit)
    if self_check:
        fit["replay"] = [predict(r.run_dir or "", cal.engine) for r in results]
    return cal
