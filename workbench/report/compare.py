"""Side-by-side comparison of stored runs: percentiles with bootstrap CIs, hit rates, config diff.

Reads stored runs only. Percentile intervals are the percentile bootstrap of a run's ok
requests (seeded), resampling whole sessions where a session has several requests (a
cluster bootstrap); a change against the baseline (the first run) is bootstrapped as a
difference, paired (the same sessions drawn for both) when both runs replayed the same
sessions, significant when its interval leaves out 0 over enough sessions (or requests)
in each run (docs/metrics.md, "Compare")."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import workbench.catalogs.requests as catalog
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.metrics import run_rows
from workbench.metrics.distribution import quantiles, resolution, sample, support
from workbench.metrics.frame import ok_rows
from workbench.metrics.summary import measured_plan
from workbench.metrics.wording import unresolved_phrase
from workbench.plurals import counted
from workbench.records import RunManifest, RunResult, manifest_of
from workbench.report import tables
from workbench.report.headline import (
    METRIC_NAMES,
    SECONDS_FROM_MS,
    Headline,
    engine_note,
    run_headline,
    sig,
)
from workbench.report.tables import (
    HIT_RATES,
    KEY_INDEX,
    PLANNED_OF_REPORTED,
    as_float,
    as_summary,
    named,
    text,
)
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


@dataclass(frozen=True)
class Sessions:
    """The finite values of one metric over a run's ok rows and the session each came
    from: ``codes`` (an index into ``ids``, the sorted distinct session ids), both None
    when the values carry no session (``itl_ms``, gaps pooled across requests, or a frame
    without session ids)."""

    values: np.ndarray
    codes: np.ndarray | None = None
    ids: np.ndarray | None = None

    @property
    def grouped(self) -> bool:
        """Some session has several values: a bootstrap resamples sessions (its rounds
        are correlated), else requests (docs/metrics.md, "Compare")."""
        return self.ids is not None and self.values.size > self.ids.size

    @property
    def units(self) -> int:
        """What a bootstrap resamples and the evidence rule counts: the sessions when
        ``grouped``, else the values."""
        return int(self.ids.size) if self.grouped and self.ids is not None else int(
            self.values.size)

    @property
    def clusters(self) -> np.ndarray | None:
        """The session code per value when ``grouped`` (a cluster bootstrap), else None."""
        return self.codes if self.grouped else None


def sessions_of(values: Sequence[float] | np.ndarray,
                labels: Sequence[Any] | np.ndarray | None = None) -> Sessions:
    """``values`` without the non-finite ones, and their ``labels`` (a session per value)
    as codes: the one ``np.unique`` a comparison makes of a run's sessions."""
    arr = np.asarray(values, dtype=float)
    keep = np.isfinite(arr)
    if labels is None:
        return Sessions(arr[keep])
    raw = np.asarray(labels)
    if raw.shape != arr.shape:
        raise ValueError(f"{raw.size} cluster labels for {arr.size} values")
    ids, codes = np.unique(raw[keep], return_inverse=True)
    return Sessions(arr[keep], codes.reshape(-1), ids)


def clusters_of(frame: pd.DataFrame, metric: str) -> Sessions:
    """The finite values of ``metric`` over ``frame``'s rows and, aligned with them, the
    session each came from (by the records' ``session_id``); none for ``itl_ms`` (gaps
    pooled across requests) or a frame without session ids (docs/metrics.md, "Compare")."""
    if metric == "itl_ms" or metric not in frame or "session_id" not in frame:
        return Sessions(sample(frame, metric))
    return sessions_of(frame[metric].to_numpy(dtype=float, na_value=np.nan),
                       frame["session_id"].to_numpy().astype(str))


def resampled_unit(sessions: Sessions) -> str:
    """What a bootstrap over ``sessions`` draws: ``"12 sessions"`` or ``"requests"``."""
    return counted(sessions.units, "session") if sessions.grouped else "requests"


#: values × resamples one step of a cluster bootstrap holds at once (~32 MB an array)
CLUSTER_CELLS = 1 << 22


