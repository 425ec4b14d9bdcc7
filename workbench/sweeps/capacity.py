"""``capacity_search``: the highest load (rate or concurrency) at which an SLO holds.

Bracketing, then bisection, ``parallel`` probes a round in virtual time; integer axes on
integers, float probes on a grid of ``probe_digits`` (docs/sweeps.md, "Capacity search").
Every probe is an ordinary sweep point, kept as evidence in the sweep manifest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import workbench.sweeps.spec as spec_mod
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO
from workbench.plurals import counted
from workbench.replay.prepare import coerce_config
from workbench.sweeps.grid import SloSpec, run_sync
from workbench.sweeps.store import Sweep
from workbench.sweeps.sweep_runner import PointRuns, SweepRunner

#: a capacity search's probes at most (docs/config-bounds.md, "Plans")
MAX_PROBES = 1_000

INTEGER_AXES = ("arrival.max_concurrency", "arrival.warmup", "trace.max_items")


async def capacity_search_async(
    cfg: RunConfig | dict[str, Any],
    axis: str,
    lo: float,
    hi: float,
    slo: SloSpec,
    *,
    tolerance: float,
    grow: float = 2.0,
    max_probes: int = 24,
    over: Mapping[str, Sequence[Any]] | None = None,
    **runs: Unpack[PointRuns],
) -> Sweep:
    """Search ``axis`` in [lo, hi] (and above, by bracketing) for the SLO's capacity.

    ``sweep.capacity``: ``value``, ``status`` (``found``, ``below_range``, ``above_range``),
    ``bracket``, ``tolerance``, ``probes``, ``rounds``. ``over``: other axes, each
    combination a configuration searched on its own in the one sweep (then
    ``capacity["configurations"]``: docs/sweeps.md, "Configurations"). How the probes
    run: ``PointRuns``.
    """
    path = spec_mod.resolve_path(axis)
    # searching arrival.rate needs no base rate: the base takes lo
    base = coerce_config(spec_mod.with_rate(cfg, lo if path == spec_mod.RATE else None))
    slo_obj = SLO.parse(slo)
    if slo_obj is None:
        raise ConfigError("a capacity search needs an slo (e.g. 'ttft_ms:p90<=2000')")
    integer = path in INTEGER_AXES or all(
        isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi, tolerance))
    if not 0 < lo < hi:
        raise ConfigError(f"capacity search needs 0 < lo < hi, got lo={lo}, hi={hi}")
    for name, value, ok, rule in (
        ("tolerance", tolerance, tolerance > 0, "> 0"),
        ("grow", grow, grow > 1, "> 1"),
        ("max_probes", max_probes, 2 <= max_probes <= MAX_PROBES, f"in [2, {MAX_PROBES}]"),
    ):
        if not ok:  # its field: the CLI names the flag that gave it (commands._flags)
            raise ConfigError(f"capacity search needs {name} {rule}, got {value}",
                              field=f"capacity.{name}")
    if integer:
        lo, hi, tolerance = int(lo), int(hi), max(1, int(tolerance))
    configs = spec_mod.expand(over) if over else [{}]
    if any(path in conf for conf in configs):
        raise ConfigError(f"--over {path}: the searched axis takes no values of its own")
    runner = SweepRunner(
        base, kind="capacity",
        spec={"axis": path, "lo": lo, "hi": hi, "tolerance": tolerance, "grow": grow,
              "max_probes": max_probes, "integer": integer,
              **({"over": {k: list(v) for k, v in over.items()}} if over else {})},
        axes=[*configs[0], path], slo=slo_obj, **runs,
    )
    with runner.ends_on_error():  # a stop while the points are checked
        await runner.check([runner.entry({**conf, path: lo}) for conf in configs])
    results = []
    with runner.ends_on_error():
        for conf in configs:  # bounded: one search a configuration
            results.append(await _search_one(runner, conf, path, lo, hi, tolerance, grow,
                                             max_probes, integer))
    if len(results) == 1:
        result = {k: v for k, v in results[0].items() if k != "params"}
    else:
        result = {"status": "per configuration", "configurations": results,
                  "probes": [i for r in results for i in r["probes"]],
                  "rounds": sum(r["rounds"] for r in results)}
    result.update(axis=path, tolerance=tolerance)
    runner.sweep.manifest.capacity = result
    return runner.finish("completed")


async def _search_one(runner: SweepRunner, conf: Mapping[str, Any], path: str, lo: float,
                      hi: float, tolerance: float, grow: float, max_probes: int,
                      integer: bool) -> dict[str, Any]:  # fmt: skip
    """One configuration's search (``conf``: the other axes' values) and its probes."""
    probes: list[int] = []

    async def held(values: list[float]) -> list[bool]:
        """Probe ``values`` (at once: in ``runner.parallel`` processes in virtual time)."""
        entries = [runner.entry({**conf, path: v}) for v in values]
        await runner.measure_many(entries)
        probes.extend(e["index"] for e in entries if e["index"] not in probes)
        return [bool(e["slo"]["held"]) for e in entries]

    result = await _search(held, lo, hi, tolerance, grow, max_probes, integer,
                           runner.parallel)
    return {"params": dict(conf), **result, "probes": probes}


async def _search(held: Any, lo: float, hi: float, tol: float, grow: float, max_probes: int,
                  integer: bool, width: int = 1) -> dict[str, Any]:
    """Bracket, then cut the bracket into ``width + 1`` parts a round (``width`` probes at
    once; 1: bisection), a round's verdicts read in order (docs/sweeps.md)."""
    rounds = 1
    digits = None if integer else probe_digits(tol)
    first = [lo, hi] if width > 1 else [lo]  # (max_probes >= 2: checked by the caller)
    verdicts = await held(first)
    n = len(first)
    if not verdicts[0]:
        return {"value": None, "status": "below_range", "bracket": [None, lo],
                "note": f"the SLO is broken already at {lo}", "rounds": rounds}
    good: float = lo
    bad: float | None = None
    if len(first) == 2:
        good, bad = (hi, None) if verdicts[1] else (lo, hi)
        probe = _grown(hi, grow, integer, digits)
    else:
        probe = hi
    while bad is None:
        if n >= max_probes:  # the SLO still held and no probe is left
            return {"value": good, "status": "above_range", "bracket": [good, None],
                    "note": f"the SLO still held at {good} after {counted(n, 'probe')}",
                    "rounds": rounds}
        values = [probe]
        while len(values) < min(width, max_probes - n):
            values.append(_grown(values[-1], grow, integer, digits))
        rounds += 1
        n += len(values)
        good, bad = _cut(good, None, values, await held(values))
        probe = _grown(values[-1], grow, integer, digits)
    while bad - good > tol and n < max_probes:
        k = min(width, max_probes - n)
        values = _inner(good, bad, k, integer, digits)
        if not values:
            break
        rounds += 1
        n += len(values)
        good, cut = _cut(good, bad, values, await held(values))
        bad = cut if cut is not None else bad
    status = "found" if bad - good <= tol else "max_probes"
    return {"value": good, "status": status, "bracket": [good, bad], "rounds": rounds}


