"""The canonical report of a run and its digest: what two runs of the same input must
share byte for byte (docs/measurement-rules.md, "Portable canonical digests").

``run_digest`` hashes the same bytes as ``report_digest(canonical_report(...))``, a row
at a time, without the report in memory."""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workbench.metrics import summarize
from workbench.metrics.agents import has_tasks
from workbench.metrics.columns import Columns
from workbench.metrics.frame import FrameStream, as_records
from workbench.records import RequestRecord, RunResult
from workbench.storage import columnar
from workbench.storage.rundir import LIFECYCLE, RECORDS, iter_jsonl, loads_line

# The one closed exclusion list (docs/measurement-rules.md); "records[]." is every record.
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
    "manifest.max_error_rate": "how the command judges the run (its exit status), not what ran",
    "manifest.records_kept": "storage: whether records are held in memory (out_dir decides)",
    "manifest.records_kept_reason": "storage: why (names the out_dir case)",
    "manifest.config.executor.connection_idle_s": (
        "the live client's sockets: how long an idle connection is reused (no virtual run "
        "has one; a live run's resends are in summary.client)"),
    "manifest.config.arrival.stop_after_refused": (
        "the live client's sockets: refused connections in a row before the run stops (no "
        "virtual run connects; a live run it stopped says so in stop_reason and completion)"),
    "manifest.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client": "wall clock: a live client's CPU per wall second and release lags",
    "summary.client_bottleneck": "wall clock: derived from summary.client",
    "summary.failures": "derived: the failed records' classes and reasons (records[] are in)",
    "summary.output_short": "derived: the ok records' output tokens against the plan "
                            "(records[] are in)",
    "summary.prompt_counted": "derived: the ok records' prompt tokens against those sent "
                              "(records[] are in)",
    "records[].run_id": "the same as manifest.run_id",
    "records[].extra.connect_wait_ms": (
        "the live client's sockets: a new connection's wait (no virtual run makes one; "
        "summary.client describes them)"),
    "records[].extra.stale_attempt_ms": (
        "the live client's sockets: a resent request's first attempt (no virtual run "
        "resends; summary.client describes them)"),
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


@functools.cache
def _excluded(section: str) -> tuple[str, ...]:
    """The excluded paths in ``section`` (once per name: it is asked for every row)."""
    prefix = section + "."
    return tuple(k[len(prefix) :] for k in CANONICAL_EXCLUDED if k.startswith(prefix))


