"""Replaying measured runs in virtual time against an engine config, and comparing.

``replay_config`` turns a measured run's manifest into the same run aimed at the
embedded engine; ``predict`` and ``predict_repeats`` compare its p50 TTFT and p50
TPOT with what was measured (docs/calibration.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError
from workbench.records import RunResult

if TYPE_CHECKING:
    from workbench.config import RunConfig


def replay_config(measured: RunResult) -> RunConfig:
    """The measured run's config, aimed at the embedded engine in virtual time."""
    from workbench.config import RunConfig

    conf = dict(measured.manifest.config or {})
    if not conf:
        raise ConfigError(f"{measured.run_dir}: manifest.json has no config to replay")
    conf.update(target={"url": "sim", "engine": {}}, out_dir=None, run_id=None)
    # one process; no gc.freeze: in virtual time it protects no timing, and its full
    # collection (~15 ms) costs more than a small replay (calibration runs hundreds)
    conf["executor"] = {"gc_freeze": False}
    return RunConfig.from_dict(conf)


def predict(run_dir: str | Path, engine: dict[str, Any]) -> dict[str, Any]:
    """Replay a measured run's config in virtual time against ``engine`` and compare
    p50 TTFT and p50 TPOT with what was measured: ``{measured, predicted, error_pct}``."""
    from workbench.executors.virtual import simulate
    from workbench.metrics import summarize
    from workbench.storage.rundir import load

    measured = load(run_dir)
    sim = summarize(simulate(replay_config(measured), engine=dict(engine)))
    real = summarize(measured)
    out: dict[str, Any] = {"run": str(run_dir)}
    for metric in ("ttft_ms", "tpot_ms"):
        m, p = real[metric]["p50"], sim[metric]["p50"]
        err = None if not m or p is None else (p - m) / m * 100
        out[metric] = {"measured_p50": m, "predicted_p50": p, "error_pct": err}
    return out


def predict_repeats(run_dirs: Sequence[str | Path], engine: dict[str, Any]) -> dict[str, Any]:
    """``predict`` for repeated runs of one config: the measured p50s are over all
    their ok records together (each run's own p50 beside them, and their spread as
    a share of the pooled p50); the prediction is one virtual replay. TTFT is also
    split by admission (``by_admission``, ``ttft_by_admission``): the model prices a
    request that joins a running batch and one of the first wave differently, and the
    held-out and calibration traces mix them differently (docs/calibration.md)."""
    import pandas as pd

    from workbench.executors.virtual import simulate
    from workbench.metrics.frame import ok_rows
    from workbench.storage.rundir import load

    if not run_dirs:
        raise ConfigError("predict_repeats needs at least one run directory")
    measured = [load(d) for d in run_dirs]
    configs = {json.dumps(replay_config(m).to_dict() | {"seed": None}, sort_keys=True,
                          default=str) for m in measured}  # fmt: skip
    if len(configs) != 1:
        raise ConfigError("predict_repeats: the runs differ in more than their seed")
    frames = [ok_rows(m) for m in measured]
    simulated = simulate(replay_config(measured[0]), engine=dict(engine))
    sim = ok_rows(simulated)
    out: dict[str, Any] = {"runs": [str(d) for d in run_dirs]}
    pooled = pd.concat(frames)
    for metric in ("ttft_ms", "tpot_ms"):
        per_run = [float(f[metric].median()) for f in frames]
        m, p = float(pooled[metric].median()), float(sim[metric].median())
        out[metric] = {
            "measured_p50": m,
            "measured_p50_per_run": per_run,
            "spread_pct": (max(per_run) - min(per_run)) / m * 100 if m else None,
            "predicted_p50": p,
            "error_pct": (p - m) / m * 100 if m else None,
        }
    out["ttft_ms"]["by_admission"] = ttft_by_admission(measured, simulated)
    return out


def ttft_by_admission(measured: Sequence[RunResult], simulated: RunResult) -> dict[str, Any]:
    """p50 TTFT of the requests that joined a running batch (``joined``) and of the
    others (``first_wave``), measured over all ``measured`` runs and in the replay."""
    import numpy as np

    from workbench.calibration.samples import joined, read_samples

    def split(runs: Sequence[RunResult]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"first_wave": [], "joined": []}
        for run in runs:
            ss = read_samples(run.records)  # warm-up requests count as running, not as rows
            warm = {r.request_id for r in run.records if r.warmup}
            for s, j in zip(ss, joined(ss), strict=True):
                if s.request_id not in warm:
                    out["joined" if j else "first_wave"].append(s.ttft_ms)
        return out

    real, sim = split(measured), split([simulated])
    res: dict[str, Any] = {}
    for k in real:
        m = float(np.median(real[k])) if real[k] else None
        p = float(np.median(sim[k])) if sim[k] else None
        res[k] = {"measured_p50": m, "measured_requests": len(real[k]), "predicted_p50": p,
                  "predicted_requests": len(sim[k]),
                  "error_pct": (p - m) / m * 100 if m and p is not None else None}  # fmt: skip
    return res