def _grown(value: float, grow: float, integer: bool, digits: int | None = None) -> float:
    if integer:
        return int(value * grow)
    return value * grow if digits is None else round(value * grow, digits)


def _inner(good: float, bad: float, k: int, integer: bool,
           digits: int | None = None) -> list[float]:
    """``k`` distinct points strictly inside (good, bad) cutting it into equal parts
    (integers, or floats rounded to ``digits`` decimals)."""
    pts: list[float]
    if integer:
        pts = sorted({int((good * (k + 1 - i) + bad * i) // (k + 1)) for i in range(1, k + 1)})
    else:
        pts = [(good * (k + 1 - i) + bad * i) / (k + 1) for i in range(1, k + 1)]
        if digits is not None:
            pts = sorted({round(p, digits) for p in pts})
    return [p for p in pts if good < p < bad]


def probe_digits(tolerance: float) -> int:
    """Decimals a float probe is rounded to: a tenth of the tolerance (0.5: 2 decimals)."""
    return -math.floor(math.log10(tolerance / 10))


def _cut(good: float, bad: float | None, values: list[float],
         verdicts: list[bool]) -> tuple[float, float | None]:
    """The bracket after probing ``values`` (ascending): held up to the first broken."""
    for value, ok in zip(values, verdicts, strict=True):
        if not ok:
            return good, value
        good = value
    return good, bad


def capacity_search(cfg: RunConfig | dict[str, Any], axis: str, lo: float, hi: float,
                    slo: SloSpec, **kwargs: Any) -> Sweep:
    """Synchronous ``capacity_search_async`` (same arguments)."""
    return run_sync(
        capacity_search_async(cfg, axis, lo, hi, slo, **kwargs))
