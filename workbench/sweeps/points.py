"""One sweep point: run it (live or in virtual time), read its numbers, pool its repeats.

Each repeat is an ordinary run directory; ``point_metrics`` reads it back into the flat
numbers a sweep manifest keeps, and ``pool`` gives a point's means with 95 % Student-t
intervals (docs/sweeps.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import workbench.catalogs.requests as catalog
import workbench.catalogs.runs as runs
from workbench.config import RunConfig
from workbench.metrics.distribution import QS
from workbench.metrics.slo import SLO
from workbench.records import RunResult, Workload

#: summary stats copied per latency metric (the catalog's latency rows)
LATENCY = catalog.LATENCY
STATS = ("mean", *(f"p{q:g}" for q in QS))
#: the run-level figures a point keeps (``catalogs.runs``)
SCALARS = runs.SWEPT
# two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30; normal beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def run_complete(run_dir: Path) -> bool:
    """A repeat finished and was saved (its summary is the last file a run writes)."""
    from workbench.storage.rundir import MANIFEST, SUMMARY, read_manifest

    if not (run_dir / SUMMARY).is_file() or not (run_dir / MANIFEST).is_file():
        return False
    return read_manifest(run_dir).status == "completed"


def point_metrics(run_dir: str | Path, slo: SLO | None,
                  result: RunResult | None = None) -> dict[str, Any]:
    """The flat numbers of one stored run (summary percentiles, throughput, hits, SLO);
    ``result``: the same run in memory, else its ``records.parquet`` columns are read."""
    from workbench.metrics import to_frame
    from workbench.metrics.columns import available, stored
    from workbench.metrics.server_side import preemptions
    from workbench.storage.rundir import (
        SUMMARY,
        TIMELINE,
        load,
        read_json,
        read_jsonl,
        read_manifest,
    )

    d = Path(run_dir)
    summary = read_json(d / SUMMARY)
    out: dict[str, Any] = {k: summary.get(k) for k in SCALARS}
    for metric in LATENCY:
        block = summary.get(metric) or {}
        for stat in STATS:
            out[f"{metric}_{stat}"] = block.get(stat)
    # the run with its records in memory, or None: read from its files and parquet columns
    kept = result if result is not None and not result.records_on_disk else None
    if kept is None and not available():
        kept = load(d)  # no pyarrow: the records are read back (into memory)
    if kept is None:
        timeline = read_jsonl(d / TIMELINE) if (d / TIMELINE).exists() else []
        manifest = read_manifest(d)
    else:
        timeline, manifest = kept.metrics_timeline, kept.manifest
    out["preemptions"] = preemptions(timeline)
    if manifest.virtual_duration_s is not None:
        out["virtual_duration_s"] = manifest.virtual_duration_s
    if slo is not None:
        if kept is None:  # pooled ITL percentiles need the token times in the columns
            itl = any(b.metric == "itl_ms" and b.q is not None for b in slo.bounds)
            data: Any = stored(d, token_times=True if itl else None)
        else:
            data = to_frame(kept)
        ev = slo.evaluate(data)
        out.update({f"slo:{k}": v for k, v in ev["values"].items()})
        out["ok_rate"] = ev["ok_rate"]
        dur = out.get("duration_s")
        out["goodput_rps"] = ev["good_requests"] / dur if dur else None
    return out


def pool(repeats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean of every numeric field over repeats, with ``KEY_lo``/``KEY_hi`` 95 % t-intervals."""
    out: dict[str, Any] = {"repeats": len(repeats)}
    keys = [k for k in (repeats[0] if repeats else {}) if k != "repeats"]
    for k in keys:
        vals = [r.get(k) for r in repeats]
        nums = np.asarray([v for v in vals if isinstance(v, int | float) and v is not None],
                          dtype=float)
        nums = nums[np.isfinite(nums)]
        if nums.size == 0:
            out[k] = None
            continue
        mean = float(nums.mean())
        out[k] = mean
        if nums.size >= 2:
            t = _T975[nums.size - 2] if nums.size - 1 <= len(_T975) else 1.96
            half = t * float(nums.std(ddof=1)) / math.sqrt(nums.size)
            out[f"{k}_lo"], out[f"{k}_hi"] = mean - half, mean + half
    return out


#: the trace a sweep's process read last (its key: ``_trace_key``); its points share it
_READ: dict[tuple[Any, ...], Workload] = {}


def _trace_key(cfg: RunConfig) -> tuple[Any, ...] | None:
    """What names the workload ``cfg`` reads: its trace section and the file's identity
    (size, modification time, inode: a file written over is read again); None for what
    is not read from one file (a synthetic description, a folder, no such file)."""
    import json
    import os
    import stat

    from workbench.workloads.standard import bundled_or_path
    from workbench.workloads.synthetic import SYNTHETIC_PREFIX

    path = cfg.trace.path
    if not path or path.startswith(SYNTHETIC_PREFIX):
        return None
    try:
        st = os.stat(bundled_or_path(path))
    except OSError:
        return None  # load_workload says what is wrong with it
    if not stat.S_ISREG(st.st_mode):
        return None
    section = json.dumps(cfg.to_dict()["trace"], sort_keys=True, default=repr)
    return section, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _read_once(cfg: RunConfig) -> Workload | None:
    """``cfg``'s workload read once for every point of a sweep's process that replays the
    same trace file (a sweep's points differ in their arrival, engine or executor, not in
    the trace): the trace's reading and checks are paid once a process, not once a point
    (docs/sweeps.md, "Points"). None (each run reads its own) for a trace that is
    not one file, or a streamed workload (its units are drawn as a run asks for them)."""
    from workbench.replay.prepare import load_workload

    key = _trace_key(cfg)
    if key is None:
        return None
    if key not in _READ:
        _READ.clear()  # one trace held at a time
        workload = load_workload(cfg)
        if workload.streamed:
            return workload  # used once: a stream is drawn as the run goes
        _READ[key] = workload
    return _READ[key]


def forget_traces() -> None:
    """Let go of the trace ``_read_once`` holds (a sweep run in this process is done)."""
    _READ.clear()


def simulate_and_measure(cfg_dict: dict[str, Any], slo: dict[str, float] | None,
                         max_error_rate: float | None = None) -> tuple[str, dict[str, Any]]:
    """``simulate`` one repeat, then its ``point_metrics``, from plain data (a worker's);
    the sweep announced how long its points take, once (``SweepRunner.check``);
    ``max_error_rate``: recorded in the run's manifest."""
    import time

    from workbench.executors.virtual import simulate

    wall, cpu = time.perf_counter(), time.process_time()
    cfg = RunConfig.from_dict(cfg_dict)
    result = simulate(cfg, workload=_read_once(cfg), announced=True,
                      max_error_rate=max_error_rate)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    run_dir = str(result.run_dir)
    metrics = point_metrics(run_dir, SLO.parse(slo), result)
    # what the point cost this host (simulate incl. saving the run directory)
    metrics.update(simulate_wall_s=round(wall, 3), simulate_cpu_s=round(cpu, 3))
    return run_dir, metrics
