"""Distribution statistics of one metric: mean, linear percentiles, min, max, count.

Percentiles are linear at ``q·(n−1)`` over the finite values (docs/metrics.md, "Per
run"); ``itl_ms`` pools every gap of every selected request (``describe_metric``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from workbench.metrics.columns import Columns

#: the percentiles ``describe`` gives (``summary.json``'s latency blocks)
QS: tuple[float, ...] = (50, 90, 99)
STAT_KEYS: tuple[str, ...] = ("mean", *(f"p{q:g}" for q in QS), "min", "max", "count")


#: the confidence a "held" or "met" verdict's evidence is held to (``support``)
EVIDENCE_LEVEL = 0.95


def support(q: float, level: float = EVIDENCE_LEVEL, misses: int = 0) -> int | None:
    """The fewest values that can show a ``q``-th percentile below a limit (equally: that a
    share ``q`` % of requests attained it) at ``level`` confidence: the smallest n with
    ``(q/100)^n <= 1 − level``. With fewer, even the largest of the n values is no
    one-sided ``level`` upper confidence bound on the percentile (order statistics,
    distribution-free): p50 5, p90 29, p99 299. With ``misses`` of the n values above the
    limit, the smallest n with P(Binomial(n, 1 − q/100) <= misses) <= 1 − level (the same
    bound, the largest but ``misses`` values in place of the largest): a share of 99 % with
    1 miss needs 473, with 3 needs 773. None for q >= 100: no sample size shows a maximum
    (docs/metrics.md, "Evidence")."""
    if q >= 100:
        return None
    if q <= 0:
        return 1 + max(0, misses)
    if misses <= 0:
        return max(1, math.ceil(math.log(1 - level) / math.log(q / 100) - 1e-9))
    p = 1 - q / 100
    hi = misses + 1
    while _binomial_cdf(misses, hi, p) > 1 - level:
        hi *= 2
    lo = hi // 2  # the cdf falls as n grows: the smallest n in (lo, hi] where it is small
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _binomial_cdf(misses, mid, p) <= 1 - level else (mid, hi)
    return hi


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in log space (n up to millions, p small)."""
    if k >= n:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def resolution(q: float) -> int | None:
    """The fewest values of which at least one lies above the ``q``-th percentile's rank:
    ``ceil(100 / (100 − q))``, p50 2, p90 10, p99 100. Over fewer, the percentile is read
    off the largest values (linear at ``q·(n−1)``: between the two largest), so a
    headline gives the maximum in its place (docs/metrics.md, "Headline"). None for
    q >= 100 (a maximum is always resolved)."""
    if q >= 100:
        return None
    return max(1, math.ceil(100 / (100 - q) - 1e-9))


def finite(values: Iterable[float | None]) -> np.ndarray:
    """The finite values as a float array (None, NaN and ±inf dropped)."""
    if isinstance(values, np.ndarray):
        arr = values.astype(float, copy=False)
    else:
        arr = np.asarray([v for v in values if v is not None], dtype=float)
    ok = np.isfinite(arr)
    return arr if ok.all() else arr[ok]


def quantiles(arr: np.ndarray, qs: Sequence[float], *, scratch: bool = False) -> list[float]:
    """The one percentile of the package: linear at ``q·(n−1)`` (numpy's default) over
    finite ``arr`` (non-empty). ``scratch``: ``arr`` may be reordered in place."""
    return [float(p) for p in np.percentile(arr, list(qs), overwrite_input=scratch)]


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The ``q``-th percentile of the finite values (``quantiles``), None when there are none."""
    arr = finite(values)
    return quantiles(arr, (q,))[0] if arr.size else None


def describe(values: Iterable[float], *, scratch: bool = False) -> dict[str, float | int | None]:
    """mean/p50/p90/p99/min/max/count of the finite values; None when there are none.
    ``scratch``: ``values`` is an array nobody keeps (reordered in place, not copied)."""
    arr = finite(values)
    if arr.size == 0:
        return {**dict.fromkeys(STAT_KEYS[:-1]), "count": 0}
    mean, lo, hi = float(arr.mean()), float(arr.min()), float(arr.max())  # before any reorder
    pcts = quantiles(arr, QS, scratch=scratch)
    return {
        "mean": mean,
        **{f"p{q:g}": p for q, p in zip(QS, pcts, strict=True)},
        "min": lo,
        "max": hi,
        "count": int(arr.size),
    }


def metric_values(cols: Columns, col: str) -> np.ndarray:
    """A metric's values over the rows of ``cols``; ``itl_ms`` pools every gap."""
    if col == "itl_ms":
        gaps = cols.gaps()
        return gaps if gaps is not None else np.empty(0)
    return cols.floats(col)


def sample(cols: Columns | object, metric: str) -> np.ndarray:
    """The finite values of ``metric`` over the rows of ``cols`` (a ``Columns`` or anything
    ``Columns.of`` takes, e.g. a frame of ok rows); ``itl_ms`` pools every gap."""
    return finite(metric_values(Columns.of(cols), metric))


def describe_metric(cols: Columns, col: str) -> dict[str, float | int | None]:
    """``describe`` of a metric over the rows of ``cols`` (see module docstring for ITL)."""
    if col == "itl_ms" and (gaps := cols.gaps()) is not None:
        return describe(gaps, scratch=True)  # the mean, min, max do not depend on order
    if col != "itl_ms":
        return describe(metric_values(cols, col))
    n, has = cols.ints("itl_count")
    some = has & (n > 0)
    if not some.any():
        return describe(np.empty(0))
    total = float(cols.floats("itl_sum_ms")[some].sum())
    count = int(n[some].sum())
    return {"mean": total / count, **{f"p{q:g}": None for q in QS},
            "min": float(np.nanmin(cols.floats("itl_min_ms")[some])),
            "max": float(np.nanmax(cols.floats("itl_max_ms")[some])), "count": count}  # fmt: skip
