"""``plan``: the fewest replicas of each hardware option that hold an SLO, and the cost.

Given a trace (a file, a bundled one, or ``synthetic:...`` made by ``tracegen``), the
options to compare (a preset ``MODEL/GPU/tpN[/fp8|/fp8w]``, or a calibrated engine's
JSON from ``sim calibrate``; each with a router and a host KV tier) and an SLO (the sweep
grammar, ``metrics.slo``), ``plan`` replays the trace in virtual time on a simulated
cluster of N replicas at the trace's own rate and at scaled rates, and finds for each
option and rate the fewest replicas that hold the SLO: doubling N from 1 until it holds,
then bisecting. Every probe is a full virtual replay (``executors.virtual.simulate``);
the searches of different options and rates run in processes of their own, up to the
cores there are (``parallel``).
With a price per GPU-hour it states the cost per million tokens and per agent task
(a unit of the trace: a session, or one independent request). Every figure is
simulated and is labelled with its option and that preset's stated error against
published measurements (docs/hardware.md); docs/plan.md has the rules.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import json
import math
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.cores import usable_cores
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO
from workbench.signals import die_with_parent
from workbench.sim.presets import resolve
from workbench.sim.presets.stated import stated_error
from workbench.spawning import children_start, spawn_context

MAX_REPLICAS = 64
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
        return not self.engine.endswith(".json")

    @property
    def gpus_per_replica(self) -> int:
        """A preset's tensor parallelism; a calibrated engine is one replica's worth (1)."""
        return resolve(self.engine).tp if self.is_preset else 1

    @property
    def label(self) -> str:
        host = f" · host {self.host_kv_gb:g} GB" if self.host_kv_gb else ""
        return f"{self.engine} · {self.router}{host}"

    def knobs(self, replicas: int) -> dict[str, Any]:
        """The simulated cluster's engine knobs for ``replicas`` replicas."""
        if self.is_preset:
            base: dict[str, Any] = {"preset": self.engine}
        else:
            base = dict(json.loads(Path(self.engine).read_text(encoding="utf-8")))
            base = base.get("engine", base)  # sim calibrate's file: {"engine": {...}, ...}
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

    @property
    def gpus(self) -> int:
        return self.replicas * self.option.gpus_per_replica


