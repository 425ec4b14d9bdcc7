"""Service-level objectives: one type and one grammar for runs and sweeps.

An ``SLO`` is a tuple of ``Bound`` (per-request, or a percentile over the ok requests)
plus ``min_ok``; the text and mapping forms, attainment, the verdict and goodput are
docs/sweeps.md's ("SLO"). A run config's ``slo`` keeps the mapping of its per-request
bounds (``per_request_mapping``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import workbench.catalogs.requests as catalog
from workbench.errors import ConfigError
from workbench.metrics.columns import Columns
from workbench.metrics.distribution import percentile, sample, support
from workbench.plurals import noun

if TYPE_CHECKING:
    import pandas as pd

_PCT = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*p(\d+(?:\.\d+)?)\s*<=\s*([0-9.eE+-]+)\s*$")
_REQ = re.compile(r"^\s*([a-z0-9_]+)\s*(?:<=|=)\s*([0-9.eE+-]+)\s*$")
_OK = re.compile(r"^\s*ok\s*>=\s*([0-9.eE+-]+)\s*$")
DEFAULT_MIN_OK = 0.99
GRAMMAR = ("METRIC<=LIMIT_MS (e.g. ttft_ms<=2000), METRIC:pQ<=LIMIT_MS (e.g. ttft_ms:p90<=2000) "
           "or ok>=FRACTION (e.g. ok>=0.99)")


@dataclass(frozen=True)
class Bound:
    """``metric`` (at percentile ``q``; None: each request's own value) ``<= limit`` ms."""

    metric: str
    q: float | None
    limit: float

    @property
    def key(self) -> str:
        return self.metric if self.q is None else f"{self.metric}:p{self.q:g}"

    def __str__(self) -> str:
        return f"{self.key}<={self.limit:g}"


def _items(spec: Mapping[str, Any] | Iterable[str] | str) -> list[tuple[str, Any]]:
    """(key, value) pairs of any form; a text item that fits no rule raises, naming it (and,
    of a list of items, its place: ``ConfigError.field`` ``slo[i]``)."""
    if isinstance(spec, Mapping):
        return [(str(k), v) for k, v in spec.items()]
    listed = not isinstance(spec, str)
    if isinstance(spec, str):
        spec = [s for s in re.split(r"[,;]", spec) if s.strip()]
    items: list[tuple[str, Any]] = []
    for i, text in enumerate(spec):
        if m := _OK.match(text):
            items.append(("ok", m.group(1)))
        elif m := _PCT.match(text):
            items.append((f"{m.group(1)}:p{m.group(2)}", m.group(3)))
        elif m := _REQ.match(text):
            items.append((m.group(1), m.group(2)))
        else:
            raise ConfigError(f"SLO {text!r} is invalid; write {GRAMMAR}",
                              field=f"slo[{i}]" if listed else None)
    return items


def _bound(key: str, number: float) -> Bound:
    metric, sep, pct = key.partition(":")
    if sep and not pct.startswith("p"):
        raise ConfigError(f"SLO key {key!r} is invalid; write METRIC, METRIC:pQ or 'ok'")
    if metric not in catalog.SLO_ABLE:
        raise ConfigError(f"SLO metric {metric!r} is unknown; valid: {', '.join(catalog.SLO_ABLE)}")
    q: float | None = None
    if sep:
        try:
            q = float(pct[1:])
        except ValueError:
            raise ConfigError(f"SLO {key!r}: percentile {pct!r} is not pNN") from None
        if not 0 < q <= 100:
            raise ConfigError(f"SLO {key!r}: need 0 < percentile <= 100 and limit > 0")
    if not number > 0:
        raise ConfigError(f"SLO {key!r}: need 0 < percentile <= 100 and limit > 0")
    return Bound(metric, q, number)


@dataclass(frozen=True)
class SLO:
    bounds: tuple[Bound, ...] = ()
    min_ok: float = DEFAULT_MIN_OK

    @classmethod
    def parse(cls, spec: SLO | Mapping[str, Any] | Iterable[str] | str | None) -> SLO | None:
        """An SLO from its text or mapping form (None stays None); errors name the rule."""
        if spec is None or isinstance(spec, SLO):
            return spec
        bounds: list[Bound] = []
        min_ok = DEFAULT_MIN_OK
        for key, value in _items(spec):
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"SLO {key!r}: {value!r} is not a number") from None
            if key == "ok":
                if not 0 <= number <= 1:
                    raise ConfigError(f"SLO ok must be a fraction in [0, 1], got {number}")
                min_ok = number
            else:
                bounds.append(_bound(key, number))
        if not bounds:
            raise ConfigError("an SLO needs at least one bound, e.g. ttft_ms:p90<=2000")
        return cls(tuple(bounds), min_ok)

    @property
    def per_request(self) -> tuple[Bound, ...]:
        return tuple(b for b in self.bounds if b.q is None)

    @property
    def percentile_bounds(self) -> tuple[Bound, ...]:
        return tuple(b for b in self.bounds if b.q is not None)

    def per_request_mapping(self) -> dict[str, float]:
        """``{metric: limit}`` of the per-request bounds: a run config's ``slo``."""
        return {b.metric: b.limit for b in self.per_request}

    def to_dict(self) -> dict[str, float]:
        return {**{b.key: b.limit for b in self.bounds}, "ok": self.min_ok}

    def __str__(self) -> str:
        return " and ".join([*map(str, self.bounds), f"ok>={self.min_ok:g}"])

    def evaluate(self, data: pd.DataFrame | Columns) -> dict[str, Any]:
        """Observed value of every bound over one run's rows (a frame, or ``Columns``): a
        percentile over the ok requests, or the share of all requests that attained it."""
        cols = Columns.of(data)
        n = len(cols)
        ok = cols.where(cols.equals("status", "ok")) if n else cols
        values = {b.key: ok_percentile(ok, b.metric, b.q) if b.q is not None
                  else (float(attained(cols, [b])[0].mean()) if n else None)
                  for b in self.bounds}  # fmt: skip
        # goodput: each request's own value within every limit (docs/sweeps.md, "SLO")
        per_request = [Bound(b.metric, None, b.limit) for b in self.bounds]
        return {
            "values": values,
            "ok_rate": len(ok) / n if n else None,
            "requests": n,
            "ok_requests": len(ok),
            "good_requests": int(attained(cols, per_request)[0].sum()) if n else 0,
        }

    def ratio(self, bound: Bound, value: float | None) -> float:
        """How far ``value`` is from breaking ``bound`` (> 1 breaks it): observed/limit for a
        percentile bound, ``min_ok``/share attained for a per-request bound."""
        if value is None or math.isnan(value):
            return math.inf
        if bound.q is not None:
            return value / bound.limit
        return self.min_ok / value if value > 0 else math.inf

    def verdict(self, values: Mapping[str, float | None], ok_rate: float | None,
                requests: float | None = None, ok_requests: float | None = None
                ) -> dict[str, Any]:
        """Held or not, and the worst ratio (> 1 breaks the bound, ``ratio``); given the
        counts it was taken over, ``thin``: the bounds too few requests stand behind
        (``evidence``)."""
        ratios = {b.key: self.ratio(b, values.get(b.key)) for b in self.bounds}
        ok_held = ok_rate is not None and ok_rate >= self.min_ok
        worst = max(ratios.values()) if ratios else 0.0
        out: dict[str, Any] = {
            "held": bool(ok_held and worst <= 1.0),
            "worst_ratio": worst,
            "ratios": ratios,
            "ok_held": ok_held,
        }
        unmeasured = [b.key for b in self.bounds
                      if (v := values.get(b.key)) is None or math.isnan(v)]
        if unmeasured:  # no value to judge: not held, and not broken either
            out["unmeasured"] = unmeasured
        if requests is not None:
            out["requests"] = requests
            out["ok_requests"] = ok_requests
            out["thin"] = self.evidence(requests, ok_requests)
        return out

    def spread(self, repeats: Sequence[Mapping[str, Any]], pooled: Mapping[str, Any]
               ) -> dict[str, Any]:
        """How repeats of one point disagree: ``held``/``of`` (repeats whose own verdict
        held, of all) when some held and some broke, and ``spans`` ``{key: [lo, hi,
        limit]}`` for each bound whose pooled 95 % interval (``KEY_lo``/``KEY_hi``) has
        the limit inside it; ``{}`` when the repeats agree (docs/sweeps.md, "SLO")."""
        out: dict[str, Any] = {}
        held = [self.verdict({b.key: r.get(f"slo:{b.key}") for b in self.bounds},
                             r.get("ok_rate"))["held"] for r in repeats]
        if 0 < sum(held) < len(held):
            out.update(held=sum(held), of=len(held))
        spans = {}
        for b in self.bounds:
            lo, hi = pooled.get(f"slo:{b.key}_lo"), pooled.get(f"slo:{b.key}_hi")
            line = b.limit if b.q is not None else self.min_ok
            if lo is not None and hi is not None and lo <= line <= hi and lo < hi:
                spans[b.key] = [lo, hi, line]
        if spans:
            out["spans"] = spans
        return out

    def evidence(self, requests: float, ok_requests: float | None) -> dict[str, dict[str, Any]]:
        """``{key: {"n": count, "needed": support}}`` for every part of the verdict whose
        count is too small to show it holds at 95 % confidence (``distribution.support``):
        a percentile bound over its ok requests, a per-request bound over every request at
        the share ``min_ok``. ``ok>=F`` itself counts failures, not a percentile: not
        judged (docs/metrics.md, "Evidence")."""
        share = support(100 * self.min_ok)
        parts = [(b.key, ok_requests if b.q is not None else requests,
                  support(b.q) if b.q is not None else share) for b in self.bounds]
        return {key: {"n": n, "needed": needed, **({} if ":" in key else {"share": self.min_ok})}
                for key, n, needed in parts if n is not None and (needed is None or n < needed)}


