"""Side-by-side comparison of stored runs: percentiles with bootstrap CIs, hit rates, config diff.

Reads stored runs only. Percentile intervals are the percentile bootstrap of a run's ok
requests (seeded), resampling whole sessions where a session has several requests (a
cluster bootstrap); a change against the baseline (the first run) is
bootstrapped as a difference, significant when its interval leaves out 0
(docs/metrics.md, "Compare")."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import workbench.catalogs.requests as catalog
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.metrics import run_rows
from workbench.metrics.distribution import quantiles, sample, support
from workbench.metrics.frame import ok_rows
from workbench.plurals import counted
from workbench.records import RunManifest, RunResult, manifest_of
from workbench.report import tables
from workbench.report.headline import METRIC_NAMES, Headline, engine_note, run_headline, sig
from workbench.report.tables import HIT_RATES, as_float, as_summary, named, text
from workbench.storage.rundir import load, run_damage
from workbench.workloads.standard import bundled_or_path

AXES: tuple[str, ...] = ("trace", "context", "arrival", "backend", "target")
CI_METRICS: tuple[str, ...] = catalog.SCALAR_LATENCY
QS: tuple[float, ...] = (50, 90, 99)
BATCH = 256  # resamples drawn at once (bounds memory at BATCH × n floats)


EXAMPLE_TRACE = "tracelab/multi_session_large.csv"
EXAMPLE_BLOCKS = (8192, 65536)  # a KV cache that evicts (131,072 tokens) vs one that never does


def example_runs(out_dir: str | Path, trace: str = EXAMPLE_TRACE,
                 num_blocks: Sequence[int] = EXAMPLE_BLOCKS) -> list[str]:
    """Two virtual-time runs of ``trace`` that differ only in KV cache size (``num_blocks``),
    saved (overwritten) as ``out_dir/compare-example-kv<N>``; their directories."""
    path = str(bundled_or_path(trace))
    dirs = []
    for blocks in num_blocks:
        cfg = RunConfig.from_dict({
            "trace": {"path": path},
            "target": {"url": "sim", "engine": {"num_blocks": int(blocks)}},
            "out_dir": str(out_dir), "run_id": f"compare-example-kv{blocks}",
            "label": f"KV cache {blocks} blocks", "overwrite": True,
        })
        dirs.append(str(simulate(cfg).run_dir))
    return dirs


def load_runs(run_dirs: Iterable[str | Path], labels: Sequence[str] | None = None
              ) -> dict[str, RunResult]:
    """``{label: RunResult}`` in the given order; labels default to the run's label."""
    runs: dict[str, RunResult] = {}
    dirs = list(run_dirs)
    if not dirs:
        raise ConfigError("run_dirs is empty: give the run directories to compare "
                          "(or compare.example_runs(out_dir) for two made on the spot)")
    if labels and len(labels) != len(dirs):
        raise ValueError(f"{len(labels)} labels for {len(dirs)} run directories")
    loaded = [load(Path(d)) for d in dirs]
    short = short_labels(loaded)
    for i, run in enumerate(loaded):
        label = labels[i] if labels else str(run.manifest.label or short[i])
        while label in runs:
            label += "'"
        runs[label] = run
    return runs


def short_labels(runs: Sequence[Any], longest: int = 40) -> list[str]:
    """Labels for unlabelled runs: the one or two settings that differ (``num_blocks=1024``),
    else ``run 1``, ``run 2``, …"""
    flats = [config_keys(r) for r in runs]
    keys = [k for k in sorted(set().union(*flats)) if k not in ("trace.path", "trace.source")
            and len({repr(f.get(k)) for f in flats}) > 1]
    if 1 <= len(keys) <= 2:
        labels = [", ".join(f"{k.rsplit('.', 1)[-1]}={text(f.get(k))}" for k in keys)
                  for f in flats]
        if len(set(labels)) == len(labels) and max(map(len, labels)) <= longest:
            return labels
    return [f"run {i + 1}" for i in range(len(runs))]


def differs_line(runs: Mapping[str, Any], shown: int = 3) -> str:
    """The headline's first line: which settings differ between the runs, or that none does."""
    diff = config_diff(runs)
    diff = diff[~diff["key"].isin(("trace.path", "trace.source"))]
    if diff.empty:
        return ("What differs: nothing in the four axes or the target (same settings: the "
                "differences below are run-to-run noise or the server's state)")
    if set(diff["key"]) == {"seed"}:  # noise, not an effect: docs/metrics.md, "Compare"
        seeds = " → ".join(str(v) for v in diff.iloc[0][list(runs)])
        return (f"What differs: only seed ({seeds}), other random draws of the same "
                "settings: every change below is run-to-run noise, and one marked "
                "significant shows that noise is wider than its interval")
    labels = list(runs)
    parts = [f"{row['key']} ({' → '.join(str(row[label]) for label in labels)})"
             for _, row in diff.head(shown).iterrows()]
    more = (f" and {len(diff) - shown} more (table 'Configuration differences')"
            if len(diff) > shown else "")
    return "What differs: " + "; ".join(parts) + more


