"""The headline: one line that answers "how did it go?" at a glance.

``run_headline(summary, manifest)`` for a run, ``capacity_sentence(sweep)`` for a sweep;
every report, the index, the CLI and the panel print these strings. The rules:
docs/metrics.md, "Headline", and docs/sweeps.md, "Capacity"."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import workbench.catalogs.requests as catalog
from workbench.metrics.deviations import (
    failures_part,
    output_short_part,
    prompt_counted_part,
)
from workbench.metrics.distribution import QS, resolution, support
from workbench.metrics.slo import DEFAULT_MIN_OK
from workbench.metrics.summary import NON_STREAMING_NOTE, NOT_STREAMED, measured_plan
from workbench.metrics.wording import (
    bounds_phrase,
    capacity_phrase,
    counted,
    delivery_warning,
    slo_phrase,
    spread_phrase,
    thin_phrase,
    unmeasured_phrase,
)
from workbench.metrics.wording import sig as sig
from workbench.records import RunManifest
from workbench.storage.rundir import killed, read_manifest

if TYPE_CHECKING:  # the sweep sentences import ``workbench.sweeps`` where they use it: a
    # run's headline, a command's last line, does not (bench/README.md, "CLI start-up")
    from workbench.sweeps.groups import Capacity
    from workbench.sweeps.store import Sweep

SEP = " · "
#: a run "meets" its per-request SLO when this share of its requests attained every
#: bound (failed requests count against): the sweeps' default ``ok>=0.99``
SLO_MET_SHARE = DEFAULT_MIN_OK
HEADLINE_MIME = "application/vnd.workbench.headline+json"  # render_report reads it (index)
HEADLINE_STYLE = ("font-size:1.05em;font-weight:600;border-left:4px solid #1f77b4;"
                  "padding:0.3em 0.8em;margin:0.4em 0;background:#f4f8fb")
METRIC_NAMES = {m.name: m.label for m in catalog.CATALOG}  # the catalog's labels


#: from this p99 (or max) in ms on, a headline's latency triple is in seconds (docs/metrics.md)
SECONDS_FROM_MS = 10_000.0


def _scaled(values: Sequence[Any]) -> str:
    """``"48.2/95/210 ms"``; ``"459/882/943 s"`` when the last (largest) is
    ``SECONDS_FROM_MS`` or more, so no reader counts the digits of ``943300``."""
    top = values[-1]
    if isinstance(top, int | float) and not isinstance(top, bool) and top >= SECONDS_FROM_MS:
        return "/".join(sig(v / 1000 if isinstance(v, int | float) else v)
                        for v in values) + " s"
    return "/".join(sig(v) for v in values) + " ms"


PCT_KEYS = tuple(f"p{q:g}" for q in QS)


def percentiles_part(name: str, stats: Any) -> str:
    """``"TTFT p50/p90/p99 48.2/95/210 ms"``; over fewer values than a tail percentile
    needs to be other than the largest ones (``resolution``: a p99 100, a p90 10) the
    maximum in its place and the count: ``"TTFT p50/max 48.2/210 ms of 3 requests"``,
    ``"TTFT 48.2 ms of 1 request"``; ``"TTFT not measured"`` when no ok request had one
    (docs/metrics.md, "Headline")."""
    s = stats if isinstance(stats, Mapping) else {}
    n = s.get("count")
    if isinstance(stats, Mapping) and (n == 0 or not any(
            isinstance(s.get(k), int | float) for k in ("count", "max", *PCT_KEYS))):
        return f"{name} not measured"  # no ok request had one: no percentile to state
    top = resolution(QS[-1])
    if (not isinstance(n, int) or isinstance(n, bool) or n <= 0 or top is None
            or n >= top or s.get("max") is None):
        return f"{name} p50/p90/p99 {_scaled([s.get(f'p{q:g}') for q in QS])}"
    if n == 1:
        return f"{name} {_scaled([s.get('max')])} of 1 request"
    keys = [f"p{q:g}" for q in QS[:-1] if n >= (resolution(q) or 0)] + ["max"]
    return (f"{name} {'/'.join(keys)} {_scaled([s.get(k) for k in keys])} of "
            f"{counted(n, 'request')}")


def simulated_engine(manifest: RunManifest | None) -> Mapping[str, Any] | None:
    """The knobs of the simulated engine that served the run (``{}`` when none were
    recorded: the defaults), None for a real server: a virtual run, a ``sim`` target, or a
    live run whose server said it is ``workbench sim serve`` (``target.simulated``,
    ``backends.served.simulated_engine``)."""
    m = manifest or RunManifest.from_dict({})
    target = m.target or {}
    served = target.get("simulated")  # recorded only for a target.url (replay.session)
    if isinstance(served, Mapping):
        engine = served.get("engine")
        return engine if isinstance(engine, Mapping) else {}
    simulated = m.mode == "virtual" or target.get("kind") == "sim" or (
        m.section("target").get("url") == "sim")
    if not simulated:
        return None
    engine = target.get("engine") or m.engine or m.section("target").get("engine") or {}
    return engine if isinstance(engine, Mapping) else {}


def engine_note(manifest: RunManifest | None) -> str | None:
    """``"simulated engine, 20× real time, default step times, not a GPU's"``, ``"virtual
    time (simulated engine, preset …: stated median error …)"``, ``"simulated engine
    (workbench sim serve at URL, …)"`` for a live run whose server said it is one, or
    None for a real server: what the times stand on, the cost model in a few words
    (``sim.config.step_times``; docs/metrics.md, "Headline")."""
    engine = simulated_engine(manifest)
    if engine is None:
        return None
    from workbench.sim.config import step_times

    m = manifest or RunManifest.from_dict({})
    speedup = engine.get("speedup", 1.0)
    about = f", {sig(speedup)}× real time" if speedup not in (None, 1, 1.0) else ""
    about += f", {step_times(engine).brief}"
    if m.mode == "virtual":
        return f"virtual time (simulated engine{about})"
    target = m.target or {}
    if isinstance(target.get("simulated"), Mapping):  # a separately started `sim serve`
        where = target.get("base_url") or m.section("target").get("url") or "?"
        return f"simulated engine (workbench sim serve at {where}{about})"
    return f"simulated engine{about}"


def slo_verdict(slo: Mapping[str, Any] | None,
                summary: Mapping[str, Any] | None = None) -> str | None:
    """``"SLO met: 303/303 within TTFT ≤ 2 s"`` (met: at least ``SLO_MET_SHARE``
    of the requests attained every bound); ``SLO not judged`` when a bound's metric was
    measured on no ok request of ``summary``; None when the run had no SLO."""
    if not slo or not slo.get("bounds"):
        return None
    share = slo.get("joint_attainment")
    met = share is not None and share >= SLO_MET_SHARE
    text = f"{slo.get('attained')}/{slo.get('requests')} within {bounds_phrase(slo['bounds'])}"
    s = summary or {}
    unmeasured = [METRIC_NAMES.get(m, m) for m in slo["bounds"]
                  if s.get("ok") and isinstance(s.get(m), Mapping) and s[m].get("count") == 0]
    if unmeasured:  # no value to attain or miss (docs/metrics.md, "Headline")
        return (f"SLO not judged: {text}, {', '.join(unmeasured)} not measured (no ok request "
                "had a value)")
    text = f"SLO {'met' if met else 'missed'}: {text}"
    n, attained = slo.get("requests"), slo.get("attained")
    misses = n - attained if isinstance(n, int) and isinstance(attained, int) else 0
    needed = support(100 * SLO_MET_SHARE, misses=misses)
    if met and isinstance(n, int) and (needed is None or n < needed):
        # met on fewer requests than can show a 99 % share with that many missing it
        # (docs/metrics.md, "Evidence")
        with_misses = f" with {misses} missing it" if misses else ""
        text += (f" (too few requests to show {SLO_MET_SHARE * 100:g} % at 95 % confidence"
                 f"{with_misses}: needs {needed})")
    return text


def client_verdict(summary: Mapping[str, Any]) -> str | None:
    """``client OK`` / ``client LIMITED (why)`` from the run's self-measurement, with in
    parentheses what the server delayed (connections slow to be made, streams held open
    after [DONE]) and, for an OK, whether too few requests can show it."""
    client = summary.get("client")
    if not client:
        return None
    notes = [*(client.get("server_delays") or [])]
    held = client.get("held_after_done")  # the server's hold, named apart from the client
    if held:
        notes.append(f"server held streams open after [DONE]: "
                     f"{counted(held['requests'], 'request')} waited up to "
                     f"{sig(held['max_ms'])} ms for a connection")
    if client.get("client_ok_thin"):
        notes.append(client["client_ok_thin"])
    note = f" ({'; '.join(notes)})" if notes else ""
    if client.get("client_bottleneck"):
        reasons = [r.replace("(", "").replace(")", "")  # "p99 15.2 ms > 10 ms", flat
                   for r in client.get("client_bottleneck_reasons") or []]
        return (f"client LIMITED: {'; '.join(reasons)}" if reasons else "client LIMITED") + note
    return "client OK" + note


def _prefix(summary: Mapping[str, Any]) -> str | None:
    """``prefix hit A of P planned``: the actual rate against the plan of the same requests
    (``planned_prefix_hit_rate_measured``) when only some requests reported a cached
    count, so that like is compared with like (docs/metrics.md, "Per run")."""
    actual, planned = summary.get("actual_prefix_hit_rate"), summary.get("planned_prefix_hit_rate")
    if not summary.get("ok") or (actual is None and planned is None):
        return None
    text = "prefix hit " + ("unknown (no cached counts)" if actual is None else f"{actual:.3f}")
    if measured_plan(summary):
        reported, measured = (summary["cache_reported_requests"],
                              summary["planned_prefix_hit_rate_measured"])
        return text + (f" of {measured:.3f} planned for the {counted(reported, 'request')} that "
                       f"reported a cached count")
    return text + (f" of {planned:.3f} planned" if planned is not None else "")


def run_headline(summary: Mapping[str, Any], manifest: RunManifest | None = None) -> str:
    """One line for a run (docs/metrics.md, "Headline"); a manifest left ``running`` by a
    process that is gone says ``INCOMPLETE (killed)``."""
    status = summary.get("run_status")
    if status == "running" and manifest is not None and killed(manifest):
        status = "killed"
    whole = summary.get("response_mode") is not None  # non-streaming: TTFT = E2E, no TPOT
    parts: list[str | None] = [
        f"INCOMPLETE ({status})" if status not in (None, "completed") else None,
        f"{summary.get('ok', 0)}/{summary.get('requests', 0)} ok",
        failures_part(summary),
        output_short_part(summary),
        prompt_counted_part(summary),
        percentiles_part("TTFT", summary.get("ttft_ms"))
        + (f" ({NON_STREAMING_NOTE})" if whole else ""),
        f"TPOT {NOT_STREAMED}" if whole else percentiles_part("TPOT", summary.get("tpot_ms")),
        _prefix(summary),
        f"{sig(summary.get('request_throughput_rps'))} req/s",
        client_verdict(summary),
        slo_verdict(summary.get("slo"), summary),
        engine_note(manifest),
    ]
    return SEP.join(p for p in parts if p)


# -- sweeps ---------------------------------------------------------------------------------
def sweep_units(sweep: Sweep) -> tuple[int, int] | None:
    """(units, requests) of the sweep's plan, from its first run's manifest."""
    for run_dir in sweep.run_dirs:
        plan = read_manifest(Path(run_dir)).plan or {}  # {}: none, or unreadable
        if plan.get("units"):
            return int(plan["units"]), int(plan["rounds"])
    return None


def sweep_rounds_per_unit(sweep: Sweep) -> float | None:
    """Requests per unit of the sweep's plan, from its first run's manifest."""
    counts = sweep_units(sweep)
    return None if counts is None else counts[1] / counts[0]


def capacity_sentence(sweep: Sweep, rounds_per_unit: float | None = None) -> str:
    """The capacity in a sentence, per configuration, then the best (docs/sweeps.md,
    "Capacity"); ``rounds_per_unit`` (default: ``sweep_rounds_per_unit``) converts
    ``arrival.rate`` (units/s) to requests/s."""
    return " ".join(capacity_lines(sweep, rounds_per_unit))


def capacity_lines(sweep: Sweep, rounds: float | None = None) -> list[str]:
    """``capacity_sentence`` as lines: one for a single configuration, else the opening,
    a line per configuration and the best."""
    head, rest = _capacity_lines(sweep, rounds)
    if len(rest) == 1:
        return [f"{head} {rest[0]}"]
    return [head, *rest]


def _capacity_lines(sweep: Sweep, rounds: float | None = None) -> tuple[str, list[str]]:
    """The opening (``"At TTFT p90 ≤ 2 s:"``) and the sentences after it."""
    from workbench.sweeps.groups import RATE_AXIS, capacities, load_axis

    if not any(k != "ok" for k in (sweep.slo or {})):
        return "No SLO: the sweep has no capacity to state.", []
    counts = sweep_units(sweep) if load_axis(sweep) == RATE_AXIS else None
    if counts and rounds is None:
        rounds = counts[1] / counts[0]
    units = counts[0] if counts else None
    caps = capacities(sweep)
    head = f"At {slo_phrase(sweep.slo)}"
    if len(caps) == 1:
        return f"{head}:", [group_sentence(caps[0], rounds, units)]
    lines = [f"{c.label}: {group_sentence(c, rounds, units)}" for c in caps]
    return f"{head}, per configuration:", [*lines, best_sentence(caps, rounds)]


def group_sentence(cap: Capacity, rounds: float | None = None,
                   units: int | None = None) -> str:
    """One configuration's capacity: ``"capacity 1.6 req/s sustained, at 2.75 req/s
    offered: the highest load that held (found by search); it broke at 4 req/s."``;
    ``units``: the units of each run, which tell a run too short for its rate."""
    from workbench.sweeps.groups import RATE_AXIS

    axis = cap.axis
    if axis is None:
        return "no load axis: no capacity to state."
    if cap.status == "none":
        return "no point finished: no capacity to state."
    again = _again(cap, rounds)
    if cap.status == "below":
        assert cap.broken is not None
        low = _load_text(axis, cap.broken["params"][axis], rounds)
        if unmeasured := unmeasured_phrase(cap.broken.get("slo")):
            return (f"the SLO could not be judged, from {low}: {unmeasured}; no capacity "
                    "to state.")
        if again:
            return (f"the SLO broke at the lowest load, {low}, yet held at a higher one "
                    f"({again}): not monotone in load, no capacity to state (repeat the "
                    "points).")
        return f"the SLO broke at every point, from {low}: the capacity is below the range."
    value = cap.offered
    offered_rps = value * rounds if axis == RATE_AXIS and rounds else None
    phrase = capacity_phrase(cap.sustained, _load_text(axis, value, rounds),
                             at_least=cap.status == "above")
    if cap.status == "above" and (rest := cap.unfinished_above):
        loads = [rest[0]["params"][axis], rest[-1]["params"][axis]]
        span = _load_text(axis, loads[-1], rounds, offered=False)
        if len(rest) > 1:  # "4 to 8 req/s", "arrival.max_concurrency = 16 to 32"
            low = sig(loads[0]) if axis == RATE_AXIS else loads[0]
            span = (f"{low} to {span}" if axis == RATE_AXIS
                    else f"{axis} = {loads[0]} to {loads[-1]}")
        text = (f"{phrase}: the SLO held at every point that finished; "
                f"{counted(len(rest), 'higher load')} ({span}) did not finish, so the "
                f"capacity is not known beyond {_load_text(axis, value, rounds, offered=False)}.")
    elif cap.status == "above":
        text = f"{phrase}: the SLO held at every point, so the capacity is above the range."
    else:
        assert cap.broken is not None
        how = " (found by search)" if cap.found_by_search else ""
        broke = _load_text(axis, cap.broken["params"][axis], rounds, offered=False)
        if again:  # a higher load held: not "the highest load that held" (docs/sweeps.md)
            text = (f"{phrase}: the highest load below the first break{how}; it broke at "
                    f"{broke}, yet held again at {again}: the verdict is not monotone in "
                    "load, so this capacity is uncertain (repeat the points).")
        else:
            text = f"{phrase}: the highest load that held{how}; it broke at {broke}."
    sessions = units if offered_rps and rounds and rounds > 1 else None
    return text + _caveats(cap, rounds) + delivery_warning(
        cap.sustained, offered_rps, sessions=sessions,
        arrivals_s=(sessions - 1) / value if sessions else None,
        duration_s=((cap.point or {}).get("metrics") or {}).get("duration_s"))


def _caveats(cap: Capacity, rounds: float | None) -> str:
    """What weakens the verdicts a capacity rests on: `` The verdict at 1 req/s rests on too
    few requests to show it ...`` (the point that held, docs/metrics.md, "Evidence"), ``
    The verdict at 4 req/s is uncertain: 2 of 3 repeats held it; ...`` (the point that held
    and the first that broke, when their repeats disagree: docs/sweeps.md, "SLO")."""
    if cap.axis is None:
        return ""
    out = ""
    for point in (cap.point, cap.broken):
        verdict = (point or {}).get("slo")
        if point is None or not verdict:
            continue
        at = _load_text(cap.axis, point["params"][cap.axis], rounds, offered=False)
        thin = thin_phrase(verdict) if point is cap.point else ""
        if thin:
            out += f" The verdict at {at} rests on {thin}."
        if unmeasured := unmeasured_phrase(verdict):
            out += f" At {at} it was not judged: {unmeasured}."
        spread = spread_phrase(verdict)
        if spread:
            out += f" The verdict at {at} is uncertain: {spread}."
    return out


def best_sentence(caps: list[Capacity], rounds: float | None = None) -> str:
    """The best configuration by the highest load that held (ties named as ties; one that
    held over a lower range named as maybe higher)."""
    from workbench.sweeps.groups import best

    b = best(caps)
    if b is None and not any(c.group.points for c in caps):  # interrupted before one ended
        return "No point finished: no best configuration to name."
    if b is None:
        odd = [c.label for c in caps if c.again]  # held, but only above a break
        if odd:
            return ("No configuration has a capacity to state: none held the SLO from its "
                    f"lowest load on; {', '.join(odd)} held only above a load that broke it "
                    f"({NOT_MONOTONE}).")
        return "No configuration held the SLO at any load tried."
    top = b.leaders[0]
    axis = top.axis or ""
    if len(b.leaders) == 1:
        phrase = capacity_phrase(top.sustained, _load_text(axis, top.offered, rounds),
                                 at_least=top.status == "above")
        uncertain = f" ({NOT_MONOTONE}: uncertain)" if top.again else ""
        text = f"Best configuration: {top.label}, {phrase}{uncertain}."
    else:
        each = ", ".join(f"{c.label} ({sig(c.sustained)} req/s sustained"
                         f"{'; ' + NOT_MONOTONE if c.again else ''})" for c in b.leaders)
        text = (f"Best configurations, tied (each held up to "
                f"{_load_text(axis, top.offered, rounds)}): {each}.")
    if b.unsure:
        names = ", ".join(c.label for c in b.unsure)
        text += (f" {names} held at every point of a lower range: "
                 f"{'its' if len(b.unsure) == 1 else 'their'} capacity may be higher.")
    return text


#: a capacity cell's word for a configuration that held again above its first break
NOT_MONOTONE = "not monotone in load"


def capacity_brief(cap: Capacity, rounds: float | None = None) -> str:
    """A table cell: ``"3.07 req/s sustained (3.59 req/s offered)"``, ``"≥ 5.02 req/s
    sustained (6 req/s offered; above the range)"``, ``"below the range"``, ``"–"``; ``"…;
    not monotone in load)"`` when a load above the first break held again, ``"not
    monotone in load: no capacity"`` when the lowest load broke and a higher one held."""
    if cap.status == "below":
        return ("not measured" if unmeasured_phrase((cap.broken or {}).get("slo"))
                else NOT_MONOTONE + ": no capacity" if cap.again else "below the range")
    if cap.point is None or cap.axis is None:
        return "–"
    at = _load_text(cap.axis, cap.offered, rounds, inner=True)
    verdict = (cap.point or {}).get("slo")
    few = ("; too few requests to show it" if thin_phrase(verdict) else "") + (
        "; repeats disagree" if spread_phrase(verdict) else "") + (
        f"; {NOT_MONOTONE}" if cap.again else "")
    if cap.status == "above":
        beyond = "higher loads unfinished" if cap.unfinished_above else "above the range"
        return f"≥ {sig(cap.sustained)} req/s sustained ({at}; {beyond}{few})"
    return f"{sig(cap.sustained)} req/s sustained ({at}{few})"


