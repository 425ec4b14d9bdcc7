"""``plan``: the fewest replicas of each hardware option that hold an SLO, and the cost.

Each probe is a virtual replay (``executors.virtual.simulate``) of the trace on N
replicas of an option (engine × router × host KV tier) at a scaled rate, judged as
simulated and over the preset's stated error band. The rules (search, band, sentence,
cost, best option, prices) are docs/plan.md's.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import json
import logging
import math
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import workbench.catalogs.requests as catalog
from workbench.config.engine_file import read_engine_file
from workbench.cores import usable_cores
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO, Bound
from workbench.metrics.wording import slo_phrase, thin_phrase
from workbench.plan.prices import EVERY_GPU, parse_prices, price_of
from workbench.ranges import RANGES
from workbench.safe_write import write_file
from workbench.signals import die_with_parent, wait_result
from workbench.sim.presets import is_calibrated, resolve
from workbench.sim.presets.stated import (
    CLASS_NAME,
    METRIC_CLASS,
    error_pct,
    metric_error,
    stated_error,
)
from workbench.sim.router import ROUTERS
from workbench.spawning import children_start, spawn_context

if TYPE_CHECKING:
    from workbench.records import Workload

log = logging.getLogger(__name__)

MAX_REPLICAS = 64
#: options (presets × routers × host KV sizes) × rate scales one plan searches, at most
#: (each search probes at most ~3·log2(max_replicas) replica counts): docs/config-bounds.md
MAX_SEARCHES = 1_000
PLAN_FILE = "plan.json"


@dataclass(frozen=True, slots=True)
class Option:
    """One way to serve: an engine (a preset name, or a calibrated engine's JSON path),
    the cluster's router and the host KV tier per replica (GB, 0: none)."""

    engine: str
    router: str = "prefix-aware"
    host_kv_gb: float = 0.0

    @property
    def is_preset(self) -> bool:
        """A catalog preset or a calibrated preset file (``calibration.preset``); else a
        calibrated engine's JSON (``sim calibrate``)."""
        return not self.engine.endswith(".json") or is_calibrated(self.engine)

    @property
    def gpus_per_replica(self) -> int:
        """A preset's tensor parallelism; a calibrated engine is one replica's worth (1)."""
        return resolve(self.engine).tp if self.is_preset else 1

    @property
    def gpu(self) -> str | None:
        """A preset's GPU (its price's key); None for a calibrated engine."""
        return resolve(self.engine).gpu.name if self.is_preset else None

    @property
    def label(self) -> str:
        host = f" · host {self.host_kv_gb:g} GB" if self.host_kv_gb else ""
        return f"{self.engine} · {self.router}{host}"

    def knobs(self, replicas: int) -> dict[str, Any]:
        """The simulated cluster's engine knobs for ``replicas`` replicas."""
        if self.is_preset:
            base: dict[str, Any] = {"preset": self.engine}
        else:  # a mapping of knobs, or sim calibrate's file: {"engine": {...}, ...}
            base = read_engine_file(self.engine)
        if self.host_kv_gb:
            base["host_kv_gb"] = self.host_kv_gb
        return {**base, "workers": replicas, "router": self.router}


@dataclass(slots=True)
class Probe:
    """One virtual replay: an option at a rate on ``replicas`` replicas, and its verdict."""

    option: Option
    scale: float
    rate: float
    replicas: int
    held: bool
    worst_ratio: float
    values: dict[str, float | None]
    ok_rate: float | None
    units: int
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    host_cached_tokens: int
    span_s: float
    # the verdict over the error band (docs/plan.md): optimistic ``*_low``, pessimistic
    # ``*_high``; None (a plan saved before the band): the plain verdict
    held_low: bool | None = None
    held_high: bool | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    #: the verdict's parts too few requests stand behind (``SLO.evidence``; docs/metrics.md,
    #: "Evidence"); None: a plan saved before it
    thin: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for banded, plain in (("held_low", "held"), ("held_high", "held"),
                              ("ratio_low", "worst_ratio"), ("ratio_high", "worst_ratio")):
            if getattr(self, banded) is None:
                setattr(self, banded, getattr(self, plain))

    @property
    def gpus(self) -> int:
        return self.replicas * self.option.gpus_per_replica

    def held_in(self, case: str) -> bool:
        """Held in ``case``: "low" (optimistic), "sim" (as simulated) or "high"."""
        return bool({"low": self.held_low, "sim": self.held, "high": self.held_high}[case])

    def ratio_in(self, case: str) -> float:
        r = {"low": self.ratio_low, "sim": self.worst_ratio, "high": self.ratio_high}[case]
        return float(r if r is not None else self.worst_ratio)


CASES = ("low", "sim", "high")  # optimistic, as simulated, pessimistic (docs/plan.md)


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _span(lo: int, hi: int, word: str) -> str:
    """"4 replicas", "1 GPU", "4–7 replicas": integers, GPUs = replicas × TP."""
    return _n(lo, word) if lo == hi else f"{lo:,}–{hi:,} {word}s"


def _headroom(probe: Probe) -> str:
    """limit / value − 1 of the binding bound (the pessimistic case holds when it is at
    least the stated error)."""
    r = probe.worst_ratio
    return f"{1 / r - 1:.1%}" if r > 0 else "all"


@dataclass(slots=True)
class PlanResult:
    """Every probe, and per (option, scale) the fewest replicas that held (or None) as
    simulated and in the error band's optimistic and pessimistic cases."""

    trace: str
    slo: str
    base_rate: float
    scales: list[float]
    options: list[Option]
    prices: dict[str, float] | None
    probes: list[Probe] = field(default_factory=list)
    created: str = ""
    #: per option label: its trace's units one at a time on one idle replica (the
    #: floor more replicas cannot go under), for options whose pessimistic case never held
    floors: dict[str, Probe] = field(default_factory=dict)
    max_replicas: int = MAX_REPLICAS
    #: the trace's requests per unit (1: every unit one request; more: agent sessions);
    #: None: a plan saved before it, whose rates stay in units/s
    rounds_per_unit: float | None = None
    #: every probe's arrival.tool_wait_scale (``--tool-wait-scale``; a plan saved before
    #: it: 1, the trace's waits as they are)
    tool_wait_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.prices is None:
            self.prices = {}

    def parsed_slo(self) -> SLO:
        """``slo`` parsed back (its text joins the items with " and ")."""
        parsed = SLO.parse(self.slo.replace(" and ", ","))
        assert parsed is not None
        return parsed

    def objective(self) -> str:
        """The SLO as a reader says it: ``"TTFT p90 ≤ 2 s"`` (``slo_phrase``: its ``ok``
        share named only when it is not the default 99 %), as a sweep's headline says it."""
        return slo_phrase(self.parsed_slo().to_dict())

    def rate_words(self, scale: float) -> str:
        """The rate at ``scale`` in its real unit: ``"3.00 req/s"`` for a trace of single
        requests, ``"3.00 sessions/s (12.40 req/s)"`` for agent sessions, ``"3.00
        units/s"`` for a plan saved before the trace's rounds per unit were kept."""
        rate = self.base_rate * scale
        per = self.rounds_per_unit
        if per is None:
            return f"{_per_s(rate)} units/s"
        if per <= 1:
            return f"{_per_s(rate)} req/s"
        return f"{_per_s(rate)} sessions/s ({_per_s(rate * per)} req/s)"

    def probe_line(self, p: Probe) -> str:
        """A probe as ``workbench plan`` prints it when it ends, its rate in the answer's
        unit: ``"llama-3.1-8b/h100/tp1 × 2 at 3.00 sessions/s (12.40 req/s): held (worst
        ratio 0.41; with the error 0.30–0.55)"``."""
        return (f"{p.option.label} × {p.replicas} at {self.rate_words(p.scale)}: "
                f"{'held' if p.held else 'broken'} (worst ratio {p.worst_ratio:.2f}; with "
                f"the error {p.ratio_in('low'):.2f}–{p.ratio_in('high'):.2f})")

    def bounds(self) -> list[Bound]:
        return list(self.parsed_slo().bounds)

    def errors(self, option: Option) -> dict[str, float]:
        """Stated error per metric class (``TTFT`` -> 0.371) of the SLO's bounds that
        have one, for ``option``'s preset."""
        out: dict[str, float] = {}
        for b in self.bounds():
            e = metric_error(option.engine, b.metric)
            if e is not None:
                out[CLASS_NAME[METRIC_CLASS[b.metric]]] = e
        return out

    def _error_words(self, option: Option) -> str:
        errs = self.errors(option)
        if not errs:
            return ("no stated error for this SLO's metrics"
                    + (" (a calibrated engine's is its calibration's)"
                       if not option.is_preset else ""))
        named = " and ".join(f"{k} error (±{error_pct(e)})" for k, e in errs.items())
        return f"the preset's {named}"

    def _case_words(self, option: Option, case: str) -> str:
        """"at +37 % TTFT": the pessimistic ("high") or optimistic ("low") case."""
        errs = self.errors(option)
        sign = "+" if case == "high" else "−"
        return "at " + " and ".join(f"{sign}{error_pct(e)} {k}" for k, e in errs.items())

    def fewest(self, option: Option, scale: float, case: str = "sim") -> Probe | None:
        """The probe with the fewest replicas for ``option`` at ``scale`` that held in
        ``case`` ("sim": as simulated; "low"/"high": the error band's ends)."""
        held = [p for p in self.probes
                if p.option == option and p.scale == scale and p.held_in(case)]
        return min(held, key=lambda p: p.replicas) if held else None

    def band(self, option: Option, scale: float) -> dict[str, Probe | None]:
        return {c: self.fewest(option, scale, c) for c in CASES}

    def price(self, option: Option) -> float | None:
        return price_of(self.prices or {}, option.gpu)

    def cost(self, probe: Probe) -> dict[str, float | None]:
        """USD per million tokens, per unit of work and per hour (docs/plan.md, "Cost")."""
        price = self.price(probe.option)
        if price is None or probe.span_s <= 0:
            return {"usd_per_mtok": None, "usd_per_task": None, "usd_per_hour": None}
        per_hour = probe.gpus * price
        dollars = per_hour * probe.span_s / 3600
        tokens = probe.prompt_tokens + probe.output_tokens
        return {"usd_per_mtok": dollars / tokens * 1e6 if tokens else None,
                "usd_per_task": dollars / probe.units if probe.units else None,
                "usd_per_hour": per_hour}

    def answers(self) -> list[dict[str, Any]]:
        """One row per (scale, option): fewest replicas and GPUs over the band, verdict, cost."""
        rows = []
        none = {"usd_per_mtok": None, "usd_per_task": None, "usd_per_hour": None}
        for scale in self.scales:
            for option in self.options:
                b = self.band(option, scale)
                p = b["sim"]
                row: dict[str, Any] = {
                    "scale": scale, "rate": self.base_rate * scale, "option": option.label,
                    "verdict": self.verdict(option, scale),
                    "replicas": p.replicas if p else None,
                    "replicas_low": b["low"].replicas if b["low"] else None,
                    "replicas_high": b["high"].replicas if b["high"] else None,
                    "gpus_per_replica": option.gpus_per_replica,
                    "gpus": p.gpus if p else None,
                    "gpus_low": b["low"].gpus if b["low"] else None,
                    "gpus_high": b["high"].gpus if b["high"] else None,
                    "usd_per_gpu_hour": self.price(option),
                    **(self.cost(p) if p else none),
                    "usd_per_mtok_high": (self.cost(b["high"])["usd_per_mtok"]
                                          if b["high"] else None),
                    **({f"slo:{k}": v for k, v in p.values.items()} if p else {}),
                    "label": f"simulated · {option.label} · {stated_error(option.engine)}",
                }
                rows.append(row)
        return rows

    def verdict(self, option: Option, scale: float) -> str:
        """"holds" (the band's ends agree: the margin exceeds the error), "within the
        error" (the ends differ: a range), "not even optimistically" (nothing held)."""
        b = self.band(option, scale)
        if b["low"] is None:
            return "no count held, even optimistically"
        if b["high"] is not None and b["high"].replicas == b["low"].replicas:
            return "holds"
        return "a range within the error"

    def _why(self, option: Option, scale: float, case: str) -> str:
        """Why no count up to the limit held in ``case``: where more replicas stopped
        helping and, when the floor explains it, that the trace's units one at a time on
        an idle replica already break the bound."""
        tried = [p for p in self.probes if p.option == option and p.scale == scale]
        if not tried:
            return "not tried"
        cap = max(p.replicas for p in tried)
        low = min(p.ratio_in(case) for p in tried)
        first = min(p.replicas for p in tried if p.ratio_in(case) <= low * 1.005)
        text = f"none up to {cap:,} (at best {low:.2f}× the bound"
        falling = first >= cap
        text += (f" at {cap:,}, still falling" if falling else
                 f", from {first:,} replicas on: more replicas stopped helping")
        floor = self.floors.get(option.label)
        if floor is None:
            return text + (": raise --max-replicas)" if falling else ")")
        shown = self._binding(floor)[0]
        applied = {"sim": "", "high": f" {self._case_words(option, 'high')}",
                   "low": f" even {self._case_words(option, 'low')}"}[case]
        if not floor.held_in(case):
            return text + (f"; the trace's units one at a time on one idle replica already "
                           f"give {shown}, over the bound{applied}: a lone request's own "
                           f"time, which more replicas cannot shorten)")
        if falling:
            return text + ": raise --max-replicas)"
        return text + (f"; yet one at a time on one idle replica they give {shown}, within "
                       f"the bound{applied}, so the floor is not a lone request's time and "
                       f"this plan does not show why)")

    def not_monotone(self, option: Option, scale: float) -> str:
        """``" Not monotone in replicas: as simulated 4 held it, yet 5 broke it (…)."``
        when, in some case of the band, a count above one that held broke the SLO: the
        search assumes it never does (docs/plan.md, "Fewest replicas"); else ``""``."""
        tried = sorted((p for p in self.probes if p.option == option and p.scale == scale),
                       key=lambda p: p.replicas)
        words = {"sim": "as simulated", "low": self._case_words(option, "low"),
                 "high": self._case_words(option, "high")}
        parts = []
        for case in ("sim", "high", "low"):
            held = [p for p in tried if p.held_in(case)]
            if not held:
                continue
            broke = [p for p in tried if not p.held_in(case) and p.replicas > held[0].replicas]
            if broke:
                below = max((p for p in held if p.replicas < broke[0].replicas),
                            key=lambda p: p.replicas)
                parts.append(f"{words[case]} {below.replicas:,} held it, yet "
                             f"{broke[0].replicas:,} broke it ({self._binding(broke[0])[0]})")
        text = "" if not parts else (
            f" Not monotone in replicas for {option.engine}: " + "; ".join(parts)
            + ": the search assumes more replicas never break what fewer held, so the "
            "fewest found may not hold at every larger count (a longer trace, or the "
            "curve, tells).")
        return text + self._not_monotone_in_load(option, scale)

    def _not_monotone_in_load(self, option: Option, scale: float) -> str:
        """``" Not monotone in load for …: as simulated, at 6.00 req/s 5 replicas held it,
        fewer than the 6 needed here …"`` when a higher rate of the plan held with fewer
        replicas than this one needs (as simulated): the two rows of the table would
        otherwise read as if more load needed less hardware (docs/plan.md, "Fewest
        replicas"); else ``""``."""
        here = self.fewest(option, scale)
        parts = []
        for other in sorted(s for s in self.scales if s > scale):
            there = self.fewest(option, other)
            if there is not None and (here is None or there.replicas < here.replicas):
                parts.append(f"at {self.rate_words(other)} {_n(there.replicas, 'replica')} "
                             f"held it")
        if not parts:
            return ""
        need = (f"fewer than the {here.replicas:,} needed here" if here is not None
                else "where no count tried here held it")
        return (f" Not monotone in load for {option.engine}: as simulated, "
                + "; ".join(parts) + f", {need}: on this trace sample the count is set by "
                "how the requests fall on the replicas as much as by the rate, so neither "
                "count is sharp (a longer trace tells).")

    def _thin_note(self, option: Option, scale: float) -> str:
        """`` The verdict rests on too few requests to show it …`` when a count that held
        (the band's either end, or as simulated) did so on fewer requests than its bounds
        need (docs/metrics.md, "Evidence")."""
        for case in ("high", "sim", "low"):
            p = self.fewest(option, scale, case)
            thin = thin_phrase({"thin": p.thin}) if p is not None else ""
            if thin:
                return f" The verdict rests on {thin}."
        return ""

    def best(self, scale: float) -> tuple[Option, Probe] | None:
        """The best option at ``scale`` and the probe that decided it (docs/plan.md, "Best")."""
        for case in ("high", "sim", "low"):
            found = [(o, p) for o in self.options if (p := self.fewest(o, scale, case))]
            if found:
                break
        else:
            return None
        hourly = {o.label: self.cost(p)["usd_per_hour"] for o, p in found}
        priced = all(h is not None for h in hourly.values())
        return min(found, key=lambda op: (hourly[op[0].label] if priced else 0.0,
                                          op[1].gpus, op[0].label))

    def _cost_words(self, lo: Probe, hi: Probe | None) -> str:
        c_lo = self.cost(lo)["usd_per_mtok"]
        if c_lo is None:
            gpu = lo.option.gpu
            return (f"; no price for {gpu}: give --price {gpu}=USD"
                    if gpu and self.price(lo.option) is None else "")
        c_hi = self.cost(hi)["usd_per_mtok"] if hi is not None else None
        # "USD", not "$": JupyterLab typesets the text between two "$" as math
        if c_hi is None or abs(c_hi - c_lo) < 5e-4:
            return f", USD {c_lo:.3f} per million tokens"
        return f", USD {c_lo:.3f}–{c_hi:.3f} per million tokens"

    def option_words(self, option: Option, scale: float) -> str:
        """One option's answer at ``scale``: "4–7 replicas (8–14 GPUs) within ...",
        "needs 4 replicas (8 GPUs)" or why none held; integers, GPUs = replicas × TP."""
        b = self.band(option, scale)
        lo, hi = b["low"], b["high"]
        if lo is None:
            return f"{option.engine} {self._why(option, scale, 'low')}"
        if hi is not None and hi.replicas == lo.replicas and not self.not_monotone(option,
                                                                                   scale):
            return (f"{option.engine} needs {_n(hi.replicas, 'replica')} "
                    f"({_n(hi.gpus, 'GPU')})")
        odd = " (not monotone: the curve shows where)" if self.not_monotone(
            option, scale) else ""
        if hi is None:  # "or more" alone would promise that some count holds it
            return (f"{option.engine} needs {lo.replicas:,} or more replicas within its "
                    f"error{odd}: {lo.replicas:,} only {self._case_words(option, 'low')}; "
                    f"{self._case_words(option, 'high')} {self._why(option, scale, 'high')}")
        top = (f"{_span(lo.replicas, hi.replicas, 'replica')} "
               f"({_span(lo.gpus, hi.gpus, 'GPU')})")
        return f"{option.engine} needs {top} within its error{odd}"

    def _binding(self, probe: Probe) -> tuple[str, Bound]:
        """The bound nearest to breaking at ``probe`` and its value in words."""
        parsed = self.parsed_slo()
        worst = max(parsed.bounds, key=lambda b: parsed.ratio(b, probe.values.get(b.key)))
        value = probe.values.get(worst.key)
        name = catalog.label(worst.metric)
        shown = (f"{name} p{worst.q:g} {value:,.1f} ms" if worst.q is not None
                 and value is not None else f"{name} within its bound for {value or 0:.0%}")
        return shown, worst

    def answer(self, scale: float | None = None) -> str:
        """The plan in one sentence, the answer first and the error after (the trace's
        own rate unless ``scale``; the other rates in the table)."""
        scale = self.scales[0] if scale is None else scale
        rate = self.rate_words(scale)
        objective = self.objective()
        where = f"for {self.trace} at {rate}"
        what = f"for {objective} on {self.trace} at {rate}"
        got = self.best(scale)
        if got is None:
            return (f"No option holds {objective} {where}, even at its error's best: "
                    + "; ".join(f"{o.engine} {self._why(o, scale, 'low')}"
                                for o in self.options)
                    + ". " + self._error_tail())
        option, _ = got
        b = self.band(option, scale)
        lo, sim, hi = b["low"], b["sim"], b["high"]
        assert lo is not None
        others = [self.option_words(o, scale) for o in self.options if o != option]
        rest = f"; {'; '.join(others)}" if others else ""
        errs = self.errors(option)
        if hi is not None and hi.replicas == lo.replicas:
            head = (f"{_n(hi.replicas, 'replica')} of {option.label} "
                    f"({_n(hi.gpus, 'GPU')}{self._cost_words(hi, None)}) "
                    f"{'holds' if hi.replicas == 1 else 'hold'} {objective} {where}")
            if errs:
                why = (f": the bound is {_headroom(hi)} above the simulated value, more than "
                       f"{self._error_words(option)}")
                if hi.replicas > 1:
                    why += (f", and {_n(hi.replicas - 1, 'replica')} would break it even "
                            f"{self._case_words(option, 'low')}")
            else:
                why = f" as simulated ({self._error_words(option)})"
            return (head + why + rest + "." + self.not_monotone(option, scale)
                    + self._thin_note(option, scale) + " " + self._error_tail())
        if hi is not None:
            count = (f"{_span(lo.replicas, hi.replicas, 'replica')} of {option.label} "
                     f"({_span(lo.gpus, hi.gpus, 'GPU')}{self._cost_words(lo, hi)})")
            ends = (f"{hi.replicas:,} hold it even {self._case_words(option, 'high')}, "
                    f"{lo.replicas:,} only {self._case_words(option, 'low')}")
        else:
            count = (f"{lo.replicas:,} or more replicas of {option.label} "
                     f"({lo.gpus:,} or more GPUs{self._cost_words(lo, None)})")
            ends = (f"{lo.replicas:,} only {self._case_words(option, 'low')}; "
                    f"{self._case_words(option, 'high')} "
                    f"{self._why(option, scale, 'high')}")
        sim_words = (f"as simulated, {_n(sim.replicas, 'replica')} "
                     f"give{'s' if sim.replicas == 1 else ''} "
                     f"{self._binding(sim)[0]} (the bound {_headroom(sim)} above it)"
                     if sim is not None
                     else f"as simulated, {self._why(option, scale, 'sim')}")
        return (f"{count} {what}, a range within {self._error_words(option)}: {ends}; "
                f"{sim_words}{rest}.{self.not_monotone(option, scale)}"
                f"{self._thin_note(option, scale)} " + self._error_tail())

    def _error_tail(self) -> str:
        """The stated errors, after the answer: one clause per distinct engine."""
        texts: dict[str, list[str]] = {}
        for engine in dict.fromkeys(o.engine for o in self.options):
            texts.setdefault(stated_error(engine), []).append(engine)
        if len(texts) == 1:
            return f"Simulated; {next(iter(texts))}."
        return "Simulated; " + "; ".join(f"{', '.join(es)}: {t}" for t, es in texts.items()) + "."

    def curve(self) -> list[dict[str, Any]]:
        """Every probe as a row: the curve behind the answer."""
        return [{"option": p.option.label, "scale": p.scale, "rate": p.rate,
                 "replicas": p.replicas, "gpus": p.gpus, "held": p.held,
                 "held_low": p.held_low, "held_high": p.held_high,
                 "worst_ratio": p.worst_ratio, "ratio_low": p.ratio_low,
                 "ratio_high": p.ratio_high, **p.values, "ok_rate": p.ok_rate,
                 "cached_tokens": p.cached_tokens, "host_cached_tokens": p.host_cached_tokens,
                 "prompt_tokens": p.prompt_tokens}
                for p in self.probes]

    def to_dict(self) -> dict[str, Any]:
        def probe(p: Probe) -> dict[str, Any]:
            return {**dataclasses.asdict(p), "option": dataclasses.asdict(p.option)}

        return {
            "trace": self.trace, "slo": self.slo, "base_rate": self.base_rate,
            "scales": self.scales, "prices": self.prices, "created": self.created,
            "max_replicas": self.max_replicas, "rounds_per_unit": self.rounds_per_unit,
            **({"tool_wait_scale": self.tool_wait_scale} if self.tool_wait_scale != 1 else {}),
            "options": [dataclasses.asdict(o) for o in self.options],
            "probes": [probe(p) for p in self.probes],
            "floors": {k: probe(p) for k, p in self.floors.items()},
            "answers": self.answers(), "answer": self.answer(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanResult:
        def probe(p: dict[str, Any]) -> Probe:
            return Probe(**{**p, "option": Option(**p["option"])})

        options = [Option(**o) for o in d["options"]]
        if "prices" in d:
            prices = d["prices"]
        else:  # a plan saved before per-GPU prices: its one price, for every GPU
            old = d.get("price_per_gpu_hour")
            prices = {} if old is None else {EVERY_GPU: old}
        return cls(d["trace"], d["slo"], d["base_rate"], list(d["scales"]), options,
                   prices, [probe(p) for p in d["probes"]], d.get("created", ""),
                   {k: probe(p) for k, p in (d.get("floors") or {}).items()},
                   d.get("max_replicas", MAX_REPLICAS), d.get("rounds_per_unit"),
                   d.get("tool_wait_scale", 1.0))

    def save(self, out_dir: str | Path, plan_id: str | None = None, *,
             claimed: Path | None = None) -> Path:
        """``plan.json`` in a new directory (``claim_plan_dir``) or in ``claimed``; returns
        the directory."""
        d = claimed if claimed is not None else claim_plan_dir(out_dir, plan_id)
        write_file(d / PLAN_FILE, json.dumps(self.to_dict(), indent=1))
        return d


#: how many ``-N`` suffixes a plan directory named after the second tries
CLAIM_TRIES = 1000


def claim_plan_dir(out_dir: str | Path, plan_id: str | None = None) -> Path:
    """A new, empty plan directory under ``out_dir``, made now (``mkdir`` is atomic):
    ``PLAN_ID`` exactly (taken: a ``ConfigError``), else ``STAMP-plan[-N]``."""
    from workbench.config.validation import check_run_id

    root = Path(out_dir)
    if plan_id is not None:
        check_run_id("plan_id", plan_id)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"plan: cannot create {root}: {exc.strerror}") from None
    if plan_id is not None:
        names = [plan_id]
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        names = [f"{stamp}-plan", *(f"{stamp}-plan-{n}" for n in range(2, CLAIM_TRIES))]
    for name in names:
        d = root / name
        try:
            d.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"plan: cannot create {d}: {exc.strerror}") from None
        return d
    raise ConfigError(f"plan: {root / names[-1]} is taken (give another -o)")


def load_plan(path: str | Path) -> PlanResult:
    """A saved plan: its directory or its ``plan.json``."""
    p = Path(path)
    p = p / PLAN_FILE if p.is_dir() else p
    try:
        return PlanResult.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{p}: not a saved plan ({exc})") from None


def _options(engines: Sequence[str], routers: Sequence[str],
             host_kv_gb: Sequence[float]) -> list[Option]:
    if not engines:
        raise ConfigError("plan: give at least one preset (MODEL/GPU/tpN[/fp8|/fp8w]) or "
                          "engine.json")
    for r in routers:  # named before any search, by the field that gave it
        ROUTERS.canonical(r, "plan.router")
    out = []
    for i, e in enumerate(engines):
        if e.endswith(".json") and not is_calibrated(e):
            if not Path(e).exists():  # a FIFO or a device: refused by kind as it is read
                raise ConfigError(f"plan: engine file {e!r} does not exist")
            read_engine_file(e, check=True)  # its knobs, checked before any search
        else:
            try:
                resolve(e)
            except ValueError as exc:
                raise ConfigError(f"plan: {exc}", field=f"plan.preset[{i}]") from None
        out += [Option(e, r, float(h)) for r in routers for h in host_kv_gb]
    return out


def band_slo(slo: SLO, option: Option, case: str) -> SLO:
    """``slo`` with each bound's limit divided by 1 ± ``option``'s stated error of its
    metric ("high": +, pessimistic; "low": −; docs/plan.md, "Error band")."""
    bounds = []
    for b in slo.bounds:
        e = metric_error(option.engine, b.metric) or 0.0
        factor = 1 + e if case == "high" else 1 - e
        bounds.append(Bound(b.metric, b.q, b.limit / factor if factor > 0 else math.inf))
    return SLO(tuple(bounds), slo.min_ok)


def _measure(cfg: dict[str, Any], option: Option, scale: float, rate: float, replicas: int,
             slo: SLO, arrival: dict[str, Any] | None = None) -> Probe:
    import workbench.executors.virtual as virtual
    from workbench.metrics import to_frame

    run = {**cfg, "arrival": arrival or {**cfg.get("arrival", {}), "rate": rate},
           "target": {"url": "sim", "engine": option.knobs(replicas)}}
    # how long each probe takes and spans: said once per plan (``_announce``)
    result = virtual.simulate(run, announced=True)
    frame = to_frame(result)
    ev = slo.evaluate(frame)
    verdict = slo.verdict(ev["values"], ev["ok_rate"], ev["requests"], ev["ok_requests"])
    band = {}
    for case in ("low", "high"):
        scaled = band_slo(slo, option, case)
        band[case] = scaled.verdict(scaled.evaluate(frame)["values"], ev["ok_rate"])
    recs = result.records
    sends = [r.dispatch_ns for r in recs if r.dispatch_ns is not None]
    ends = [r.end_ns for r in recs if r.end_ns is not None]
    span = (max(ends) - min(sends)) / 1e9 if sends and ends else 0.0
    return Probe(
        option, scale, rate, replicas, verdict["held"], verdict["worst_ratio"],
        ev["values"], ev["ok_rate"], len({r.unit_ordinal for r in recs}),
        sum(r.prompt_tokens or 0 for r in recs), sum(r.completion_tokens or 0 for r in recs),
        sum(r.cached_tokens or 0 for r in recs),
        sum(int(r.extra.get("host_cached_tokens", 0)) for r in recs), span,
        band["low"]["held"], band["high"]["held"], band["low"]["worst_ratio"],
        band["high"]["worst_ratio"], verdict["thin"])


def _floor(cfg: dict[str, Any], option: Option, slo: SLO) -> Probe:
    """The trace's units one at a time on one idle replica: what no replica count goes
    under (docs/plan.md, "When more replicas stop helping")."""
    return _measure(cfg, option, 0.0, 0.0, 1, slo,
                    arrival={**cfg.get("arrival", {}), "mode": "saturated",
                             "max_concurrency": 1})


def _fewest(probe: Callable[[int], Probe], max_replicas: int) -> None:
    """Doubling from 1 until the SLO holds even pessimistically, the last step at
    ``max_replicas`` itself (not the last power of two under it: the range asked for is the
    range searched), then bisection for each case (docs/plan.md); each count is probed
    once, through ``probe``."""
    seen: dict[int, Probe] = {}

    def at(n: int) -> Probe:
        if n not in seen:
            seen[n] = probe(n)
        return seen[n]

    n = 1
    while not at(n).held_high and n < max_replicas:
        n = min(2 * n, max_replicas)
    for case in ("sim", "high", "low"):
        held = [k for k, p in seen.items() if p.held_in(case)]
        if not held:
            continue
        good = min(held)
        bad = max((k for k, p in seen.items() if k < good and not p.held_in(case)), default=0)
        while good - bad > 1:
            mid = (good + bad) // 2
            if at(mid).held_in(case):
                good = mid
            else:
                bad = mid


def _search(cfg: dict[str, Any], option: Option, scale: float, rate: float,
            max_replicas: int, slo: SLO,
            report: Callable[[Probe], None] | None = None) -> list[Probe]:
    """One option's fewest-replicas search at one rate (in this process, or a worker's):
    its probes in the order they ran, each given to ``report`` as it ends."""
    probes: list[Probe] = []

    def probe(n: int) -> Probe:
        probes.append(_measure(cfg, option, scale, rate, n, slo))
        if report is not None:
            report(probes[-1])
        return probes[-1]

    _fewest(probe, max_replicas)
    return probes


def _per_s(rate: float) -> str:
    """A rate as a plan says it: two decimals, or two significant digits below 0.01 (never
    ``0.00``)."""
    return f"{rate:.2f}" if rate >= 0.01 or rate == 0 else f"{rate:.2g}"


def _scales_in_range(base: float, scales: Sequence[float]) -> None:
    """Every probe's rate (the trace's own ``base`` × a scale) within ``arrival.rate``'s
    range (docs/config-bounds.md), else one error in ``plan``'s own terms: which scales,
    and the scales that would be in range."""
    rng = RANGES["arrival.rate"]
    out = [s for s in scales if not rng.holds(base * s)]
    if not out:
        return
    lo, hi = (rng.lo or 0.0) / base, (rng.hi or math.inf) / base
    raise ConfigError(
        f"plan: the trace's own rate is {base:.3g} units/s, so at --scale "
        f"{', '.join(f'{s:g}' for s in out)} a probe's rate would be "
        f"{', '.join(f'{base * s:.3g}' for s in out)} units/s, outside arrival.rate's "
        f"range [{rng.lo:g}, {rng.hi:g}] (docs/config-bounds.md); scales between "
        f"{lo:.3g} and {hi:.3g} are in range",
        field="plan.scales")


def trace_rate(wl: Workload) -> tuple[float, float]:
    """The trace's own arrival rate, units per second (docs/arrival.md's measured rate),
    and its requests per unit (what a unit is: 1, a request; more, an agent session)."""
    starts = sorted(u.arrival_ms for u in wl.units)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        raise ConfigError("plan: the trace's units all arrive at once; it has no rate to "
                          "scale (plan a trace whose units arrive over time)")
    return (len(starts) - 1) / ((starts[-1] - starts[0]) / 1000), wl.n_rounds / len(starts)


def plan(trace: str, engines: Sequence[str], slo: Any, *,
         scales: Sequence[float] = (1.0, 2.0), routers: Sequence[str] = ("prefix-aware",),
         host_kv_gb: Sequence[float] = (0.0,),
         prices: str | float | Mapping[str, float] | None = None,
         max_items: int | None = None, max_replicas: int = MAX_REPLICAS,
         progress: Callable[[Probe, str], None] | None = None,
         parallel: int | None = None, tool_wait_scale: float = 1.0) -> PlanResult:
    """Fewest replicas per option and rate scale (docs/plan.md).

    ``prices``: USD per GPU-hour (``plan.prices``: ``{"h100": 2.5}``, ``"h100=2.5"`` over
    the default table, or a number for every GPU). ``parallel``: processes running the
    (option, scale) searches at once; None: the cores this process may use.
    ``progress``: told each probe as it ends and its line (``PlanResult.probe_line``).
    ``tool_wait_scale``: every probe's ``arrival.tool_wait_scale`` (as ``replay``'s)."""
    parsed = SLO.parse(slo)
    if parsed is None:
        raise ConfigError("plan: an SLO is required, e.g. 'ttft_ms:p90<=2000'")
    if not scales or any(not (s > 0 and math.isfinite(s)) for s in scales):
        raise ConfigError(f"plan: scales must be positive numbers, got {list(scales)}",
                          field="plan.scales")
    if not 1 <= max_replicas <= 1024:
        raise ConfigError(f"plan: max_replicas must be in [1, 1024], got {max_replicas}",
                          field="plan.max_replicas")
    table = parse_prices(prices)
    options = _options(engines, routers, host_kv_gb)
    if len(options) * len(scales) > MAX_SEARCHES:
        raise ConfigError(f"plan: {len(options)} options × {len(scales)} scales = "
                          f"{len(options) * len(scales):,} searches; at most "
                          f"{MAX_SEARCHES:,} (docs/config-bounds.md, 'Plans')")
    cfg: dict[str, Any] = {"trace": {"path": trace, **({"max_items": max_items}
                                                       if max_items is not None else {})},
                           "arrival": {"tool_wait_scale": tool_wait_scale}}
    from workbench.replay.prepare import coerce_config, load_workload

    workload = load_workload(coerce_config(cfg))
    base, rounds = trace_rate(workload)
    _scales_in_range(base, scales)
    result = PlanResult(Path(trace).name, str(parsed), base, [float(s) for s in scales],
                        options, table,
                        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                        max_replicas=max_replicas, rounds_per_unit=rounds,
                        tool_wait_scale=tool_wait_scale)
    _announce(result, cfg, workload)
    searches = [(option, scale) for scale in result.scales for option in options]
    workers = min(usable_cores() if parallel is None else parallel, len(searches))
    if workers < 1:
        raise ConfigError(f"plan: parallel must be >= 1, got {parallel}", field="plan.parallel")
    args = [(cfg, option, scale, base * scale, max_replicas, parsed)
            for option, scale in searches]

    def add(p: Probe) -> None:
        result.probes.append(p)
        if progress is not None:
            progress(p, result.probe_line(p))

    if workers == 1:  # one at a time, in this process: each probe reported as it ends
        for a in args:
            _search(*a, report=add)
        return _with_floors(result, cfg, parsed)
    # one search per process, up to the cores there are; the probes land in the plan in
    # the order one process would have run them (the same plan.json either way)
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=spawn_context(), initializer=die_with_parent,
        initargs=(os.getpid(), signal.SIGKILL),
    )
    try:
        with children_start():  # a submit may start a process
            futures = [pool.submit(_search, *a) for a in args]
        for fut in futures:
            for p in wait_result(fut):  # wakes for signals (signals.wait_result)
                add(p)
    except BaseException:
        # Ctrl-C, SIGTERM, a failed search: the searches still running stop now (a pool's
        # shutdown would wait for each to finish: tens of seconds). SIGKILL: a search
        # saves nothing, and SIGTERM would stop only its current probe's simulate
        for proc in multiprocessing.active_children():
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return _with_floors(result, cfg, parsed)