def _resampler(s: Sessions, by_session: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """What ``_percentiles`` reads for ``s``: its values sorted with the session of each
    (a cluster bootstrap), or the values a pick indexes: in session order when the draw is
    of sessions of one value each (``by_session``, a paired design), else as they are."""
    if s.grouped and s.codes is not None:
        order = np.argsort(s.values, kind="stable")
        return s.values[order], s.codes[order]
    if by_session and s.codes is not None:
        ordered = np.empty_like(s.values)
        ordered[s.codes] = s.values
        return ordered, None
    return s.values, None


def _percentiles(values: np.ndarray, owner: np.ndarray | None, picks: np.ndarray,
                 q: float) -> np.ndarray:
    """Per row of ``picks`` (one resample), the ``q``-th percentile: of the picked values,
    or, with ``owner`` (the session of each sorted value), of the values of the picked
    sessions, each drawn session bringing all of its values (a cluster bootstrap: the
    rounds of one session are correlated, docs/metrics.md, "Compare")."""
    if owner is None:
        return np.asarray(np.percentile(values[picks], q, axis=1))
    step = max(1, CLUSTER_CELLS // values.size)
    return np.concatenate([_weighted_percentile(values, owner, picks[i:i + step], q)
                           for i in range(0, len(picks), step)])


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


def bootstrap_ci(values: Sequence[float] | np.ndarray, q: float, *, n_boot: int = 2000,
                 level: float = 0.95, seed: int = 0,
                 clusters: Sequence[Any] | np.ndarray | None = None) -> tuple[float, float]:
    """Percentile-bootstrap interval of the ``q``-th percentile (linear interpolation);
    ``clusters`` (a session per value): resample sessions, not values (``_percentiles``)."""
    return _interval(sessions_of(values, clusters), q, n_boot=n_boot, level=level, seed=seed)


def _interval(s: Sessions, q: float, *, n_boot: int, level: float, seed: int
              ) -> tuple[float, float]:
    if s.values.size == 0:
        return math.nan, math.nan
    if s.values.size == 1:
        return float(s.values[0]), float(s.values[0])
    rng = np.random.default_rng(seed)
    values, owner = _resampler(s, by_session=False)
    stats = [_percentiles(values, owner, rng.integers(0, s.units, size=(k, s.units)), q)
             for k in _batches(n_boot)]
    lo, hi = np.quantile(np.concatenate(stats), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _batches(n_boot: int) -> list[int]:
    """The resamples drawn at once, ``BATCH`` at a time."""
    return [min(BATCH, n_boot - start) for start in range(0, n_boot, BATCH)]


def bootstrap_diff(base: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray,
                   q: float, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                   base_clusters: Sequence[Any] | np.ndarray | None = None,
                   other_clusters: Sequence[Any] | np.ndarray | None = None,
                   paired: bool = False) -> tuple[float, float, float]:
    """(change, lo, hi): ``other``'s ``q``-th percentile minus ``base``'s, and the
    percentile-bootstrap interval of that difference (both resampled each time, by
    session where a run's ``*_clusters`` give one per value; ``paired``: both runs carry
    the same session ids, and each resample draws them once for both: ``_diff``)."""
    return _diff(sessions_of(base, base_clusters), sessions_of(other, other_clusters), q,
                 n_boot=n_boot, level=level, seed=seed, paired=paired)


def _diff(a: Sessions, b: Sessions, q: float, *, n_boot: int, level: float, seed: int,
          paired: bool) -> tuple[float, float, float]:
    if paired and not _same_sessions(a, b):
        raise ValueError("paired: the runs' session ids differ (a paired bootstrap draws "
                         "the same sessions for both runs; give both runs' ids, equal as sets)")
    if a.values.size == 0 or b.values.size == 0:
        return math.nan, math.nan, math.nan
    change = float(np.percentile(b.values, q) - np.percentile(a.values, q))
    rng = np.random.default_rng(seed)
    ra, rb = _resampler(a, paired), _resampler(b, paired)
    diffs = []
    for k in _batches(n_boot):
        if paired:  # the same sessions for both runs (docs/metrics.md, "Compare")
            units = a.ids.size if a.ids is not None else 0
            pa = pb = rng.integers(0, units, size=(k, units))
        else:
            pa = rng.integers(0, a.units, size=(k, a.units))
            pb = rng.integers(0, b.units, size=(k, b.units))
        diffs.append(_percentiles(*rb, pb, q) - _percentiles(*ra, pa, q))
    lo, hi = np.quantile(np.concatenate(diffs), [(1 - level) / 2, (1 + level) / 2])
    return change, float(lo), float(hi)


def _same_sessions(a: Sessions, b: Sessions) -> bool:
    return a.ids is not None and b.ids is not None and np.array_equal(a.ids, b.ids)


CHANGE_QS: tuple[float, ...] = (50, 90)


def change_table(runs: Mapping[str, Any], metrics: Sequence[str] = CI_METRICS,
                 qs: Sequence[float] = CHANGE_QS, *, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> pd.DataFrame:
    """Per run after the baseline, metric (its catalog label and unit, ``TTFT (ms)``; its
    name, ``ttft_ms``, is the index, ``KEY_INDEX``: what code selects by, hidden from a
    reader and kept in the export) and percentile: both values (ms), the change with
    its bootstrap interval and in %, whether it is significant and the verdict in words,
    what was resampled and in which design (paired when both runs replay the same
    sessions: ``design``)."""
    labels = list(runs)
    rows = []
    keys: list[str] = []  # each row's metric name: the index (``change_line`` reads it)
    if labels:
        base_label = labels[0]
        frames = {label: ok_rows(run) for label, run in runs.items()}
        traces = {label: manifest_of(run).trace.get("sha256") for label, run in runs.items()}
        for metric in metrics:
            base = clusters_of(frames[base_label], metric)
            for label in labels[1:]:
                other = clusters_of(frames[label], metric)
                design = _design(base, other, traces[base_label], traces[label])
                paired = design == "paired"
                units = _units(base, other, paired)
                same = _identical(base, other)
                for q in qs:
                    change, lo, hi = (0.0, 0.0, 0.0) if same else _diff(
                        base, other, q, n_boot=n_boot, level=level, seed=seed, paired=paired)
                    ref = quantiles(base.values, (q,))[0] if base.values.size else math.nan
                    significant, verdict = (None, IDENTICAL) if same else _verdict(
                        lo, hi, q, units)
                    keys.append(metric)
                    rows.append({
                        "metric": catalog.with_unit(metric), "run": label, "stat": f"p{q:g}",
                        "baseline": ref, "value": ref + change, "change": change,
                        "change lo": lo, "change hi": hi,
                        "change (%)": 100 * change / ref if ref else math.nan,
                        "significant": significant, "verdict": verdict,
                        "n baseline": int(base.values.size), "n run": int(other.values.size),
                        "resampled": _resampled(units), "design": design,
                    })  # fmt: skip
    df = pd.DataFrame(rows, columns=["metric", "run", "stat", "baseline", "value", "change",
                                     "change lo", "change hi", "change (%)", "significant",
                                     "verdict", "n baseline", "n run", "resampled", "design"],
                      index=pd.Index(keys, name=KEY_INDEX, dtype=object))
    return named(df, "latency_change")


#: the verdict of a change between runs whose values are the same, session by session: every
#: resample draws a difference of 0, an interval [0, 0] that is no evidence of "no change"
#: but of one measurement shown twice (docs/metrics.md, "Compare")
IDENTICAL = "identical: every value equal in both runs"


def _identical(base: Sessions, other: Sessions) -> bool:
    """Both runs have the same values of a metric in the same order, from the same
    sessions (the same run given twice, or a deterministic replay repeated), or one
    value alone, the same in both (a constant TPOT): every resample's difference is 0."""
    if base.values.size == 0 or other.values.size == 0:
        return False
    if base.values.min() == base.values.max() == other.values.min() == other.values.max():
        return True
    if not np.array_equal(base.values, other.values):
        return False
    if base.codes is None or other.codes is None or base.ids is None or other.ids is None:
        return base.codes is None and other.codes is None
    return np.array_equal(base.codes, other.codes) and np.array_equal(base.ids, other.ids)


def _design(base: Sessions, other: Sessions, base_trace: Any, other_trace: Any) -> str:
    """``paired`` when both runs replay one trace (the same sha256) and carry the same
    set of session ids; else ``independent`` and why (docs/metrics.md, "Compare")."""
    if base.ids is None or other.ids is None:
        return "independent: no session ids"
    if not base_trace or base_trace != other_trace:
        return "independent: other traces" if base_trace and other_trace else (
            "independent: a trace unknown")
    if not _same_sessions(base, other):
        return (f"independent: other sessions ({base.ids.size} and {other.ids.size}, "
                f"{np.intersect1d(base.ids, other.ids, assume_unique=True).size} shared)")
    return "paired"


Units = tuple[tuple[str, int], tuple[str, int]]


def _units(base: Sessions, other: Sessions, paired: bool) -> Units:
    """Per run, what its resamples draw and how many, which the evidence rule counts:
    ``("sessions", 48)`` or ``("requests", 40)``; a paired design draws sessions for both
    runs when either has several values in a session."""
    both = paired and (base.grouped or other.grouped)
    return (_unit(base, both), _unit(other, both))


def _unit(s: Sessions, by_session: bool) -> tuple[str, int]:
    if (by_session or s.grouped) and s.ids is not None:
        return "sessions", int(s.ids.size)
    return "requests", int(s.values.size)


def _resampled(units: Units) -> str:
    """The ``resampled`` cell: ``"sessions (48 and 48)"``, ``"requests"``, or both kinds
    (``"48 sessions and requests"``: baseline first) when the runs differ."""
    (kind, n), (other_kind, other_n) = units
    if kind == other_kind == "requests":
        return "requests"
    if kind == other_kind:
        return f"sessions ({n} and {other_n})"
    return " and ".join(counted(c, "session") if k == "sessions" else "requests"
                        for k, c in units)


def _verdict(lo: float, hi: float, q: float, units: Units) -> tuple[bool | None, str]:
    """(significant, the words): the interval leaves out 0, or not; neither on fewer
    resampled units in either run than the percentile's ``support`` (sessions when the
    bootstrap drew sessions: 2 sessions of 200 rounds are 2 draws of evidence, not 400),
    said ``too few sessions (2 and 3; a p90 needs 29 in each)`` (docs/metrics.md,
    "Evidence"; "Compare")."""
    if not math.isfinite(lo):
        return None, "no interval"
    needed = support(q)
    (kind, n), (other_kind, other_n) = units
    if needed is None:
        return None, f"undecided (no count shows a p{q:g}, a maximum)"
    if min(n, other_n) < needed:
        counts = (f"{n} and {other_n} ok" if kind == other_kind == "requests" else
                  f"{n} and {other_n}" if kind == other_kind else
                  f"{counted(n, kind[:-1])} and {counted(other_n, other_kind[:-1])}")
        what = kind if kind == other_kind else "sessions and requests"
        return None, f"too few {what} ({counts}; a p{q:g} needs {needed} in each)"
    significant = bool(lo > 0 or hi < 0)
    return significant, "significant" if significant else "not significant"


CLUSTER_NOTE = ("a run whose sessions have several requests is resampled by session (its "
                "rounds are correlated), one of single requests by request")
PAIRED_NOTE = ("two runs of one trace with the same sessions are resampled paired, the "
               "same sessions drawn for both (column 'design')")


def change_caption(runs: Mapping[str, Any], level: float = 0.95, n_boot: int = 2000) -> str:
    base = next(iter(runs), "?")
    return (f"Latency change against the baseline {base} (ms; run − baseline) with its "
            f"{level * 100:.0f} % bootstrap interval ({n_boot} resamples of both runs, "
            f"seeded; {CLUSTER_NOTE}: column 'resampled'; {PAIRED_NOTE}); significant: the "
            "interval leaves out 0, judged only over as many sessions (or requests, when "
            "resampled by request) in each run as the percentile needs: a p50 5, a p90 29 "
            "(column 'verdict')")


def _signed(v: float) -> str:
    """``+12.3``, ``−4``, ``±0``; a dash for no value (no ok request in a run)."""
    if not math.isfinite(v):
        return "–"
    return ("+" if v > 0 else "−" if v < 0 else "±") + sig(abs(v))


def _change_text(change: float, lo: float, hi: float) -> str:
    """``+12.3 ms [+8.1, +16]``; in seconds, as the runs' headlines above it, when the
    largest is ``SECONDS_FROM_MS`` or more: ``+178 s [+171, +185]``, not ``+177950 ms``."""
    finite = [abs(v) for v in (change, lo, hi) if math.isfinite(v)]
    unit, scale = ("s", 1000.0) if finite and max(finite) >= SECONDS_FROM_MS else ("ms", 1.0)
    return (f"{_signed(change / scale)} {unit} [{_signed(lo / scale)}, "
            f"{_signed(hi / scale)}]")


HEADLINE_CHANGES = ("ttft_ms", "tpot_ms")


def change_line(label: str, changes: pd.DataFrame) -> str:
    """``"TTFT p50 +12.3 ms [+8.1, +16] significant, p90 ..."`` for one run (TTFT and
    TPOT, as in the headline), each change's verdict as the table's ``verdict``."""
    parts = []
    mine = changes[(changes["run"] == label) & changes.index.isin(HEADLINE_CHANGES)]
    if len(mine) and (mine["verdict"] == IDENTICAL).all():
        names = " and ".join(METRIC_NAMES[str(m)] for m in mine.index.unique())
        why = (" (the same run given twice, or a deterministic replay repeated)"
               if (mine["design"] == "paired").all() else "")
        return f"identical runs: every {names} value is equal in both{why}, no change to judge"
    for metric, part in mine.groupby(level=KEY_INDEX, sort=False):
        if (part["verdict"] == IDENTICAL).all():
            parts.append(f"{METRIC_NAMES[str(metric)]} identical in both runs "
                         "(every value equal), no change to judge")
            continue
        stats = [f"{r['stat']} {_change_text(r['change'], r['change lo'], r['change hi'])} "
                 f"{r['verdict']}" for _, r in part.iterrows()]
        parts.append(f"{METRIC_NAMES[str(metric)]} " + ", ".join(stats))
    return "; ".join(parts)


def _by(label: str, changes: pd.DataFrame) -> str:
    """How the run's intervals were drawn, as its rows of the table say: `` (intervals by
    session, paired)``, `` (intervals by session)``, `` (intervals by request, paired)``."""
    mine = changes[changes["run"] == label]
    cells = {str(c) for c in mine.get("resampled", ())}
    designs = {str(d) for d in mine.get("design", ())}
    unit = ("by session" if cells and all(c.startswith("sessions") for c in cells) else
            "by session where a run has them, else by request"
            if any("session" in c for c in cells) else "by request")
    pair = (", paired" if designs == {"paired"} else
            ", paired where the runs share their sessions" if "paired" in designs else "")
    if not cells or (unit == "by request" and not pair):
        return ""
    return f" (intervals {unit}{pair})"


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
            line = change_line(label, changes)
            by = "" if line.startswith("identical runs") else _by(label, changes)
            lines.append(f"  {label} vs {base}{by}: {line}")
    return Headline(lines)


def percentile_table(runs: Mapping[str, Any], metrics: Sequence[str] = CI_METRICS,
                     qs: Sequence[float] = QS, *, n_boot: int = 2000, level: float = 0.95,
                     seed: int = 0) -> pd.DataFrame:
    """One row per (metric, run): the metric's catalog label and unit (``TTFT (ms)``), n,
    each percentile with its bootstrap CI, the max (ms), and ``thin``: the percentiles n
    values cannot resolve, as the run headline flags them (``p99 of 10 requests``, read off
    the largest values; docs/metrics.md, "Headline")."""
    rows = []
    for metric in metrics:
        for label, run in runs.items():
            sessions = clusters_of(ok_rows(run), metric)
            vals = sessions.values
            row: dict[str, Any] = {"metric": catalog.with_unit(metric), "run": label,
                                   "n": int(vals.size),
                                   "resampled": resampled_unit(sessions)}
            for q in qs:
                lo, hi = _interval(sessions, q, n_boot=n_boot, level=level, seed=seed)
                row[f"p{q:g}"] = quantiles(vals, (q,))[0] if vals.size else math.nan
                row[f"p{q:g} lo"], row[f"p{q:g} hi"] = lo, hi
            # the max: a run headline over fewer values than a p99 resolves gives it in
            # the p99's place (docs/metrics.md, "Headline"), so it is a cell here too
            row["max"] = float(vals.max()) if vals.size else math.nan
            row["thin"] = unresolved_phrase(qs, int(vals.size))
            rows.append(row)
    return named(pd.DataFrame(rows), "percentiles_ci")


def hit_rate_table(runs: Mapping[str, Any], baseline: str | None = None) -> pd.DataFrame:
    """Per run: planned/actual/server/ideal hit rates, actual − planned, Δ actual vs
    baseline; when only some of a run's requests reported a cached count, the plan of those
    requests (``PLANNED_OF_REPORTED``), which its headline and ``actual − planned`` set the
    actual rate against (docs/metrics.md, "Headline")."""
    rows: dict[str, dict[str, float]] = {}
    partial = False
    for label, run in runs.items():
        s = as_summary(run)
        rows[label] = {name: as_float(s.get(key)) for name, key in HIT_RATES}
        plan = rows[label]["planned"]
        if measured_plan(s):
            partial = True
            plan = rows[label][PLANNED_OF_REPORTED] = as_float(
                s.get("planned_prefix_hit_rate_measured"))
        rows[label]["actual − planned"] = rows[label]["actual (client)"] - plan
    columns = [name for name, _ in HIT_RATES] + (
        [PLANNED_OF_REPORTED] if partial else []) + ["actual − planned"]
    df = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
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
            f"intervals ({CLUSTER_NOTE}: column 'resampled'); thin: a percentile over fewer "
            f"values than resolve it (a p{QS[-1]:g} {resolution(QS[-1])}, a p90 "
            f"{resolution(90)}) is read off the largest ones, where a run's headline gives "
            f"the max.{which}")


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