@dataclass(slots=True)
class PlanResult:
    """Every probe, and per (option, scale) the fewest replicas that held (or None)."""

    trace: str
    slo: str
    base_rate: float
    scales: list[float]
    options: list[Option]
    price_per_gpu_hour: float | None
    probes: list[Probe] = field(default_factory=list)
    created: str = ""

    def fewest(self, option: Option, scale: float) -> Probe | None:
        """The held probe with the fewest replicas for ``option`` at ``scale``."""
        held = [p for p in self.probes if p.option == option and p.scale == scale and p.held]
        return min(held, key=lambda p: p.replicas) if held else None

    def cost(self, probe: Probe) -> dict[str, float | None]:
        """Dollars per million tokens (prompt + output) and per unit of work: the
        replicas' GPU-hours over the replay's span at ``price_per_gpu_hour``."""
        if self.price_per_gpu_hour is None or probe.span_s <= 0:
            return {"usd_per_mtok": None, "usd_per_task": None, "usd_per_hour": None}
        per_hour = probe.gpus * self.price_per_gpu_hour
        dollars = per_hour * probe.span_s / 3600
        tokens = probe.prompt_tokens + probe.output_tokens
        return {"usd_per_mtok": dollars / tokens * 1e6 if tokens else None,
                "usd_per_task": dollars / probe.units if probe.units else None,
                "usd_per_hour": per_hour}

    def answers(self) -> list[dict[str, Any]]:
        """One row per (scale, option): fewest replicas, GPUs, cost, label, stated error."""
        rows = []
        for scale in self.scales:
            for option in self.options:
                p = self.fewest(option, scale)
                row: dict[str, Any] = {
                    "scale": scale, "rate": self.base_rate * scale, "option": option.label,
                    "replicas": p.replicas if p else None, "gpus": p.gpus if p else None,
                    **(self.cost(p) if p else {"usd_per_mtok": None, "usd_per_task": None,
                                              "usd_per_hour": None}),
                    **({f"slo:{k}": v for k, v in p.values.items()} if p else {}),
                    "label": f"simulated · {option.label} · {stated_error(option.engine)}",
                }
                rows.append(row)
        return rows

    def _never_held(self, option: Option, scale: float) -> str:
        """What an option that never held did: the most replicas tried, its lowest worst
        ratio to the bound and the fewest replicas that reached it (when more did not
        lower it, the bound is under the option's floor, not a matter of replicas)."""
        tried = [p for p in self.probes if p.option == option and p.scale == scale]
        if not tried:
            return "not tried"
        low = min(p.worst_ratio for p in tried)
        first = min(p.replicas for p in tried if p.worst_ratio <= low * 1.005)
        return (f"none up to {max(p.replicas for p in tried)} (at best {low:.2f}× the "
                f"bound, from {first} replicas on)")

    def best(self, scale: float) -> tuple[Option, Probe] | None:
        """The cheapest option that held at ``scale``: fewest GPUs (then cost per hour)."""
        found = [(o, p) for o in self.options if (p := self.fewest(o, scale)) is not None]
        return min(found, key=lambda op: (op[1].gpus, op[0].label)) if found else None

    def answer(self) -> str:
        """The plan in one sentence (the trace's own rate; the scaled ones in the table)."""
        scale = self.scales[0]
        rate = f"{self.base_rate * scale:.2f} units/s"
        got = self.best(scale)
        if got is None:
            return (f"Simulated: no option held {self.slo} at {rate}: "
                    + "; ".join(f"{o.engine} {self._never_held(o, scale)}"
                                for o in self.options) + ".")
        option, probe = got
        cost = self.cost(probe)
        price = (f", ${cost['usd_per_mtok']:.3f} per million tokens"
                 if cost["usd_per_mtok"] is not None else "")
        others = [f"{o.engine} needs {p.replicas}" if (p := self.fewest(o, scale))
                  else f"{o.engine} {self._never_held(o, scale)}"
                  for o in self.options if o != option]
        return (f"Simulated ({stated_error(option.engine)}): {self.trace} at {rate} holds "
                f"{self.slo} on {probe.replicas} × {option.label} ({probe.gpus} GPUs{price})"
                + (f"; {', '.join(others)}" if others else "") + ".")

    def curve(self) -> list[dict[str, Any]]:
        """Every probe as a row: the curve behind the answer."""
        return [{"option": p.option.label, "scale": p.scale, "rate": p.rate,
                 "replicas": p.replicas, "gpus": p.gpus, "held": p.held,
                 "worst_ratio": p.worst_ratio, **p.values, "ok_rate": p.ok_rate,
                 "cached_tokens": p.cached_tokens, "host_cached_tokens": p.host_cached_tokens,
                 "prompt_tokens": p.prompt_tokens}
                for p in self.probes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.trace, "slo": self.slo, "base_rate": self.base_rate,
            "scales": self.scales, "price_per_gpu_hour": self.price_per_gpu_hour,
            "created": self.created,
            "options": [dataclasses.asdict(o) for o in self.options],
            "probes": [{**dataclasses.asdict(p), "option": dataclasses.asdict(p.option)}
                       for p in self.probes],
            "answers": self.answers(), "answer": self.answer(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanResult:
        options = [Option(**o) for o in d["options"]]
        probes = [Probe(**{**p, "option": Option(**p["option"])}) for p in d["probes"]]
        return cls(d["trace"], d["slo"], d["base_rate"], list(d["scales"]), options,
                   d["price_per_gpu_hour"], probes, d.get("created", ""))

    def save(self, out_dir: str | Path, plan_id: str | None = None) -> Path:
        """``OUT_DIR/PLAN_ID/plan.json`` (a new directory); returns the directory."""
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        d = Path(out_dir) / (plan_id or f"{stamp}-plan")
        d.mkdir(parents=True, exist_ok=False)
        (d / PLAN_FILE).write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
        return d


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
    out = []
    for e in engines:
        if e.endswith(".json"):
            if not Path(e).is_file():
                raise ConfigError(f"plan: engine file {e!r} does not exist")
        else:
            try:
                resolve(e)
            except ValueError as exc:
                raise ConfigError(f"plan: {exc}") from None
        out += [Option(e, r, float(h)) for r in routers for h in host_kv_gb]
    return out


def _measure(cfg: dict[str, Any], option: Option, scale: float, rate: float, replicas: int,
             slo: SLO) -> Probe:
    import workbench.executors.virtual as virtual
    from workbench.metrics import to_frame

    run = {**cfg, "arrival": {**cfg.get("arrival", {}), "rate": rate},
           "target": {"url": "sim", "engine": option.knobs(replicas)}}
    result = virtual.simulate(run)
    frame = to_frame(result)
    ev = slo.evaluate(frame)
    verdict = slo.verdict(ev["values"], ev["ok_rate"])
    recs = result.records
    sends = [r.dispatch_ns for r in recs if r.dispatch_ns is not None]
    ends = [r.end_ns for r in recs if r.end_ns is not None]
    span = (max(ends) - min(sends)) / 1e9 if sends and ends else 0.0
    return Probe(
        option, scale, rate, replicas, verdict["held"], verdict["worst_ratio"],
        ev["values"], ev["ok_rate"], len({r.unit_ordinal for r in recs}),
        sum(r.prompt_tokens or 0 for r in recs), sum(r.completion_tokens or 0 for r in recs),
        sum(r.cached_tokens or 0 for r in recs),
        sum(int(r.extra.get("host_cached_tokens", 0)) for r in recs), span)


def _fewest(probe: Callable[[int], Probe], max_replicas: int) -> None:
    """Doubling from 1 until the SLO holds, then bisection between the last broken and
    the first held count; every probe goes to the plan through ``probe``."""
    good: int | None = None
    bad, n = 0, 1
    while n <= max_replicas:
        if probe(n).held:
            good = n
            break
        bad, n = n, n * 2
    if good is None:
        return
    while good - bad > 1:
        mid = (good + bad) // 2
        if probe(mid).held:
            good = mid
        else:
            bad = mid


def _search(cfg: dict[str, Any], option: Option, scale: float, rate: float,
            max_replicas: int, slo: dict[str, float]) -> list[Probe]:
    """One option's fewest-replicas search at one rate, in a process of its own: its
    probes in the order they ran (as ``plan`` one at a time would add them)."""
    parsed = SLO.parse(slo)
    assert parsed is not None  # parsed once in plan(); its dict form round-trips
    probes: list[Probe] = []

    def probe(n: int) -> Probe:
        probes.append(_measure(cfg, option, scale, rate, n, parsed))
        return probes[-1]

    _fewest(probe, max_replicas)
    return probes


def trace_rate(cfg: dict[str, Any]) -> float:
    """The trace's own arrival rate, units per second (docs/arrival.md's measured rate)."""
    from workbench.replay.prepare import coerce_config, load_workload

    wl = load_workload(coerce_config(cfg))
    starts = sorted(u.arrival_ms for u in wl.units)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        raise ConfigError("plan: the trace's units all arrive at once; it has no rate to "
                          "scale (give --rate to a timed trace)")
    return (len(starts) - 1) / ((starts[-1] - starts[0]) / 1000)


def plan(trace: str, engines: Sequence[str], slo: Any, *,
         scales: Sequence[float] = (1.0, 2.0), routers: Sequence[str] = ("prefix-aware",),
         host_kv_gb: Sequence[float] = (0.0,), price_per_gpu_hour: float | None = None,
         max_items: int | None = None, max_replicas: int = MAX_REPLICAS,
         context: dict[str, Any] | None = None,
         progress: Callable[[Probe], None] | None = None,
         parallel: int | None = None) -> PlanResult:
    """Fewest replicas per option and rate scale (see the module docstring).

    ``parallel``: processes running the (option, scale) searches at once; None: as many
    as the cores this process may use (1: all in this process)."""
    parsed = SLO.parse(slo)
    if parsed is None:
        raise ConfigError("plan: an SLO is required, e.g. 'ttft_ms:p90<=2000'")
    if not scales or any(not (s > 0 and math.isfinite(s)) for s in scales):
        raise ConfigError(f"plan: scales must be positive numbers, got {list(scales)}")
    if not 1 <= max_replicas <= 1024:
        raise ConfigError(f"plan: max_replicas must be in [1, 1024], got {max_replicas}")
    if price_per_gpu_hour is not None and not price_per_gpu_hour >= 0:
        raise ConfigError(f"plan: price per GPU-hour must be >= 0, got {price_per_gpu_hour}")
    options = _options(engines, routers, host_kv_gb)
    cfg: dict[str, Any] = {"trace": {"path": trace, **({"max_items": max_items}
                                                       if max_items else {})}}
    if context:
        cfg["context"] = context
    base = trace_rate(cfg)
    result = PlanResult(Path(trace).name, str(parsed), base, [float(s) for s in scales],
                        options, price_per_gpu_hour,
                        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    searches = [(option, scale) for scale in result.scales for option in options]
    workers = min(usable_cores() if parallel is None else parallel, len(searches))
    if workers < 1:
        raise ConfigError(f"plan: parallel must be >= 1, got {parallel}")
    args = [(cfg, option, scale, base * scale, max_replicas, parsed.to_dict())
            for option, scale in searches]
    if workers == 1:  # one at a time, in this process: each probe reported as it ends
        for a in args:
            def probe(n: int, a: tuple[Any, ...] = a) -> Probe:
                p = _measure(a[0], a[1], a[2], a[3], n, parsed)
                result.probes.append(p)
                if progress is not None:
                    progress(p)
                return p

            _fewest(probe, max_replicas)
        return result
    # one search per process, up to the cores there are; the probes land in the plan in
    # the order one process would have run them (the same plan.json either way)
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=spawn_context(), initializer=die_with_parent,
        initargs=(os.getpid(), signal.SIGKILL),
    ) as pool:
        with children_start():  # a submit may start a process
            futures = [pool.submit(_search, *a) for a in args]
        for fut in futures:
            for p in fut.result():
                result.probes.append(p)
                if progress is not None:
                    progress(p)
    return result