def _again(cap: Capacity, rounds: float | None) -> str:
    if not cap.again or cap.axis is None:
        return ""
    axis = cap.axis
    return ", ".join(_load_text(axis, p["params"][axis], rounds, offered=False)
                     for p in cap.again)


def _load_text(axis: str, value: Any, rounds: float | None, offered: bool = True,
               inner: bool = False) -> str:
    """A load in words: ``"2.75 req/s offered"``, ``"2 sessions/s offered (12.4 req/s)"``
    for sessions of several rounds (``inner``, for text already in parentheses: ``"2
    sessions/s offered, 12.4 req/s"``), ``"arrival.max_concurrency = 12"``."""
    from workbench.sweeps.groups import RATE_AXIS

    if axis != RATE_AXIS:
        return f"{axis} = {sig(value)}"
    if rounds and rounds > 1:
        text = f"{sig(value)} sessions/s"
        per = f", {sig(value * rounds)} req/s" if inner else f" ({sig(value * rounds)} req/s)"
    else:
        text, per = f"{sig(value)} req/s", ""
    return f"{text} offered{per}" if offered else text + per


def sweeps_headline(sweeps: Mapping[str, Sweep]) -> Headline:
    """The sweep report's headline: ``sweep_headline_lines`` per sweep, each warning on a
    line of its own."""
    lines = []
    for label, sweep in sweeps.items():
        for line in sweep_headline_lines(sweep, label):
            head, warn, rest = line.partition(" WARNING: ")
            lines += [head, f"WARNING: {rest}" if warn else ""]
    return Headline(lines)


