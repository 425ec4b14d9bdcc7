"""The headline: one line that answers "how did it go?" at a glance.

``run_headline(summary, manifest)`` for one run::

    303/303 ok · TTFT p50/p90/p99 48.2/95/210 ms · TPOT p50/p90/p99 6.11/6.28/12.5 ms
    · prefix hit 0.815 of 0.817 planned · 7.3 req/s · client OK · SLO met: ... ·
    simulated engine, 20× real time

and ``capacity_sentence(sweep)`` for a sweep ("At TTFT p90 ≤ 2 s: 2.75 requests/s
offered ..., 1.6 req/s delivered."), with a warning when the engine delivered less
than ``DELIVERED_WARN_SHARE`` of the offered load. The rules (what each verdict
means, the thresholds) are in docs/metrics.md, "Headline". The replay, compare and
sweep reports, the reports index, the CLI's end-of-run output and the panel all
print these strings, so they say the same thing everywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import workbench.metrics.catalog as catalog
from workbench.metrics.slo import DEFAULT_MIN_OK
from workbench.metrics.summary import NON_STREAMING_NOTE, NOT_STREAMED
from workbench.sweeps.store import Sweep

SEP = " · "
#: a run "meets" its per-request SLO when this share of its requests attained every
#: bound (failed requests count against): the sweeps' default ``ok>=0.99``
SLO_MET_SHARE = DEFAULT_MIN_OK
#: below this share of the offered request rate, a sweep's capacity sentence warns
DELIVERED_WARN_SHARE = 0.8
HEADLINE_MIME = "application/vnd.workbench.headline+json"  # render_report reads it (index)
HEADLINE_STYLE = ("font-size:1.05em;font-weight:600;border-left:4px solid #1f77b4;"
                  "padding:0.3em 0.8em;margin:0.4em 0;background:#f4f8fb")
METRIC_NAMES = {m.name: m.label for m in catalog.CATALOG}  # the catalog's labels
RATE_AXIS = "arrival.rate"


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


def _triple(stats: Any) -> str:
    s = stats if isinstance(stats, Mapping) else {}
    return "/".join(sig(s.get(k)) for k in ("p50", "p90", "p99"))


def engine_note(manifest: Mapping[str, Any] | None) -> str | None:
    """What times a simulated engine's numbers are in: ``"simulated engine, 20× real
    time"`` (``speedup`` divides every step time), ``"virtual time (simulated engine)"``;
    None for a real server."""
    m = manifest or {}
    target = m.get("target") or {}
    engine = target.get("engine") or m.get("engine") or (
        (m.get("config") or {}).get("target") or {}).get("engine") or {}
    speedup = engine.get("speedup", 1.0) if isinstance(engine, Mapping) else 1.0
    about = f", {sig(speedup)}× real time" if speedup not in (None, 1, 1.0) else ""
    preset = engine.get("preset") if isinstance(engine, Mapping) else None
    if preset:  # from what: the preset, and the error it states (docs/hardware.md)
        from workbench.sim.presets.stated import stated_error_brief

        about += f", preset {preset}: {stated_error_brief(str(preset))}"
    if m.get("mode") == "virtual":
        return f"virtual time (simulated engine{about})"
    url = ((m.get("config") or {}).get("target") or {}).get("url")
    if target.get("kind") == "sim" or url == "sim":
        return f"simulated engine{about}"
    return None


def _bounds_text(bounds: Mapping[str, Any]) -> str:
    return ", ".join(f"{METRIC_NAMES.get(k, k)} ≤ {sig(v)} ms" for k, v in bounds.items())


def slo_verdict(slo: Mapping[str, Any] | None) -> str | None:
    """``"SLO met: 303/303 within TTFT ≤ 2000 ms"`` (met: at least ``SLO_MET_SHARE``
    of the requests attained every bound); None when the run had no SLO."""
    if not slo or not slo.get("bounds"):
        return None
    share = slo.get("joint_attainment")
    met = share is not None and share >= SLO_MET_SHARE
    return (f"SLO {'met' if met else 'missed'}: {slo.get('attained')}/{slo.get('requests')} "
            f"within {_bounds_text(slo['bounds'])}")


def client_verdict(summary: Mapping[str, Any]) -> str | None:
    """``client OK`` / ``client LIMITED (why)`` from the run's self-measurement."""
    client = summary.get("client")
    if not client:
        return None
    if client.get("client_bottleneck"):
        reasons = [r.replace("(", "").replace(")", "")  # "p99 15.2 ms > 10 ms", flat
                   for r in client.get("client_bottleneck_reasons") or []]
        return f"client LIMITED: {'; '.join(reasons)}" if reasons else "client LIMITED"
    return "client OK"


