"""The canonical report of a run and its digest: what two runs of the same input must
share byte for byte (docs/measurement-rules.md, "Portable canonical digests").

``canonical_report`` is the manifest, the summary, every record, lifecycle row and
timeline sample, less exactly ``CANONICAL_EXCLUDED`` (wall clock, paths, the host);
``report_digest`` its sha256 over sorted keys. A virtual run (``simulate``) gives the
same digest for the same trace content and engine config wherever and whenever it runs.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import orjson

from workbench.metrics import summarize
from workbench.metrics.frame import as_records
from workbench.records import RunResult
from workbench.storage.rundir import LIFECYCLE, read_jsonl

# The canonical report's one closed exclusion list (docs/measurement-rules.md): every
# other field of the manifest, the summary, each record, each lifecycle row and each
# timeline sample is in. Paths are dotted; "records[]." applies to every record.
CANONICAL_EXCLUDED: dict[str, str] = {
    "manifest.run_id": "wall clock: a UTC stamp plus a random suffix",
    "manifest.schema": "format: the version of manifest.json's layout (docs/run-directory.md)",
    "manifest.started_at": "wall clock",
    "manifest.finished_at": "wall clock",
    "manifest.host": "host name and platform",
    "manifest.versions.python": "the host's interpreter",
    "manifest.versions.aiohttp": "the host's installed library",
    "manifest.versions.pandas": "the host's installed library",
    "manifest.versions.numpy": "the host's installed library",
    "manifest.config.run_id": "the run's name (a folder name)",
    "manifest.config.overwrite": "how the run directory was claimed, not what ran",
    "manifest.config.out_dir": "path: the output folder",
    "manifest.config.trace.path": "path: where the trace is (its content is in: trace.sha256)",
    "manifest.trace.path": "path: where the trace is",
    "manifest.run_dir": "path: the run directory",
    "manifest.records_kept": "storage: whether records are held in memory (out_dir decides)",
    "manifest.records_kept_reason": "storage: why (names the out_dir case)",
    "manifest.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client_bottleneck": "wall clock: derived from summary.client",
    "records[].run_id": "the same as manifest.run_id",
    "lifecycle[].run_id": "the same as manifest.run_id",
}



def _drop(doc: dict[str, Any], dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        nxt = doc.get(key)
        if not isinstance(nxt, dict):
            return
        doc = nxt
    doc.pop(leaf, None)


def _excluded(section: str) -> list[str]:
    prefix = section + "."
    return [k[len(prefix) :] for k in CANONICAL_EXCLUDED if k.startswith(prefix)]


def canonical_report(result: RunResult, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Manifest, summary, every record, lifecycle row and timeline sample, less exactly
    ``CANONICAL_EXCLUDED``: the same trace content and engine config give the same
    report whatever the output folder, the trace's path, the host and the time."""
    records, lifecycle = as_records(result), _lifecycle(result)
    # summarized in memory from the records, which are in the digest anyway (the
    # stored-run path gives the same numbers, but needs pyarrow)
    in_memory = RunResult(result.run_id, records, manifest=result.manifest, lifecycle=lifecycle,
                          metrics_timeline=result.metrics_timeline, cancelled=result.cancelled)
    doc: dict[str, Any] = {
        "manifest": copy.deepcopy(result.manifest),
        "summary": summarize(in_memory, slo),
        "records": [r.to_dict() for r in records],
        "lifecycle": [dict(row) for row in lifecycle],
        "metrics_timeline": [dict(row) for row in result.metrics_timeline],
    }
    for section in ("manifest", "summary"):
        for dotted in _excluded(section):
            _drop(doc[section], dotted)
    for section in ("records", "lifecycle"):
        for dotted in _excluded(section + "[]"):
            for row in doc[section]:
                _drop(row, dotted)
    return doc


def _lifecycle(result: RunResult) -> list[dict[str, Any]]:
    if result.lifecycle or not result.records_on_disk:
        return result.lifecycle
    return read_jsonl(Path(result.run_dir or "") / LIFECYCLE)


def report_digest(report: dict[str, Any]) -> str:
    blob = orjson.dumps(report, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.sha256(blob).hexdigest()
