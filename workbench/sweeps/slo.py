"""Service-level objectives of a sweep: percentile bounds on latency metrics.

An ``SLO`` is a list of ``Bound`` (metric, percentile, limit in ms), e.g.
``ttft_ms p90 <= 2000`` and ``tpot_ms p90 <= 50``, plus ``min_ok``: the share of
requests that must finish ok (default 0.99: "with >= 99 % attained"). A point
holds the SLO when every bound holds on its ok requests and enough of its
requests finished ok. Percentiles interpolate linearly at ``q·(n−1)`` over the ok
requests, the convention of ``workbench.metrics.summary`` (docs/sweeps.md).

Text form (the command line): ``ttft_ms:p90<=2000``; ``ok>=0.99`` sets ``min_ok``.
Mapping form (a config file, a notebook): ``{"ttft_ms:p90": 2000, "ok": 0.99}``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench.errors import ConfigError

#: per-request latency columns of ``workbench.metrics.to_frame`` a bound may name
LATENCY_COLUMNS: tuple[str, ...] = (
    "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "terminal_tail_ms",
    "completion_amortized_tpot_ms", "arrival_release_lag_ms", "admission_lag_ms",
)  # fmt: skip
_TEXT = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*p(\d+(?:\.\d+)?)\s*<=\s*([0-9.eE+-]+)\s*$")
_OK = re.compile(r"^\s*ok\s*>=\s*([0-9.eE+-]+)\s*$")
DEFAULT_MIN_OK = 0.99


@dataclass(frozen=True)
class Bound:
    """``metric`` at percentile ``q`` must be ``<= limit`` (milliseconds)."""

    metric: str
    q: float
    limit: float

    @property
    def key(self) -> str:
        return f"{self.metric}:p{self.q:g}"

    def __str__(self) -> str:
        return f"{self.key}<={self.limit:g}"


@dataclass(frozen=True)
class SLO:
    bounds: tuple[Bound, ...] = ()
    min_ok: float = DEFAULT_MIN_OK

    # -- construction -------------------------------------------------------------------
    @classmethod
    def parse(cls, spec: SLO | Mapping[str, Any] | Iterable[str] | str | None) -> SLO | None:
        """An SLO from its text or mapping form (None stays None); errors name the rule."""
        if spec is None or isinstance(spec, SLO):
            return spec
        if isinstance(spec, str):
            spec = [s for s in re.split(r"[,;]", spec) if s.strip()]
        bounds: list[Bound] = []
        min_ok = DEFAULT_MIN_OK
        if isinstance(spec, Mapping):
            items = list(spec.items())
        else:
            items = []
            for text in spec:
                m_ok = _OK.match(text)
                if m_ok:
                    items.append(("ok", m_ok.group(1)))
                    continue
                m = _TEXT.match(text)
                if not m:
                    raise ConfigError(
                        f"SLO {text!r} is invalid; write METRIC:pQ<=LIMIT_MS (e.g. "
                        "ttft_ms:p90<=2000) or ok>=FRACTION (e.g. ok>=0.99)"
                    )
                items.append((f"{m.group(1)}:p{m.group(2)}", m.group(3)))
        for key, value in items:
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"SLO {key!r}: {value!r} is not a number") from None
            if key == "ok":
                if not 0 <= number <= 1:
                    raise ConfigError(f"SLO ok must be a fraction in [0, 1], got {number}")
                min_ok = number
                continue
            metric, sep, pct = str(key).partition(":")
            if not sep or not pct.startswith("p"):
                raise ConfigError(
                    f"SLO key {key!r} is invalid; write METRIC:pQ (e.g. 'ttft_ms:p90') or 'ok'"
                )
            if metric not in LATENCY_COLUMNS:
                raise ConfigError(
                    f"SLO metric {metric!r} is unknown; valid: {', '.join(LATENCY_COLUMNS)}"
                )
            try:
                q = float(pct[1:])
            except ValueError:
                raise ConfigError(f"SLO {key!r}: percentile {pct!r} is not pNN") from None
            if not 0 < q <= 100 or not number > 0:
                raise ConfigError(f"SLO {key!r}: need 0 < percentile <= 100 and limit > 0")
            bounds.append(Bound(metric, q, number))
        if not bounds:
            raise ConfigError("an SLO needs at least one bound, e.g. ttft_ms:p90<=2000")
        return cls(tuple(bounds), min_ok)

    def to_dict(self) -> dict[str, float]:
        return {**{b.key: b.limit for b in self.bounds}, "ok": self.min_ok}

    def __str__(self) -> str:
        return " and ".join([*map(str, self.bounds), f"ok>={self.min_ok:g}"])

    # -- evaluation ---------------------------------------------------------------------
    def evaluate(self, frame: pd.DataFrame) -> dict[str, Any]:
        """Observed value of every bound over one run's requests (``to_frame`` rows)."""
        n = len(frame)
        ok = frame[frame["status"] == "ok"] if n else frame
        values = {b.key: percentile(ok, b.metric, b.q) for b in self.bounds}
        ok_rate = len(ok) / n if n else None
        good = goodput_mask(frame, self) if n else None
        return {
            "values": values,
            "ok_rate": ok_rate,
            "good_requests": int(good.sum()) if good is not None else 0,
        }

    def verdict(self, values: Mapping[str, float | None], ok_rate: float | None) -> dict[str, Any]:
        """Held or not, and the worst ratio observed/limit (> 1 breaks the bound)."""
        ratios: dict[str, float] = {}
        for b in self.bounds:
            v = values.get(b.key)
            ratios[b.key] = math.inf if v is None or math.isnan(v) else v / b.limit
        ok_held = ok_rate is not None and ok_rate >= self.min_ok
        worst = max(ratios.values()) if ratios else 0.0
        return {
            "held": bool(ok_held and worst <= 1.0),
            "worst_ratio": worst,
            "ratios": ratios,
            "ok_held": ok_held,
        }


def percentile(ok: pd.DataFrame, metric: str, q: float) -> float | None:
    """The ``q``-th percentile of ``metric`` over ok rows (``itl_ms`` pools every gap)."""
    if ok.empty or metric not in ok:
        return None
    col = ok[metric]
    flat = [g for gaps in col for g in gaps] if metric == "itl_ms" else col.tolist()
    arr = np.asarray([v for v in flat if v is not None], dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.percentile(arr, q)) if arr.size else None


def goodput_mask(frame: pd.DataFrame, slo: SLO) -> pd.Series:
    """Requests that are ok and individually within every bound's limit (goodput's numerator).

    Per request the percentile has no meaning, so the limit applies to the request's
    own value (its TTFT, its TPOT, its worst inter-token gap), as DistServe's and
    vLLM's goodput count requests.
    """
    good = frame["status"] == "ok"
    for metric in {b.metric for b in slo.bounds}:
        limit = min(b.limit for b in slo.bounds if b.metric == metric)
        if metric not in frame:
            return good & False
        col = frame[metric]
        if metric == "itl_ms":
            vals = col.map(lambda gaps: max(gaps) if isinstance(gaps, list) and gaps else 0.0)
        else:
            vals = pd.to_numeric(col, errors="coerce")
        good &= vals.notna() & (vals <= limit)
    return good