def sweep_headline_lines(sweep: Sweep, label: str | None = None) -> list[str]:
    """What varied over which values, in which mode, then the capacity (``capacity_lines``)."""
    from workbench.sweeps.groups import groups, load_axis

    axis = load_axis(sweep) or "point"
    gs = groups(sweep)
    values = [p["params"][axis] for g in gs for p in g.points if axis in p["params"]]
    done = sum(1 for p in sweep.points if p.get("status") == "done")
    span = "" if not values else f" {sig(values[0])}" if len(set(values)) == 1 else (
        f" {sig(min(values))}–{sig(max(values))}")
    configs = "" if len(gs) < 2 else (
        f", {len(gs)} configurations ({', '.join(_short(a) for a in sweep.axes if a != axis)})")
    m = sweep.manifest
    mode = engine_note(RunManifest("", mode=m.mode, config=m.base_config)) or "live"
    head, rest = _capacity_lines(sweep)
    first = (f"{label or sweep.label}: {counted(done, 'point')} of {axis}{span}{configs} · "
             f"{mode} · {head}")
    if len(gs) < 2:
        return [" ".join([first, *rest])]
    return [first, *rest]


def sweep_headline(sweep: Sweep, label: str | None = None) -> str:
    """``sweep_headline_lines`` as one line."""
    return " ".join(sweep_headline_lines(sweep, label))


def _short(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


# -- display ---------------------------------------------------------------------------------
class Headline:
    """Lines in bold at the top of a report (red with ``WARNING``, ``INCOMPLETE`` or
    ``DAMAGED``); ``render_report`` copies them (``HEADLINE_MIME``) into ``report.json``."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [line for line in lines if line]

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def html(self) -> str:
        def para(line: str) -> str:  # styled inline: JupyterLab has no report CSS
            warn = any(w in line for w in ("WARNING", "INCOMPLETE", "DAMAGED"))
            colour = "color:#a61b1b;" if warn else ""
            return f'<p style="margin:0.2em 0;{colour}">{html.escape(line)}</p>'

        items = "".join(para(line) for line in self.lines)
        return f'<div class="wb-headline" style="{HEADLINE_STYLE}">{items}</div>'

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/html": self.html(), "text/plain": str(self),
                HEADLINE_MIME: {"lines": self.lines}}