#: what shortens a plan's probes, in ``workbench plan``'s flags (its warnings say it)
SHORTEN = "--tool-wait-scale or --max-items"
#: what narrows a plan's probes' span of releases (the trace's rate × --scale)
SPAN_REMEDY = "to shorten it: a larger --scale, or --max-items"


def _announce(result: PlanResult, cfg: dict[str, Any], workload: Workload) -> None:
    """Warn once, before the first probe, when the probes at the plan's lowest rate (its
    longest) take more than ``LONG_RUN_MS`` of simulated time, or their releases span
    more than a day: every probe's ``simulate`` is told both were said (docs/arrival.md,
    "How long a run takes"; docs/plan.md)."""
    from workbench.arrival.schedule import span_warning
    from workbench.replay.plan import LONG_RUN_MS, build_plan, run_floor
    from workbench.replay.prepare import coerce_config

    scale = min(result.scales)
    run = coerce_config({**cfg, "arrival": {**cfg.get("arrival", {}),
                                            "rate": result.base_rate * scale}})
    planned = build_plan(run, workload)
    said = result.rate_words(scale)
    if warning := span_warning(planned.arrival()["arrival_span_ms"], SPAN_REMEDY):
        log.warning("plan: each probe at %s: %s", said, warning)
    floor = run_floor(planned, run.arrival)
    if floor is not None and floor.floor_ms > LONG_RUN_MS:
        log.warning("plan: each probe at %s: %s", said,
                    floor.sentence(virtual=True, shorten=SHORTEN))


def _with_floors(result: PlanResult, cfg: dict[str, Any], slo: SLO) -> PlanResult:
    """The floor (``_floor``) of every option that some rate never held pessimistically."""
    for option in result.options:
        if any(result.fewest(option, s, "high") is None for s in result.scales):
            result.floors[option.label] = _floor(cfg, option, slo)
    return result
