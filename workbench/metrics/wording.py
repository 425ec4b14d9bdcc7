"""How numbers and a capacity are worded, the same in the CLI, reports, the index and plans.

The capacity's definition: docs/sweeps.md, "Capacity".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import workbench.catalogs.requests as catalog
from workbench.metrics.distribution import resolution
from workbench.metrics.slo import DEFAULT_MIN_OK
from workbench.plurals import counted

#: below this share of the offered request rate, a capacity's sentence warns
DELIVERED_WARN_SHARE = 0.8


def sig(v: Any, digits: int = 3) -> str:
    """``v`` with ``digits`` significant figures; whole numbers (and anything ≥ 10^digits
    / 10) as integers, no exponent; missing or NaN as a dash."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return "–"
    x = float(v)
    if not math.isfinite(x):
        return "–"
    if x == int(x) or abs(x) >= 10 ** (digits - 1):
        return str(round(x))
    return f"{x:.{digits}g}"


def beside(value: float, bound: float, digits: int = 1, scale: float = 1.0) -> str:
    """``value × scale`` with ``digits`` decimals, more when fewer would print it as the
    bound it was judged against (a p99 of 10.04 ms over a 10 ms bound is ``10.04``, not
    ``10.0``; a CPU share of 0.8996 under 0.9 is ``89.96``, not ``90``), so a verdict's
    number never reads as the other side of its bound."""
    v, b = value * scale, bound * scale
    text = f"{v:.{digits}f}"
    while v != b and float(text) == round(b, digits) and digits < 9:
        digits += 1
        text = f"{v:.{digits}f}"
    return text


def unresolved_phrase(qs: Iterable[float], n: int, what: str = "request") -> str:
    """``"p99 of 10 requests"``, ``"p90, p99 of 5 requests"``: the percentiles of ``qs``
    that ``n`` values cannot resolve (fewer than ``distribution.resolution``: read off the
    largest ones, where a run's headline gives the max), with the count; ``""`` when
    ``n`` resolves them all or is 0 (docs/metrics.md, "Headline")."""
    few = [f"p{q:g}" for q in qs if 0 < n < (resolution(q) or 0)]
    return f"{', '.join(few)} of {counted(n, what)}" if few else ""


def _limit(ms: float) -> str:
    return f"{sig(ms / 1000)} s" if ms >= 1000 else f"{sig(ms)} ms"


def within_phrase(metric: str, limit_ms: float) -> str:
    """``"TTFT ≤ 2 s"``: a metric within a limit, the one wording of a bound's limit in
    every headline, verdict and column (a sweep's, a plan's, a run's)."""
    return f"{catalog.label(metric)} ≤ {_limit(float(limit_ms))}"


def slo_phrase(slo: Mapping[str, Any] | None) -> str:
    """``"TTFT p90 ≤ 2 s and TTFT ≤ 3 s per request"`` from an SLO mapping (``SLO.to_dict``:
    a sweep's, a plan's); its ``ok`` share, part of the verdict, is named when it is not
    the default 99 %: ``"... with at least 50 % of requests ok"``."""
    parts = []
    ok = None
    for key, limit in (slo or {}).items():
        metric, _, pct = key.partition(":")
        if key == "ok":
            ok = float(limit)
        elif pct:
            parts.append(within_phrase(metric, limit).replace(" ≤ ", f" {pct} ≤ ", 1))
        else:
            parts.append(f"{within_phrase(metric, limit)} per request")
    words = " and ".join(parts)
    if ok is not None and ok != DEFAULT_MIN_OK:
        share = f"at least {ok * 100:g} % of requests ok"
        words = f"{words} with {share}" if words else share
    return words


def bounds_phrase(bounds: Mapping[str, Any]) -> str:
    """``"TTFT ≤ 2 s, TPOT ≤ 50 ms"``: a run's per-request bounds (``summary["slo"]
    ["bounds"]``), as its headline's verdict and its table's attained row state them, each
    in ``within_phrase``'s words, as a sweep's and a plan's say it."""
    return ", ".join(within_phrase(k, v) for k, v in bounds.items())


def capacity_phrase(sustained_rps: Any, offered: str, *, at_least: bool = False) -> str:
    """``"capacity 1.81 req/s sustained, at 2.63 requests/s offered"`` (``offered``: that
    load in words); ``at_least``: the SLO held at every load tried."""
    return (f"capacity {'at least ' if at_least else ''}{sig(sustained_rps)} req/s sustained, "
            f"at {offered}")


