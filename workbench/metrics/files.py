"""A run directory with its metrics: ``save`` (files + ``summary.json``) and
``load_frames``; the files are ``storage.rundir``'s (storage never imports metrics)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.errors import WRITE_ERRNOS, ConfigError, OutputWriteError
from workbench.metrics.frame import to_frame
from workbench.metrics.summary import summarize
from workbench.records import RunResult
from workbench.storage.rundir import RECORDS, SUMMARY, load, read_json, write_json, write_run

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


def save(result: RunResult, directory: str | Path) -> Path:
    """Write every run file into ``directory`` (``storage.rundir.write_run``, then
    ``finish``: the summary recomputed with the manifest's SLO) and return it."""
    d = write_run(result, directory)
    finish(result, d)
    return d


def finish(result: RunResult, run_dir: Path, slo: Mapping[str, float] | None = None,
           *, parquet_written: bool = False) -> None:
    """After a run's records and manifest are on disk: ``records.parquet`` (a summary of
    records on disk only scans it; ``parquet_written``: already written as the records
    were, ``columns.RecordTables``), then ``summary.json`` (saying why, if it failed)."""
    if not parquet_written:
        write_parquet(run_dir)
    try:
        summary = summarize(result, slo)
    except Exception as exc:
        log.error("summary of %s failed; records are on disk", run_dir, exc_info=True)
        summary = {"summary_error": f"{type(exc).__name__}: {exc}"}
    else:
        result.summary = summary if slo is None else None  # the manifest's SLO: reusable
    write_json(run_dir / SUMMARY, summary)


def write_parquet(run_dir: Path) -> None:
    """``records.parquet`` beside ``records.jsonl`` (large-run analysis scans it)."""
    if not (run_dir / RECORDS).exists():
        return
    try:
        from workbench.metrics import columns

        columns.convert(run_dir)
    except (ConfigError, ImportError) as exc:  # pyarrow not installed: JSONL only
        log.info("records.parquet not written: %s", exc)
    except OSError as exc:
        if exc.errno in WRITE_ERRNOS:  # disk full: the run fails with one line (exit 5)
            raise OutputWriteError(run_dir / "records.parquet", exc) from None
        log.error("records.parquet not written (%s); records.jsonl is complete", exc)
    except ValueError as exc:  # a damaged line: the JSONL stays the truth
        log.error("records.parquet not written (%s); records.jsonl is complete", exc)


def load_frames(directory: str | Path) -> dict[str, pd.DataFrame]:
    """Everything of a run as DataFrames: ``records`` (with metrics), ``lifecycle``,
    ``timeline`` and ``summary`` (one row, nested keys joined with dots)."""
    import pandas as pd

    result = load(directory)
    d = Path(result.run_dir or directory)
    summary = read_json(d / SUMMARY) if (d / SUMMARY).exists() else summarize(result)
    return {
        "records": to_frame(result),
        "lifecycle": pd.DataFrame(result.lifecycle),
        "timeline": pd.DataFrame(result.metrics_timeline),
        "summary": pd.json_normalize(summary),
    }