def _prefix(summary: Mapping[str, Any]) -> str | None:
    actual, planned = summary.get("actual_prefix_hit_rate"), summary.get("planned_prefix_hit_rate")
    if not summary.get("ok") or (actual is None and planned is None):
        return None
    text = "prefix hit " + ("unknown (no cached counts)" if actual is None else f"{actual:.3f}")
    return text + (f" of {planned:.3f} planned" if planned is not None else "")


def run_headline(summary: Mapping[str, Any], manifest: Mapping[str, Any] | None = None) -> str:
    """One line for a run: requests ok/total, TTFT and TPOT p50/p90/p99, actual against
    planned prefix hit rate, request throughput, the client's verdict (or virtual
    time), the SLO verdict when the run had an SLO, and the simulated engine's speed."""
    status = summary.get("run_status")
    whole = summary.get("response_mode") is not None  # non-streaming: TTFT = E2E, no TPOT
    parts: list[str | None] = [
        f"INCOMPLETE ({status})" if status not in (None, "completed") else None,
        f"{summary.get('ok', 0)}/{summary.get('requests', 0)} ok",
        f"TTFT p50/p90/p99 {_triple(summary.get('ttft_ms'))} ms"
        + (f" ({NON_STREAMING_NOTE})" if whole else ""),
        f"TPOT {NOT_STREAMED}" if whole
        else f"TPOT p50/p90/p99 {_triple(summary.get('tpot_ms'))} ms",
        _prefix(summary),
        f"{sig(summary.get('request_throughput_rps'))} req/s",
        client_verdict(summary),
        slo_verdict(summary.get("slo")),
        engine_note(manifest),
    ]
    return SEP.join(p for p in parts if p)


# -- sweeps ---------------------------------------------------------------------------------
def _limit(ms: float) -> str:
    return f"{sig(ms / 1000)} s" if ms >= 1000 else f"{sig(ms)} ms"


def slo_phrase(slo: Mapping[str, Any] | None) -> str:
    """``"TTFT p90 ≤ 2 s and TPOT p90 ≤ 50 ms"`` from a sweep's SLO mapping."""
    parts = []
    for key, limit in (slo or {}).items():
        metric, _, pct = key.partition(":")
        if pct:
            parts.append(f"{METRIC_NAMES.get(metric, metric)} {pct} ≤ {_limit(float(limit))}")
    return " and ".join(parts)


def sweep_rounds_per_unit(sweep: Sweep) -> float | None:
    """Requests per unit of the sweep's plan (from its first run's manifest): 1 for
    independent requests, the mean rounds of a session otherwise."""
    from pathlib import Path

    from workbench.storage.rundir import read_json

    for run_dir in sweep.run_dirs:
        try:
            plan = read_json(Path(run_dir) / "manifest.json").get("plan") or {}
        except (OSError, ValueError):
            continue
        if plan.get("units"):
            return float(plan["rounds"]) / float(plan["units"])
    return None


def _ordered(sweep: Sweep, axis: str) -> list[Mapping[str, Any]]:
    """Finished points with a numeric value on ``axis``, in load order."""
    done = [p for p in sweep.points if p.get("status") == "done"
            and isinstance((p.get("params") or {}).get(axis), int | float)]
    return sorted(done, key=lambda p: (p["params"][axis], p["index"]))


def capacity_point(sweep: Sweep, axis: str) -> tuple[Mapping[str, Any] | None, str]:
    """The point the capacity sits at and how it was found ("found by search", "the
    highest point that held", "above", "below")."""
    pts = _ordered(sweep, axis)
    cap = sweep.capacity
    if cap and cap.get("value") is not None and cap.get("status") == "found":
        at = [p for p in pts if p["params"][axis] == cap["value"]]
        return (at[-1] if at else None), "found by search"
    held = [bool((p.get("slo") or {}).get("held")) for p in pts]
    if pts and not held[0]:
        return pts[0], "below"
    if pts and all(held):
        return pts[-1], "above"
    first_broken = held.index(False) if False in held else len(pts)
    return (pts[first_broken - 1] if first_broken else None), "the highest point that held"