def clusters_of(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The finite values of ``metric`` over ``frame``'s rows and, aligned with them, the
    session each came from: None when no session had more than one value (each request
    its own cluster: the plain bootstrap), or for ``itl_ms`` (gaps pooled across
    requests) and a frame without session ids (docs/metrics.md, "Compare")."""
    if metric == "itl_ms" or metric not in frame or "session_id" not in frame:
        return sample(frame, metric), None
    vals = frame[metric].to_numpy(dtype=float, na_value=np.nan)
    keep = np.isfinite(vals)
    sessions = frame["session_id"].to_numpy()[keep]
    _, codes = np.unique(sessions.astype(str), return_inverse=True)
    grouped = codes.size > 0 and np.bincount(codes).max() > 1
    return vals[keep], codes if grouped else None


def resampled_unit(clusters: np.ndarray | None) -> str:
    """What a bootstrap over ``clusters`` draws: ``"12 sessions"`` or ``"requests"``."""
    if clusters is None:
        return "requests"
    return counted(int(clusters.max()) + 1, "session")


#: values × resamples one step of a cluster bootstrap holds at once (~32 MB an array)
CLUSTER_CELLS = 1 << 22


def _draws(arr: np.ndarray, clusters: np.ndarray | None, q: float, k: int,
           rng: np.random.Generator) -> np.ndarray:
    """``k`` bootstrap values of the ``q``-th percentile of ``arr``: each a resample of
    its requests with replacement, or, with ``clusters`` (a session code per value), of
    its sessions, each drawn session bringing all of its values (a cluster bootstrap:
    the rounds of one session are correlated, docs/metrics.md, "Compare")."""
    if clusters is None:
        return np.asarray(np.percentile(arr[rng.integers(0, arr.size, size=(k, arr.size))],
                                        q, axis=1))
    groups = int(clusters.max()) + 1
    picks = rng.integers(0, groups, size=(k, groups))
    order = np.argsort(arr, kind="stable")
    values, owner = arr[order], clusters[order]
    step = max(1, CLUSTER_CELLS // arr.size)
    return np.concatenate([_weighted_percentile(values, owner, picks[i:i + step], q)
                           for i in range(0, k, step)])


def _weighted_percentile(values: np.ndarray, owner: np.ndarray, picks: np.ndarray,
                         q: float) -> np.ndarray:
    """Per row of ``picks`` (the sessions one resample drew), the linear ``q``-th
    percentile of the sorted ``values`` each repeated as often as its session was drawn:
    ``np.percentile(np.repeat(values, times[owner]), q)`` without building the repeats."""
    rows, groups = picks.shape
    times = np.zeros((rows, groups), dtype=np.int64)
    np.add.at(times, (np.arange(rows)[:, None], picks), 1)
    ends = np.cumsum(times[:, owner], axis=1)  # the rank just past each value's copies
    total = ends[:, -1]
    h = q / 100 * (total - 1)
    below = np.floor(h).astype(np.int64)
    first = (ends <= below[:, None]).sum(axis=1)  # the value at rank ``below``
    second = (ends <= np.minimum(below + 1, total - 1)[:, None]).sum(axis=1)
    return np.asarray(values[first] + (h - below) * (values[second] - values[first]))


def _finite(values: Sequence[float] | np.ndarray, clusters: Sequence[int] | np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray | None]:
    arr = np.asarray(values, dtype=float)
    keep = np.isfinite(arr)
    if clusters is None:
        return arr[keep], None
    codes = np.asarray(clusters)
    if codes.shape != arr.shape:
        raise ValueError(f"{codes.size} cluster labels for {arr.size} values")
    _, dense = np.unique(codes[keep], return_inverse=True)
    return arr[keep], dense.reshape(-1)


def bootstrap_ci(values: Sequence[float] | np.ndarray, q: float, *, n_boot: int = 2000,
                 level: float = 0.95, seed: int = 0,
                 clusters: Sequence[int] | np.ndarray | None = None) -> tuple[float, float]:
    """Percentile-bootstrap interval of the ``q``-th percentile (linear interpolation);
    ``clusters`` (a session per value): resample sessions, not values (``_draws``)."""
    arr, codes = _finite(values, clusters)
    if arr.size == 0:
        return math.nan, math.nan
    if arr.size == 1:
        return float(arr[0]), float(arr[0])
    rng = np.random.default_rng(seed)
    stats = [_draws(arr, codes, q, min(BATCH, n_boot - start), rng)
             for start in range(0, n_boot, BATCH)]
    lo, hi = np.quantile(np.concatenate(stats), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_diff(base: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray,
                   q: float, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                   base_clusters: Sequence[int] | np.ndarray | None = None,
                   other_clusters: Sequence[int] | np.ndarray | None = None
                   ) -> tuple[float, float, float]:
    """(change, lo, hi): ``other``'s ``q``-th percentile minus ``base``'s, and the
    percentile-bootstrap interval of that difference (both resampled each time, by
    session where a run's ``*_clusters`` give one per value: ``_draws``)."""
    a, ca = _finite(base, base_clusters)
    b, cb = _finite(other, other_clusters)
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan, math.nan
    change = float(np.percentile(b, q) - np.percentile(a, q))
    rng = np.random.default_rng(seed)
    diffs = []
    for start in range(0, n_boot, BATCH):
        k = min(BATCH, n_boot - start)
        pa = _draws(a, ca, q, k, rng)
        pb = _draws(b, cb, q, k, rng)
        diffs.append(pb - pa)
    lo, hi = np.quantile(np.concatenate(diffs), [(1 - level) / 2, (1 + level) / 2])
    return change, float(lo), float(hi)


CHANGE_QS: tuple[float, ...] = (50, 90)


def change_table(runs: Mapping[str, Any], metrics: Sequence[str] = CI_METRICS,
                 qs: Sequence[float] = CHANGE_QS, *, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> pd.DataFrame:
    """Per run after the baseline, metric and percentile: both values (ms), the change with
    its bootstrap interval and in %, and whether it is significant."""
    labels = list(runs)
    rows = []
    if labels:
        base_label = labels[0]
        frames = {label: ok_rows(run) for label, run in runs.items()}
        for metric in metrics:
            base, base_sessions = clusters_of(frames[base_label], metric)
            for label in labels[1:]:
                vals, sessions = clusters_of(frames[label], metric)
                for q in qs:
                    change, lo, hi = bootstrap_diff(base, vals, q, n_boot=n_boot,
                                                    level=level, seed=seed,
                                                    base_clusters=base_sessions,
                                                    other_clusters=sessions)
                    ref = quantiles(base, (q,))[0] if base.size else math.nan
                    # undecided (None) on fewer values than the percentile needs in either
                    # run (docs/metrics.md, "Evidence")
                    needed = support(q)
                    enough = needed is not None and min(base.size, vals.size) >= needed
                    rows.append({
                        "metric": metric, "run": label, "stat": f"p{q:g}",
                        "baseline": ref, "value": ref + change, "change": change,
                        "change lo": lo, "change hi": hi,
                        "change (%)": 100 * change / ref if ref else math.nan,
                        "significant": bool(lo > 0 or hi < 0)
                        if math.isfinite(lo) and enough else None,
                        "n baseline": int(base.size), "n run": int(vals.size),
                        "resampled": _resampled(base_sessions, sessions),
                    })  # fmt: skip
    df = pd.DataFrame(rows, columns=["metric", "run", "stat", "baseline", "value", "change",
                                     "change lo", "change hi", "change (%)", "significant",
                                     "n baseline", "n run", "resampled"])
    return named(df, "latency_change")


def _resampled(base: np.ndarray | None, other: np.ndarray | None) -> str:
    """The ``resampled`` cell: ``"sessions (48 and 48)"``, ``"requests"``, or both kinds
    (``"sessions (48) and requests"``: baseline first) when the runs differ."""
    if base is None and other is None:
        return "requests"
    if base is not None and other is not None:
        return f"sessions ({int(base.max()) + 1} and {int(other.max()) + 1})"
    return f"{resampled_unit(base)} and {resampled_unit(other)}"


CLUSTER_NOTE = ("a run whose sessions have several requests is resampled by session (its "
                "rounds are correlated), one of single requests by request")


def change_caption(runs: Mapping[str, Any], level: float = 0.95, n_boot: int = 2000) -> str:
    base = next(iter(runs), "?")
    return (f"Latency change against the baseline {base} (ms; run − baseline) with its "
            f"{level * 100:.0f} % bootstrap interval ({n_boot} resamples of both runs, "
            f"seeded; {CLUSTER_NOTE}: column 'resampled'); significant: the interval "
            "leaves out 0")


def _signed(v: float) -> str:
    return ("+" if v > 0 else "−" if v < 0 else "±") + sig(abs(v))


HEADLINE_CHANGES = ("ttft_ms", "tpot_ms")


def _decided(row: Any) -> str:
    """``significant``, ``not significant``, or why neither: ``too few requests (2 and 19
    ok; a p90 needs 29 in each)``."""
    if row["significant"] is None or (isinstance(row["significant"], float)
                                      and math.isnan(row["significant"])):
        if not math.isfinite(row["change lo"]):
            return "no interval"
        q = float(str(row["stat"])[1:])
        return (f"too few requests ({row['n baseline']} and {row['n run']} ok; a "
                f"{row['stat']} needs {support(q)} in each)")
    return "significant" if row["significant"] else "not significant"


def change_line(label: str, changes: pd.DataFrame) -> str:
    """``"TTFT p50 +12.3 ms [+8.1, +16] significant, p90 ..."`` for one run (TTFT and
    TPOT, as in the headline)."""
    parts = []
    mine = changes[(changes["run"] == label) & changes["metric"].isin(HEADLINE_CHANGES)]
    for metric, part in mine.groupby("metric", sort=False):
        stats = [f"{r['stat']} {_signed(r['change'])} ms [{_signed(r['change lo'])}, "
                 f"{_signed(r['change hi'])}] {_decided(r)}" for _, r in part.iterrows()]
        parts.append(f"{METRIC_NAMES.get(str(metric), metric)} " + ", ".join(stats))
    return "; ".join(parts)


def _by(label: str, changes: pd.DataFrame) -> str:
    """`` (by session)`` when the run's intervals resampled sessions (``_resampled``)."""
    cells = set(changes.loc[changes["run"] == label, "resampled"]) if (
        "resampled" in changes) else set()
    if cells and all(str(c).startswith("sessions") for c in cells):
        return " (intervals by session)"
    if any("session" in str(c) for c in cells):
        return " (intervals by session where a run has them, else by request)"
    return ""


def compare_headline(runs: Mapping[str, Any], changes: pd.DataFrame | None = None) -> Any:
    """A ``Headline`` for a comparison: each run's headline, and under every run after
    the first its latency change against the baseline (``change_table``)."""
    base = next(iter(runs), None)
    lines = [differs_line(runs)] if len(runs) > 1 else []
    for label, run in runs.items():
        lines.append(f"{label}{' (baseline)' if label == base else ''}: "
                     f"{run_headline(as_summary(run), manifest_of(run))}")
        run_dir = getattr(run, "run_dir", None)  # a stored run's damage, under its line
        lines += [f"  DAMAGED: {note}" for note in (run_damage(run_dir) if run_dir else [])]
        if changes is not None and label != base and len(changes):
            lines.append(f"  {label} vs {base}{_by(label, changes)}: "
                         f"{change_line(label, changes)}")
    return Headline(lines)


def percentile_table(runs: Mapping[str, Any], metrics: Sequence[str] = CI_METRICS,
                     qs: Sequence[float] = QS, *, n_boot: int = 2000, level: float = 0.95,
                     seed: int = 0) -> pd.DataFrame:
    """One row per (metric, run): n, and each percentile with its bootstrap CI (ms)."""
    rows = []
    for metric in metrics:
        for label, run in runs.items():
            vals, sessions = clusters_of(ok_rows(run), metric)
            row: dict[str, Any] = {"metric": metric, "run": label, "n": int(vals.size),
                                   "resampled": resampled_unit(sessions)}
            for q in qs:
                lo, hi = bootstrap_ci(vals, q, n_boot=n_boot, level=level, seed=seed,
                                      clusters=sessions)
                row[f"p{q:g}"] = quantiles(vals, (q,))[0] if vals.size else math.nan
                row[f"p{q:g} lo"], row[f"p{q:g} hi"] = lo, hi
            rows.append(row)
    return named(pd.DataFrame(rows), "percentiles_ci")


def hit_rate_table(runs: Mapping[str, Any], baseline: str | None = None) -> pd.DataFrame:
    """Per run: planned/actual/server/ideal hit rates, actual − planned, Δ actual vs baseline."""
    rows: dict[str, dict[str, float]] = {}
    for label, run in runs.items():
        s = as_summary(run)
        rows[label] = {name: as_float(s.get(key)) for name, key in HIT_RATES}
        rows[label]["actual − planned"] = rows[label]["actual (client)"] - rows[label]["planned"]
    df = pd.DataFrame.from_dict(rows, orient="index")
    base = baseline or next(iter(runs), None)
    if base is not None and base in df.index:
        base_actual = rows[base]["actual (client)"]
        df[f"Δ actual vs {base}"] = df["actual (client)"] - base_actual
    df.index.name = "run"
    return named(df, "hit_rates")


def _flatten(d: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Dotted keys of the leaves; an empty section (``target.engine: {}``, no knob given)
    has none: it is every knob absent, as in a run that sets some, not a value of its own."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def config_keys(run: Any) -> dict[str, Any]:
    """The four axes + target of a run's config as dotted keys (plus the trace's sha256)."""
    manifest = manifest_of(run)
    config = manifest.config
    flat: dict[str, Any] = {}
    for axis in AXES:
        section = config.get(axis)
        flat.update(_flatten(section, axis) if isinstance(section, Mapping) else {axis: section})
    for key in ("trace.path", "trace.source"):
        if isinstance(flat.get(key), str) and flat[key]:
            flat[key] = _same_path(flat[key])
    flat["trace.sha256"] = manifest.trace.get("sha256")
    flat["seed"] = config.get("seed")
    return flat


def _same_path(path: str) -> str:
    """A path resolved when it exists here, so two spellings of one trace compare equal."""
    p = Path(path)
    return str(p.resolve()) if p.exists() else path


def config_diff(runs: Mapping[str, Any], *, all_keys: bool = False) -> pd.DataFrame:
    """Rows ``axis``, ``key`` and one column per run, for keys whose values differ."""
    flats = {label: config_keys(run) for label, run in runs.items()}
    keys = sorted({k for f in flats.values() for k in f})
    rows = []
    for key in keys:
        values = [flats[label].get(key) for label in flats]
        if all_keys or len({repr(v) for v in values}) > 1:
            cells = {label: text(v) for label, v in zip(flats, values, strict=True)}
            rows.append({"axis": key.split(".", 1)[0], "key": key, **cells})
    return named(pd.DataFrame(rows, columns=["axis", "key", *flats]), "config_diff")


def runs_table(runs: Mapping[str, Any]) -> pd.DataFrame:
    """What each run was: id, trace, the four axes, target, counts and duration."""
    rows = []
    for label, run in runs.items():
        m, s = manifest_of(run), as_summary(run)
        rows.append({
            "run": label,
            "run_id": run.run_id,
            "trace": Path(str(m.trace.get("path") or "")).name,
            "format": m.trace.get("format"),
            "policy": m.policy,
            "arrival": m.section("arrival").get("mode"),
            "backend": m.section("backend").get("name"),
            "target": m.section("target").get("url"),
            "requests": s.get("requests"),
            "ok": s.get("ok"),
            "duration (s)": as_float(s.get("duration_s")),
            "timing": timing(m),
            "status": m.status,
        })
    return named(pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame(), "runs")


def timing(manifest: RunManifest) -> str:
    """``wall clock``, ``wall clock, simulated engine, 20× real time`` or ``virtual time``."""
    note = engine_note(manifest)
    return note if note and note.startswith("virtual") else (
        f"wall clock, {note}" if note else "wall clock")


def latency_caption(runs: Mapping[str, Any], level: float = 0.95) -> str:
    """Caption of ``percentile_table``: the unit, and which runs' ms are virtual."""
    virtual = [label for label, run in runs.items()
               if manifest_of(run).mode == "virtual"]
    which = ("" if not virtual else " Every run is in virtual time (simulated ms)."
             if len(virtual) == len(runs) else
             f" In virtual time (simulated ms): {', '.join(virtual)}; the rest wall clock.")
    return (f"Latency percentiles of ok requests (ms) with {level * 100:.0f} % bootstrap "
            f"intervals ({CLUSTER_NOTE}: column 'resampled').{which}")


def error_table(runs: Mapping[str, Any]) -> pd.DataFrame:
    """Per run, the requests that did not end ok by class (a row "none" for a clean run)."""
    rows = []
    for label, run in runs.items():
        t = tables.error_table(run_rows(run))
        if not len(t):
            rows.append({"run": label, "error class": "none", "requests": 0,
                         "sample message": "every request ended ok"})
        rows += [{"run": label, "error class": k, **t.loc[k].to_dict()} for k in t.index]
    df = pd.DataFrame(rows, columns=["run", "error class", "requests", "sample message"])
    return named(df, "errors")
