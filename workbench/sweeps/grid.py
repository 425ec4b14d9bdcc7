"""``sweep``: every point of a grid or list, in order, with early stop on a broken SLO
(``stop_margin``, ``stop_after``: docs/sweeps.md, "Early stop").
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import workbench.sweeps.spec as spec_mod
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.metrics.slo import SLO
from workbench.plurals import counted
from workbench.replay.loops import run_anywhere
from workbench.replay.prepare import coerce_config
from workbench.sweeps.serve import SERVE_PREFIX, ServeSpec, run_server_points
from workbench.sweeps.store import Sweep
from workbench.sweeps.sweep_runner import PointRuns, SweepRunner

SloSpec = SLO | Mapping[str, Any] | Sequence[str] | str | None


async def sweep_async(
    cfg: RunConfig | dict[str, Any],
    over: spec_mod.Over,
    *,
    slo: SloSpec = None,
    stop_margin: float | None = None,
    stop_after: int = 1,
    serve: ServeSpec | None = None,
    gpus: int | None = None,
    **runs: Unpack[PointRuns],
) -> Sweep:
    """Run ``cfg`` at every point of ``over`` into ``out_dir/sweep_id`` and return the sweep.

    ``over``: a grid ``{"arrival.rate": [1, 2, 4]}`` or a list of points (docs/sweeps.md,
    "Points"); ``slo``: the SLO grammar (``"ttft_ms:p90<=2000,ok>=0.99"``); ``serve``: a
    server per server point, ``cfg``'s target URL where it answers (``sweeps.serve``);
    ``gpus``: GPUs per instance, for the Pareto plot's per-GPU throughput. How the points
    run (repeats, virtual, parallel, the directory; the same ``sweep_id`` resumes):
    ``PointRuns``.
    """
    points = spec_mod.expand(over)
    # sweeping arrival.rate needs no base rate: the base takes the first point's
    base = coerce_config(spec_mod.with_rate(cfg, spec_mod.swept_rate(points)))
    slo_obj = SLO.parse(slo)
    if stop_margin is not None and (slo_obj is None or stop_margin < 0):
        raise ConfigError("stop_margin needs an slo and must be >= 0", field="sweep.stop_margin")
    if stop_after < 1:
        raise ConfigError(f"stop_after must be >= 1, got {stop_after}", field="sweep.stop_after")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise ConfigError(f"gpus must be an integer >= 1, got {gpus!r}",  # before the directory
                          field="sweep.gpus")
    extra: dict[str, Any] = {}
    if serve is not None:
        points = _serve_points(base, serve, points, stop_margin, runs.get("virtual", False))
        extra["serve"] = serve.describe()
    runner = SweepRunner(
        base, kind="grid",
        spec={"points": points, "stop_margin": stop_margin, "stop_after": stop_after,
              **extra},
        axes=list(points[0]), slo=slo_obj, **runs,
    )
    if gpus is not None:
        runner.sweep.manifest.gpus = gpus
    entries = [runner.entry(p) for p in points]
    with runner.ends_on_error():  # a stop while thousands of points are checked
        await runner.check(entries)
    runner.save()  # every point is listed (pending) before the first run
    if serve is not None:
        from workbench.backends.extras import resolve_headers

        headers = resolve_headers(base.backend.options.get("headers") or {})
        with runner.ends_on_error():
            failed = await run_server_points(runner, entries, serve, base.target.url, headers)
        runner.sweep.manifest.failed_points = failed
        return runner.finish("completed_with_failures" if failed else "completed")
    status = "completed"
    with runner.ends_on_error():
        broken = 0
        for start in range(0, len(entries), runner.parallel):
            window = entries[start:start + runner.parallel]
            await runner.measure_many(window)
            for i, e in enumerate(window):
                if stop_margin is None:
                    break
                v = e.get("slo") or {"held": True}  # broken by more than the margin?
                by_margin = not v.get("held") and (v["worst_ratio"] > 1.0 + stop_margin
                                                   or not v.get("ok_held"))
                broken = broken + 1 if by_margin else 0
                if broken >= stop_after:
                    skipped = entries[start + i + 1:]
                    for s in skipped:
                        if s["status"] != "done":
                            s["status"] = "skipped"
                    runner.sweep.manifest.stopped_early = {
                        "after_point": e["index"],
                        "reason": f"{counted(broken, 'point')} in a row broke the SLO by more than "
                                  f"{stop_margin:.0%}",
                        "skipped": [s["index"] for s in skipped],
                    }
                    status = "stopped_early"
                    break
            if status == "stopped_early":
                break
    return runner.finish(status)


def _serve_points(base: RunConfig, serve: ServeSpec, points: list[spec_mod.Point],
                  stop_margin: float | None, virtual: bool) -> list[spec_mod.Point]:
    """Every server point × every client point, the server's values first."""
    serve.check()
    if base.target.is_sim or virtual:
        raise ConfigError("--serve starts a server: give --target http://127.0.0.1:PORT, the "
                          "URL the command serves on (not 'sim', not --virtual)")
    if stop_margin is not None:
        raise ConfigError("--stop-margin does not combine with --serve (a broken SLO on one "
                          "server says nothing of the next)")
    servers = math.prod(len(v) for v in serve.over.values())
    spec_mod.check_points(servers * len(points), f"{servers} server × {len(points)} client")
    return [{**{SERVE_PREFIX + k: v for k, v in s.items()}, **p}
            for s in serve.points() for p in points]


def run_sync(coro: Any) -> Any:
    """Run a sweep coroutine from sync code: on this thread (SIGTERM stops it as Ctrl-C
    does), or from a running loop (a notebook cell) on a worker thread (``run_anywhere``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from workbench.signals import run_with_sigterm

        with asyncio.Runner() as runner:
            return run_with_sigterm(runner, coro)
    return run_anywhere(coro)


def sweep(cfg: RunConfig | dict[str, Any], over: spec_mod.Over, **kwargs: Any) -> Sweep:
    """Synchronous ``sweep_async`` (same arguments)."""
    return run_sync(sweep_async(cfg, over, **kwargs))
