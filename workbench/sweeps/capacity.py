"""``capacity_search``: the highest load (rate or concurrency) at which an SLO holds.

Bracketing, then bisection (docs/sweeps.md). Probe ``lo``: if the SLO is broken
there, the capacity lies below the range (``below_range``). Probe ``hi``: while
the SLO still holds, move the bracket up (``hi × grow``) at most ``max_probes``
times (``above_range`` if it never breaks). Then bisect the bracket [held,
broken] until it is no wider than ``tolerance``; the capacity is its held end.
Every probe is an ordinary sweep point with its run directories, kept as
evidence in the sweep manifest. Assumes the SLO verdict is monotone in the
axis (more load never makes latency better), which is what a capacity means.
An integer axis (``max_concurrency``, or integer ``lo``/``hi``/``tolerance``)
is searched on integers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import workbench.sweeps.spec as spec_mod
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO
from workbench.replay.prepare import coerce_config
from workbench.sweeps.grid import SloSpec, run_sync
from workbench.sweeps.store import Sweep
from workbench.sweeps.sweep_runner import Progress, SweepRunner

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
    repeats: int = 1,
    virtual: bool = False,
    out_dir: str | Path | None = None,
    sweep_id: str | None = None,
    label: str | None = None,
    progress: Progress | None = None,
) -> Sweep:
    """Search ``axis`` in [lo, hi] (and above, by bracketing) for the SLO's capacity.

    ``sweep.capacity`` = ``{"value", "status", "bracket", "tolerance", "probes"}``;
    ``status`` is ``found``, ``below_range`` (broken at ``lo``) or ``above_range``
    (held at the last bracket probe).
    """
    base = coerce_config(cfg)
    slo_obj = SLO.parse(slo)
    if slo_obj is None:
        raise ConfigError("a capacity search needs an slo (e.g. 'ttft_ms:p90<=2000')")
    path = spec_mod.resolve_path(axis)
    integer = path in INTEGER_AXES or all(
        isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi, tolerance))
    if not 0 < lo < hi:
        raise ConfigError(f"capacity search needs 0 < lo < hi, got lo={lo}, hi={hi}")
    if tolerance <= 0 or grow <= 1 or max_probes < 2:
        raise ConfigError("capacity search needs tolerance > 0, grow > 1, max_probes >= 2")
    if integer:
        lo, hi, tolerance = int(lo), int(hi), max(1, int(tolerance))
    runner = SweepRunner(
        base, kind="capacity",
        spec={"axis": path, "lo": lo, "hi": hi, "tolerance": tolerance, "grow": grow,
              "max_probes": max_probes, "integer": integer},
        axes=[path], repeats=repeats, slo=slo_obj, virtual=virtual, out_dir=out_dir,
        sweep_id=sweep_id, label=label, progress=progress,
    )
    runner.check([runner.entry({path: lo})])
    probes: list[dict[str, Any]] = []

    async def held(value: float) -> bool:
        entry = await runner.measure({path: value})
        if entry["index"] not in [p["index"] for p in probes]:
            probes.append(entry)
        return bool(entry["slo"]["held"])

    with runner.ends_on_error():
        result = await _search(held, lo, hi, tolerance, grow, max_probes, integer)
    result.update(axis=path, tolerance=tolerance, probes=[p["index"] for p in probes])
    runner.sweep.manifest["capacity"] = result
    return runner.finish("completed")


async def _search(held: Any, lo: float, hi: float, tol: float, grow: float, max_probes: int,
                  integer: bool) -> dict[str, Any]:
    n = 1
    if not await held(lo):
        return {"value": None, "status": "below_range", "bracket": [None, lo],
                "note": f"the SLO is broken already at {lo}"}
    good: float = lo
    bad: float | None = None
    probe: float = hi
    while bad is None:
        n += 1
        if await held(probe):
            good = probe
            if n >= max_probes:
                return {"value": good, "status": "above_range", "bracket": [good, None],
                        "note": f"the SLO still held at {good} after {n} probes"}
            probe = int(probe * grow) if integer else probe * grow
        else:
            bad = probe
    while bad - good > tol and n < max_probes:
        mid = (good + bad) // 2 if integer else (good + bad) / 2
        if mid in (good, bad):
            break
        n += 1
        if await held(mid):
            good = mid
        else:
            bad = mid
    status = "found" if bad - good <= tol else "max_probes"
    return {"value": good, "status": status, "bracket": [good, bad]}


def capacity_search(cfg: RunConfig | dict[str, Any], axis: str, lo: float, hi: float,
                    slo: SloSpec, **kwargs: Any) -> Sweep:
    """Synchronous ``capacity_search_async`` (same arguments)."""
    return run_sync(
        capacity_search_async(cfg, axis, lo, hi, slo, **kwargs))