def canonical_report(result: RunResult, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Manifest, summary, every record, lifecycle row and timeline sample, less exactly
    ``CANONICAL_EXCLUDED``."""
    records, lifecycle = as_records(result), _lifecycle(result)
    return {
        "manifest": _section("manifest", copy.deepcopy(result.manifest.to_dict())),
        "summary": _section("summary", summarize(_in_memory(result, records, lifecycle), slo)),
        "records": [_section("records[]", r.to_dict()) for r in records],
        "lifecycle": [_section("lifecycle[]", dict(row)) for row in lifecycle],
        "metrics_timeline": [dict(row) for row in result.metrics_timeline],
    }


def _section(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a section, or a row of a list section: ``records[]``) less its exclusions."""
    for dotted in _excluded(name):
        _drop(doc, dotted)
    return doc


def _lifecycle(result: RunResult) -> list[dict[str, Any]]:
    return list(_lifecycle_rows(result))


def _in_memory(result: RunResult, records: list[RequestRecord],
               lifecycle: list[dict[str, Any]]) -> RunResult:
    """``result`` with ``records`` in memory, for ``summarize``."""
    return RunResult(result.run_id, records, manifest=result.manifest, lifecycle=lifecycle,
                     metrics_timeline=result.metrics_timeline, cancelled=result.cancelled)


_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def report_digest(report: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(report, option=_OPTIONS)).hexdigest()


def run_digest(result: RunResult, slo: dict[str, float] | None = None) -> str:
    """``report_digest(canonical_report(result, slo))`` streamed: the same bytes in orjson's
    sorted key order, a row serialized and hashed as it is read. Records on disk are read
    once: each line hashed and added to the summary's frame, the summary (the last key)
    made from it after the records."""
    lifecycle = _lifecycle(result)
    streamed = result.records_on_disk and not has_tasks(lifecycle)
    # records in memory, or a session graph (its tasks need the records): summary first,
    # the records it reads let go before the rest
    summary = None if streamed else _summary_bytes(result, slo, lifecycle, None)
    h = hashlib.sha256()
    h.update(b'{"lifecycle":')
    _list(h, (_section("lifecycle[]", dict(row)) for row in lifecycle))
    h.update(b',"manifest":')
    manifest = _section("manifest", copy.deepcopy(result.manifest.to_dict()))
    h.update(orjson.dumps(manifest, option=_OPTIONS))
    h.update(b',"metrics_timeline":')
    _list(h, (dict(row) for row in result.metrics_timeline))
    h.update(b',"records":')
    if streamed:
        frame = FrameStream()
        _list_bytes(h, _record_rows(result, frame))
        summary = _summary_bytes(result, slo, lifecycle, frame)
    else:
        _list(h, (_section("records[]", r.to_dict()) for r in _records(result)))
    h.update(b',"summary":')
    h.update(summary or b"")
    h.update(b"}")
    return h.hexdigest()


def _list_bytes(h: Any, rows: Iterable[bytes]) -> None:
    h.update(b"[")
    for i, data in enumerate(rows):
        h.update(b"," if i else b"")
        h.update(data)
    h.update(b"]")


def _list(h: Any, rows: Iterable[Any]) -> None:
    h.update(b"[")
    for i, row in enumerate(rows):
        h.update(b"," if i else b"")
        h.update(orjson.dumps(row, option=_OPTIONS))
    h.update(b"]")


def _lifecycle_rows(result: RunResult) -> Iterable[dict[str, Any]]:
    if result.lifecycle or not result.records_on_disk:
        return result.lifecycle
    return iter_jsonl(Path(result.run_dir or "") / LIFECYCLE)


def _records(result: RunResult) -> Iterator[RequestRecord]:
    if not result.records_on_disk:
        yield from as_records(result)
        return
    for row in iter_jsonl(Path(result.run_dir or "") / RECORDS):
        yield RequestRecord.from_dict(row)


_FIELDS = frozenset(RequestRecord.__dataclass_fields__)


def _record_rows(result: RunResult, frame: FrameStream) -> Iterator[bytes]:
    """The canonical bytes of the records on disk, each added to ``frame`` on the way: a
    line with exactly a record's fields is that record's ``to_dict`` (the same values),
    taken as it is; any other goes through ``RequestRecord`` (defaults, unknown keys out).
    A line's token times (and counts) are read apart (``_cut``) and their text put back
    into its bytes, where orjson would write the same digits."""
    for row, cut in iter_jsonl(Path(result.run_dir or "") / RECORDS, parse=_cut):
        # the key set checked once (setting the token lists below keeps it: the keys are there)
        exact = isinstance(row, dict) and row.keys() == _FIELDS
        if cut is not None and exact:
            times, times_text, counts, counts_text = cut
            row["token_times_ns"] = times
            if counts is not None:
                row["token_counts"] = counts
            frame.add_row(row)
            row["token_times_ns"] = []  # placeholders: the one '"token_times_ns":[]'
            if counts is not None:  # (and '"token_counts":[]')
                row["token_counts"] = []
            data = orjson.dumps(_section("records[]", row), option=_OPTIONS)
            if counts is not None:
                data = data.replace(_NO_COUNTS, b"%s%s]" % (_NO_COUNTS[:-1], counts_text), 1)
            yield data.replace(_NO_TIMES, b"%s%s]" % (_NO_TIMES[:-1], times_text), 1)
            continue
        if cut is not None:  # the values as the line reads: the lists as lists
            row["token_times_ns"] = cut[0].tolist()
            if cut[2] is not None:
                row["token_counts"] = cut[2].tolist()
        if not exact:
            row = RequestRecord.from_dict(row).to_dict()
        frame.add_row(row)
        yield orjson.dumps(_section("records[]", row), option=_OPTIONS)


_NO_TIMES = b'"token_times_ns":[]'
_NO_COUNTS = b'"token_counts":[]'
#: a line's token times and their text, its counts and theirs (None: in the row)
_Cut = tuple[np.ndarray, bytes, np.ndarray | None, bytes]


def _cut(line: bytes) -> tuple[Any, _Cut | None]:
    """A record line read exactly (``loads_line``), its token times (and counts) apart
    when they are the digits orjson writes (``columnar.cut_times``): ``(row, cut)``, or
    ``(row, None)`` with them in ``row``. A bad line raises as ``loads_line`` does."""
    row, cut = columnar.cut_times(line, loads_line)
    if cut is None:
        return row, None
    return row, (cut.values, line[cut.start : cut.end], cut.counts, line[cut.cstart : cut.cend])


def _summary_bytes(result: RunResult, slo: dict[str, float] | None,
                   lifecycle: list[dict[str, Any]], frame: FrameStream | None) -> bytes:
    """The summary's bytes as ``canonical_report`` makes them (from the records, never
    ``summarize_stored``: not the same to the last bit): from ``frame`` (the records on
    disk streamed into it), else from the records."""
    if frame is not None:  # the frame's numbers, pandas not imported (Columns.streamed)
        summary = summarize(_in_memory(result, [], lifecycle), slo,
                            frame=Columns.streamed(frame))
    else:
        summary = summarize(_in_memory(result, as_records(result), lifecycle), slo)
    return orjson.dumps(_section("summary", summary), option=_OPTIONS)
