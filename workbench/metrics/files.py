"""A run directory with its metrics: ``save`` (files + recomputed ``summary.json``) and
``load_frames`` (everything of a run as DataFrames).

The files themselves are ``workbench.storage.rundir``'s; this module adds what needs the
metrics, so storage never imports metrics.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbench.metrics.frame import to_frame
from workbench.metrics.summary import summarize
from workbench.records import RunResult
from workbench.storage.rundir import SUMMARY, load, read_json, write_run


def save(result: RunResult, directory: str | Path) -> Path:
    """Write every run file into ``directory`` (created) and return it.

    Safe to call after ``RecordWriter``s streamed records/lifecycle there: lines
    already on disk are kept and only the missing ones are appended. The
    summary is recomputed from the records (SLO from the manifest's config). A
    run that kept its records on disk only (``RunResult.records_on_disk``) has
    nothing to sync from memory: its files are copied, never overwritten.
    """
    return write_run(result, directory, summarize(result))


def load_frames(directory: str | Path) -> dict[str, pd.DataFrame]:
    """Everything of a run as DataFrames: ``records`` (with metrics), ``lifecycle``,
    ``timeline`` and ``summary`` (one row, nested keys joined with dots)."""
    result = load(directory)
    d = Path(result.run_dir or directory)
    summary = read_json(d / SUMMARY) if (d / SUMMARY).exists() else summarize(result)
    return {
        "records": to_frame(result),
        "lifecycle": pd.DataFrame(result.lifecycle),
        "timeline": pd.DataFrame(result.metrics_timeline),
        "summary": pd.json_normalize(summary),
    }