def capacity_sentence(sweep: Sweep, rounds_per_unit: float | None = None) -> str:
    """The capacity in a sentence: the load that held the SLO, offered (the swept axis)
    against delivered (request throughput measured there), with a warning when the
    engine delivered under ``DELIVERED_WARN_SHARE`` of the offered request rate.

    ``rounds_per_unit`` converts ``arrival.rate`` (units/s) to requests/s; None reads
    it from the sweep's first run (``sweep_rounds_per_unit``)."""
    if not any(k.partition(":")[2] for k in (sweep.slo or {})):
        return "No SLO: the sweep has no capacity to state."
    axis = (sweep.capacity or {}).get("axis") or (sweep.axes[0] if sweep.axes else "point")
    point, how = capacity_point(sweep, axis)
    head = f"At {slo_phrase(sweep.slo)}: "
    if point is None:
        return head + "no point finished: no capacity to state."
    if axis == RATE_AXIS and rounds_per_unit is None:
        rounds_per_unit = sweep_rounds_per_unit(sweep)
    value = point["params"][axis]
    delivered = (point.get("metrics") or {}).get("request_throughput_rps")
    load = _load_text(axis, value, rounds_per_unit)
    if how == "below":
        where = f" ({axis})" if axis == RATE_AXIS else ""
        return f"{head}the SLO broke at every point, from {load}{where}: the capacity is " \
               "below the range."
    if axis == RATE_AXIS:
        load = f"{load} ({_offered_per(value, rounds_per_unit)}{axis}" + (
            f", {how})" if how != "above" else ")")
    elif how != "above":
        load = f"{load} ({how})"
    text = (f"the SLO held at every point, up to {load}, {sig(delivered)} req/s delivered: "
            "the capacity is above the range." if how == "above"
            else f"{load}, {sig(delivered)} req/s delivered.")
    offered_rps = value * rounds_per_unit if axis == RATE_AXIS and rounds_per_unit else None
    return head + text + _delivery_warning(delivered, offered_rps)


def _load_text(axis: str, value: float, rounds: float | None) -> str:
    if axis != RATE_AXIS:
        return f"{axis} = {sig(value)}"
    unit = "sessions" if rounds and rounds > 1 else "requests"
    return f"{sig(value)} {unit}/s offered"


def _offered_per(value: float, rounds: float | None) -> str:
    return f"{sig(value * rounds)} req/s; " if rounds and rounds > 1 else ""


def _delivery_warning(delivered: Any, offered_rps: float | None) -> str:
    if not isinstance(delivered, int | float) or not offered_rps:
        return ""
    share = delivered / offered_rps
    if share >= DELIVERED_WARN_SHARE:
        return ""
    return (f" WARNING: the engine delivered {share * 100:.0f} % of the offered load (below "
            f"{DELIVERED_WARN_SHARE * 100:.0f} %): it did not keep up (or the run was too "
            f"short for its ramp-up and drain); the capacity it sustained is {sig(delivered)} "
            f"req/s, not {sig(offered_rps)}.")


def sweeps_headline(sweeps: Mapping[str, Sweep]) -> Headline:
    """The sweep report's headline: one ``sweep_headline`` per sweep, by its label, its
    warning (delivered far below offered) on a line of its own."""
    lines = []
    for label, sweep in sweeps.items():
        head, warn, rest = sweep_headline(sweep, label).partition(" WARNING: ")
        lines += [head, f"WARNING: {rest}" if warn else ""]
    return Headline(lines)


def sweep_headline(sweep: Sweep, label: str | None = None) -> str:
    """One line for a sweep: what varied over which values, in which mode, then the
    capacity sentence."""
    axis = sweep.axes[0] if sweep.axes else "point"
    values = [p["params"][axis] for p in _ordered(sweep, axis)]
    done = len(values)
    span = "" if not values else f" {sig(values[0])}" if len(set(values)) == 1 else (
        f" {sig(min(values))}–{sig(max(values))}")
    m = sweep.manifest
    mode = engine_note({"mode": m.get("mode"), "config": m.get("base_config")}) or "live"
    return (f"{label or sweep.label}: {done} point(s) of {axis}{span} · {mode} · "
            f"{capacity_sentence(sweep)}")


# -- display ---------------------------------------------------------------------------------
class Headline:
    """Lines shown in bold at the top of a report (``_repr_mimebundle_``), as text too;
    ``render_report`` copies them (``HEADLINE_MIME``) into ``report.json`` and the index.
    A line with ``WARNING`` or ``INCOMPLETE`` in it is drawn in red."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [line for line in lines if line]

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def html(self) -> str:
        def para(line: str) -> str:  # styled inline: JupyterLab has no report CSS
            warn = "WARNING" in line or "INCOMPLETE" in line
            colour = "color:#a61b1b;" if warn else ""
            return f'<p style="margin:0.2em 0;{colour}">{html.escape(line)}</p>'

        items = "".join(para(line) for line in self.lines)
        return f'<div class="wb-headline" style="{HEADLINE_STYLE}">{items}</div>'

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/html": self.html(), "text/plain": str(self),
                HEADLINE_MIME: {"lines": self.lines}}