def run_slo(spec: Mapping[str, Any], where: str = "slo") -> dict[str, float]:
    """A run config's ``slo`` checked against the grammar: ``{metric: ms}`` per-request
    bounds of SLO-able metrics (percentile bounds and ``ok`` are a sweep's verdict)."""
    unknown = sorted(set(spec) - set(catalog.SLO_ABLE))
    if unknown:
        raise ConfigError(f"{where}: unknown {noun(len(unknown), 'metric')} {unknown}; valid: "
                          f"{', '.join(catalog.SLO_ABLE)} (a run bounds each request, "
                          "METRIC<=MS; percentile bounds and ok>=F are a sweep's)")
    parsed = SLO.parse(spec)
    return parsed.per_request_mapping() if parsed is not None else {}


def ok_percentile(ok: pd.DataFrame | Columns, metric: str, q: float | None) -> float | None:
    """The ``q``-th percentile of ``metric`` over ok rows (``itl_ms`` pools every gap)."""
    if q is None or not len(ok):
        return None
    if isinstance(ok, Columns):
        if metric != "itl_ms" and not ok.has(metric):
            return None
    elif metric not in ok:
        return None
    return percentile(sample(ok, metric), q)


def request_values(cols: Columns, metric: str) -> np.ndarray:
    """Each request's own value of ``metric`` (the catalog's ``per_request`` column; a list
    metric's requests without an element count as 0: nothing in them breaks a bound)."""
    row = catalog.get(metric)
    if row is None:
        raise ConfigError(f"SLO metric {metric!r} is unknown; valid: {', '.join(catalog.SLO_ABLE)}")
    values = cols.floats(row.per_request)
    if row.kind == "list":
        count, has = cols.ints("itl_count")
        values = np.where(has & (count == 0), 0.0, values)
    return values


def attained(cols: Columns, bounds: Iterable[Bound]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Rows that are ok and within every per-request bound (a metric bounded twice: the
    tighter), and each bound's own mask; unmeasured values count against."""
    ok = cols.equals("status", "ok")
    joint = ok.copy()
    per: dict[str, np.ndarray] = {}
    for b in bounds:
        with np.errstate(invalid="ignore"):
            meets = ok & ~np.isnan(v := request_values(cols, b.metric)) & (v <= b.limit)
        per[b.metric] = per[b.metric] & meets if b.metric in per else meets
        joint &= meets
    return joint, per
