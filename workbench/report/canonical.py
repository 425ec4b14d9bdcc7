"""The canonical report of a run and its digest: what two runs of the same input must
share byte for byte (docs/measurement-rules.md, "Portable canonical digests").

``run_digest`` hashes the same bytes as ``report_digest(canonical_report(...))``, a row
at a time, without the report in memory."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import operator
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workbench.metrics import summarize
from workbench.metrics.agents import has_tasks
from workbench.metrics.columns import Columns
from workbench.metrics.frame import ROW_FIELDS, FrameStream, as_records
from workbench.records import RequestRecord, RunResult
from workbench.storage import columnar
from workbench.storage.columnar import EXTRA_INT_FIELDS
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


def run_digest(result: RunResult, slo: dict[str, float] | None = None,
               written: WrittenRecords | None = None) -> str:
    """``report_digest(canonical_report(result, slo))`` streamed: the same bytes in orjson's
    sorted key order, a row serialized and hashed as it is read. Records on disk are read
    once: each line hashed and added to the summary's frame, the summary (the last key)
    made from it after the records; or not read at all when ``written`` (told them as the
    run wrote them) holds exactly the file's (``WrittenRecords.usable``). ``written`` is
    used up either way."""
    lifecycle = _lifecycle(result)
    streamed = result.records_on_disk and not has_tasks(lifecycle)
    if written is not None and not (written.usable(result) and streamed):
        # not exactly the file's, or a session graph (the summary's tasks need the
        # records read back): the file is read, as if not told
        written.off()
        written = None
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
    if written is not None:
        written.hash_into(h)
        summary = _summary_bytes(result, slo, lifecycle, written.take_frame())
    elif streamed:
        frame = FrameStream()
        _list_bytes(h, _record_rows(result, frame))
        summary = _summary_bytes(result, slo, lifecycle, frame)
    else:
        _list(h, (_section("records[]", r.to_dict()) for r in _records(result)))
    h.update(b',"summary":')
    h.update(summary or b"")
    h.update(b"}")
    return h.hexdigest()


#: the types a stored field (and an ``extra`` worker field) may hold for ``WrittenRecords``
#: to take the record's value as its line reads back (a float could be NaN: null, None)
_PLAIN = frozenset((int, str, bool, type(None)))
_TAKE_ROW = operator.attrgetter(*ROW_FIELDS)  # extra last
#: ``_excluded("records[]")``: fields of a record, every one (a nested path would need
#: ``_section``: a test holds it so)
_RECORD_EXCLUDED = _excluded("records[]")
_SPILL_BUFFER = 1 << 20


class WrittenRecords:
    """The records of a run's canonical report made as ``records.jsonl`` is written
    (``add``: each record with its line; ``simulate(mirror=...)``), so ``run_digest`` need
    not read the file back (docs/virtual-time.md, "The digest streamed"). A record's
    canonical bytes are its fields but the token lists serialized by orjson (sorted keys,
    the exclusions out) with the token lists' text put back from the line where
    ``columnar.cut_tokens`` found it: the bytes ``_record_rows`` makes of the line read
    back, since the line is orjson's serialisation of the record as it is
    (``RecordWriter.write_line``) and orjson writes a value it reads back as it first wrote
    it. They go to an anonymous temporary file (~82 MB over the whole Mooncake trace: not
    held in memory), joined as the report's list joins them; the summary's frame is fed
    the record's own values (``FrameStream.add_values``; of ``extra`` its worker fields
    alone, all the summary reads of it), which are the line's when each stored field and
    worker field is a plain int, string, flag or None (``_PLAIN``: a float could be NaN,
    read back None).
    Anything else (no line, no cut, another record type, another value) turns it off,
    and ``run_digest`` reads the file as before."""

    def __init__(self) -> None:
        self.on = True
        self.count = 0  # records taken
        self.size = 0  # bytes of their lines: the file's size when it holds exactly them
        self._frame: FrameStream | None = FrameStream()
        self._spill: Any = None
        try:  # closed by off (or once hashed); gone with the process either way
            self._spill = tempfile.TemporaryFile(buffering=_SPILL_BUFFER)  # noqa: SIM115
        except OSError:  # nowhere to spill: the file is read back
            self.off()

    def add(self, rec: RequestRecord, line: bytes | None, cut: columnar.TokenCut | None
            ) -> None:  # fmt: skip
        if not self.on:
            return
        if line is None or cut is None or type(rec) is not RequestRecord \
                or type(rec.extra) is not dict:
            self.off()
            return
        values = _TAKE_ROW(rec)
        extra = rec.extra
        if not _PLAIN.issuperset(map(type, values[:-1])) or not _PLAIN.issuperset(
                type(extra.get(k)) for k in EXTRA_INT_FIELDS):
            self.off()  # a value the summary would read otherwise from the line
            return
        (ts, te, times), (cs, ce, counts) = cut
        row = dict(zip(ROW_FIELDS, values, strict=False))  # (as many: attrgetter's)
        row["token_times_ns"] = row["token_counts"] = []  # placeholders, as _record_rows'
        for key in _RECORD_EXCLUDED:  # _section's, for a top-level key
            del row[key]
        try:
            data = orjson.dumps(row, option=_OPTIONS)
        except TypeError:  # (orjson's error is one): a value the line had by its default
            self.off()
            return
        ti = data.find(_NO_TIMES) + len(_NO_TIMES) - 1  # each at its placeholder's "]"
        ci = data.find(_NO_COUNTS) + len(_NO_COUNTS) - 1
        text = memoryview(line)
        (a, ta), (b, tb) = sorted(((ti, text[ts:te]), (ci, text[cs:ce])))
        write = self._spill.write
        try:
            if self.count:
                write(b",")
            write(data[:a])
            write(ta)
            write(data[a:b])
            write(tb)
            write(data[b:])
        except OSError:  # the temporary's disk full: the run goes on, the file is read back
            self.off()
            return
        assert self._frame is not None  # (on)
        # the frame's extra: its worker fields alone (all the summary reads of it), a dict
        # of ints the collector does not track, the record's own let go with it
        workers = {k: extra[k] for k in EXTRA_INT_FIELDS if k in extra}
        self._frame.add_values((*values[:-1], workers), times, counts)
        self.count += 1
        self.size += len(line)

    def off(self) -> None:
        """Stop: nothing more is taken, the bytes and the frame let go."""
        self.on = False
        self._frame = None
        if self._spill is not None:
            with contextlib.suppress(OSError):  # (a buffered write's error, again)
                self._spill.close()

    def usable(self, result: RunResult) -> bool:
        """Whether the records taken are exactly ``result``'s on disk: its
        ``records.jsonl`` as long as their lines (a failed write, or lines written
        otherwise, leave it shorter or longer), and their bytes all in the temporary."""
        if not self.on or self._frame is None or not result.records_on_disk:
            return False
        try:
            size = (Path(result.run_dir or "") / RECORDS).stat().st_size
            self._spill.flush()  # (a full disk says so here)
        except OSError:
            return False
        return size == self.size

    def hash_into(self, h: Any) -> None:
        """The records' list, ``[...]``, into ``h`` (the bytes then let go)."""
        spill = self._spill
        spill.seek(0)  # (flushed by ``usable``)
        h.update(b"[")
        while chunk := spill.read(_SPILL_BUFFER):
            h.update(chunk)
        h.update(b"]")
        spill.close()

    def take_frame(self) -> FrameStream:
        """The summary's frame of the records, handed over (``off`` after)."""
        frame = self._frame
        assert frame is not None
        self.off()
        return frame


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