def delivery_warning(sustained_rps: Any, offered_rps: float | None, *,
                     sessions: int | None = None, arrivals_s: float | None = None,
                     duration_s: Any = None) -> str:
    """`` WARNING: ...`` when the engine delivered under ``DELIVERED_WARN_SHARE`` of the
    offered request rate, else ``""``. With the point's ``sessions`` (units of several
    rounds), the span over which they arrive and the run's duration: when they all arrived
    in its first half, the run was too short, and the warning says so instead of naming
    both causes (docs/sweeps.md, "Capacity")."""
    if not isinstance(sustained_rps, int | float) or not offered_rps:
        return ""
    share = sustained_rps / offered_rps
    if share >= DELIVERED_WARN_SHARE:
        return ""
    head = (f" WARNING: the engine delivered {sig(sustained_rps)} of the {sig(offered_rps)} "
            f"req/s offered ({share * 100:.0f} %)")
    if (sessions and arrivals_s is not None and isinstance(duration_s, int | float)
            and arrivals_s < duration_s / 2):
        return (f"{head}. The run was too short for that rate: its "
                f"{counted(sessions, 'session')} arrive within about {sig(arrivals_s)} s of "
                f"its {sig(duration_s)} s, the rest is their later rounds finishing, so the "
                "delivered rate is set by how long the sessions last, not by the engine; "
                "replay more sessions (--max-items) to measure the engine.")
    return (f"{head}: it fell behind, or the run was too short for its ramp-up and drain to "
            "be negligible.")


def _part(key: str, n: float, needed: int | None, min_ok: float) -> str:
    metric, _, pct = key.partition(":")
    count = math.floor(n)
    if pct:
        what = f"{catalog.label(metric)} {pct} from {counted(count, 'ok request')}"
    else:
        what = (f"{catalog.label(metric)} within its bound in {min_ok * 100:g} % of "
                f"{counted(count, 'request')}")
    return f"{what} ({'no count shows a maximum' if needed is None else f'needs {needed}'})"


def thin_phrase(verdict: Mapping[str, Any] | None) -> str:
    """``"too few requests to show it at 95 % confidence: TTFT p99 from 3 ok requests
    (needs 299)"`` for a verdict whose ``thin`` names parts (``SLO.evidence``), else
    ``""`` (docs/metrics.md, "Evidence")."""
    thin = (verdict or {}).get("thin") or {}
    if not thin:
        return ""
    parts = [_part(k, v.get("n", 0), v.get("needed"), v.get("share", 0.99))
             for k, v in thin.items()]
    return "too few requests to show it at 95 % confidence: " + ", ".join(parts)


def spread_phrase(verdict: Mapping[str, Any] | None) -> str:
    """``"2 of 3 repeats held it; TTFT p90's 95 % interval 79.2–134 ms spans the bound 110
    ms"`` for a verdict whose repeats disagree (``SLO.spread``), else ``""``."""
    spread = (verdict or {}).get("spread") or {}
    parts = []
    if spread.get("of"):
        parts.append(f"{spread['held']} of {spread['of']} repeats held it")
    for key, (lo, hi, line) in (spread.get("spans") or {}).items():
        metric, _, pct = key.partition(":")
        if pct:
            parts.append(f"{catalog.label(metric)} {pct}'s 95 % interval {sig(lo)}–{sig(hi)} "
                         f"ms spans the bound {sig(line)} ms")
        else:
            parts.append(f"the share within {catalog.label(metric)}'s bound has a 95 % "
                         f"interval {sig(lo)}–{sig(hi)} that spans {sig(line)}")
    return "; ".join(parts)


def unmeasured_phrase(verdict: Mapping[str, Any] | None) -> str:
    """``"TPOT p90 not measured (no ok request had a value)"`` for a verdict some of whose
    bounds had no value (``SLO.verdict``'s ``unmeasured``), else ``""``."""
    keys = (verdict or {}).get("unmeasured") or []
    if not keys:
        return ""
    names = []
    for key in keys:
        metric, _, pct = key.partition(":")
        names.append(f"{catalog.label(metric)} {pct}".strip())
    return f"{', '.join(names)} not measured (no ok request had a value)"
