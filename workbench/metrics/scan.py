"""Run-level metrics of a stored run from its ``records.parquet``: no record held in Python.

The same aggregates as an in-memory run (``summary.run_summary``,
``breakdown.round_table``/``band_table``) over the columns they touch, read one at a time
with pyarrow (docs/metrics.md; pooled ``itl_ms`` percentiles need ``token_times=True``).
Without pyarrow every function loads the run in memory instead (logged).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.metrics import breakdown, summary
from workbench.metrics.columns import available, parquet_path, stored
from workbench.metrics.frame import COLUMNS, NS_COLUMNS
from workbench.records import RunResult
from workbench.storage.rundir import load

log = logging.getLogger(__name__)

__all__ = ["available", "by_input_band", "by_round_index", "report_source", "sample_frame",
           "summarize"]  # fmt: skip


def _in_memory(run_dir: str | Path) -> RunResult:
    log.info("pyarrow not installed: reading %s in memory", run_dir)
    return load(run_dir)


#: ``workbench.metrics.summarize`` of a stored run, from its columns instead of its records
summarize = summary.summarize_stored


def by_round_index(run_dir: str | Path, *, warmup: bool = False) -> pd.DataFrame:
    """``breakdown.by_round_index``: ``first``, ``later``, then one row per round index."""
    if not available():
        return breakdown.by_round_index(_in_memory(run_dir), warmup=warmup)
    return breakdown.round_table(stored(run_dir), warmup=warmup)


def by_input_band(run_dir: str | Path, *, warmup: bool = False) -> pd.DataFrame:
    """``breakdown.by_input_band``: one row per prompt-length band, every band listed."""
    if not available():
        return breakdown.by_input_band(_in_memory(run_dir), warmup=warmup)
    return breakdown.band_table(stored(run_dir), warmup=warmup)


_LIST_COLUMNS = frozenset(("token_times_ns", "token_counts", "itl_ms"))


def sample_frame(
    run_dir: str | Path, n: int = 200_000, *, seed: int = 0, warmup: bool = False
) -> pd.DataFrame:
    """At most ``n`` records (else a seeded uniform sample) as a ``to_frame``-shaped frame,
    read one row group at a time: distributions are faithful, totals (a throughput
    timeline) scaled by the sampled fraction."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = parquet_path(run_dir)
    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    cols = [c for c in COLUMNS if c in names]
    warm = pf.read(columns=["warmup"]).column("warmup").to_numpy(zero_copy_only=False)
    keep = np.ones(len(warm), dtype=bool) if warmup else ~warm.astype(bool)
    total = int(keep.sum())
    if total > n:
        chosen = np.random.default_rng(seed).choice(np.flatnonzero(keep), n, replace=False)
        keep = np.zeros(len(warm), dtype=bool)
        keep[chosen] = True
    parts, start = [], 0
    for i in range(pf.num_row_groups):
        group = pf.read_row_group(i, columns=cols)
        mask = keep[start : start + group.num_rows]
        start += group.num_rows
        parts.append(group.filter(pa.array(mask)))
    table = pa.concat_tables(parts) if parts else pf.schema_arrow.empty_table().select(cols)
    df = table.to_pandas()
    df = df.sort_values(["unit_ordinal", "round_idx"], kind="stable").reset_index(drop=True)
    for col in COLUMNS:
        if col not in df:
            df[col] = [[] for _ in range(len(df))] if col in _LIST_COLUMNS else None
        elif col in _LIST_COLUMNS:
            df[col] = [list(v) for v in df[col]]
    for col in NS_COLUMNS:
        df[col] = df[col].astype("Int64")
    for col in ("warmup", "cached_tokens_reported"):
        df[col] = df[col].astype(bool)
    df.attrs["sampled_from"] = total
    return df[list(COLUMNS)]


# ---------------------------------------------------------------- report notebooks
MAX_REPORT_RECORDS = 200_000


def report_source(run_dir: str | Path, max_records: int = MAX_REPORT_RECORDS) -> Any:
    """What a report notebook plots for a stored run: the run loaded whole when it has at
    most ``max_records`` records, else a seeded sample of that many (``sample_frame``) whose
    ``attrs["run_dir"]`` tells the ``report_*`` functions to scan the whole run instead."""
    if available():
        import pyarrow.parquet as pq

        n = pq.read_metadata(parquet_path(run_dir)).num_rows
        if n > max_records:
            df = sample_frame(run_dir, max_records)
            df.attrs["run_dir"] = str(run_dir)
            return df
    return load(run_dir)


def _scanned(source: Any) -> str | None:
    """The run directory to scan: a sampled ``report_source``, or a run whose records
    stayed on disk (``RunResult.records_on_disk``); None means compute in memory."""
    if isinstance(source, RunResult) and source.records_on_disk:
        return source.run_dir
    return source.attrs.get("run_dir") if isinstance(source, pd.DataFrame) else None


def report_summary(source: Any) -> dict[str, Any]:
    """``summarize`` of a ``report_source`` (a scan of the whole run when it was sampled)."""
    run_dir = _scanned(source)
    return summarize(run_dir) if run_dir else summary.summarize(source)


def report_by_round(source: Any) -> pd.DataFrame:
    run_dir = _scanned(source)
    return by_round_index(run_dir) if run_dir else breakdown.by_round_index(source)


def report_by_band(source: Any) -> pd.DataFrame:
    run_dir = _scanned(source)
    return by_input_band(run_dir) if run_dir else breakdown.by_input_band(source)
