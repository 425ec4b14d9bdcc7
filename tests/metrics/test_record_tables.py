"""``records.parquet`` built while ``records.jsonl`` is written (``columns.RecordTables``)
is the file ``convert`` makes by reading the JSONL back, byte for byte; a record it
cannot mirror exactly (a value of another type, a line the stdlib wrote or redaction
changed, token lists it cannot cut) turns it off, and the file is read as before."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench import safe_write as safe
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.metrics import columns
from workbench.records import RequestRecord
from workbench.storage import columnar
from workbench.storage.rundir import RECORDS, RecordWriter, iter_jsonl

pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


class Label(enum.StrEnum):
    OK = "ok"


def _record(i: int, **changes: Any) -> RequestRecord:
    t0 = 1_000_000_000 + i * 10_000_000
    rec = RequestRecord(
        run_id="r", request_id=f"q{i}", unit_ordinal=i, session_id=f"s{i % 3}", round_idx=i % 2,
        backend="openai", policy=None, planned_prefix_tokens=16, planned_input_tokens=32,
        planned_output_tokens=3, derived_prefix=16, sent_prompt_tokens=48, scheduled_ns=t0,
        released_ns=t0, admitted_ns=t0, dispatch_ns=t0, first_token_ns=t0 + 5_000_000,
        last_token_ns=t0 + 9_000_000, end_ns=t0 + 9_000_000,
        token_times_ns=[t0 + 5_000_000, t0 + 7_000_000, t0 + 9_000_000],
        token_counts=[1, 2, 1], http_status=200, prompt_tokens=48, completion_tokens=4,
        cached_tokens=16 if i % 4 else None, cached_tokens_reported=i % 4 != 0,
        finish_reason="length", routing_slot=i, warmup=i == 0,
        extra={"input_sequence_hashes": [2**64 - 1, 12], "worker": i % 2,
               "worker_waiting": 0},
    )  # fmt: skip
    for k, v in changes.items():
        setattr(rec, k, v)
    return rec


def _write(run_dir: Path, recs: list[RequestRecord], **batches: int) -> bool:
    """``recs`` written to ``run_dir``'s JSONL as a run writes them, and its
    ``records.parquet`` by a ``RecordTables``: whether it wrote it (False: it turned off)."""
    tables = columns.RecordTables(run_dir / columnar.PARQUET, **batches)
    with RecordWriter(run_dir / RECORDS) as w:
        for rec in recs:
            tables.add(rec, w.write_line(rec))
    return tables.finish()


def _same_file(run_dir: Path, **batches: int) -> pq.ParquetFile:
    """The file written as the records were is the reading's of their JSONL, byte for byte."""
    want = run_dir / "read.parquet"
    columns.convert(run_dir, out=want, **batches)
    assert (run_dir / columnar.PARQUET).read_bytes() == want.read_bytes()
    return pq.ParquetFile(want)


@pytest.mark.parametrize("batches", [{}, {"batch_rows": 3}, {"batch_bytes": 2_000}])
def test_the_tables_built_as_written_are_the_files_reading(tmp_path: Path,
                                                           batches: dict[str, int]) -> None:
    recs = [_record(i) for i in range(10)]
    recs[3] = _record(3, token_times_ns=[], token_counts=[], status="error",
                      error="HTTP 400: no", first_token_ns=None, completion_tokens=None)
    recs[5].extra = {"worker": 3.0, "worker_waiting": True, "dp_rank": [1]}  # nulled both ways
    recs[6].extra = {}
    assert _write(tmp_path, recs, **batches)
    rows, size = batches.get("batch_rows", 8_192), batches.get("batch_bytes", 8 << 20)
    cuts, n, got = 0, 0, 0  # where the reading cuts its batches: rows or bytes of JSON
    for line in (tmp_path / RECORDS).read_bytes().splitlines(keepends=True):
        n, got = n + 1, got + len(line)
        if n >= rows or got >= size:
            cuts, n, got = cuts + 1, 0, 0
    groups = _same_file(tmp_path, **batches).metadata.num_row_groups
    assert groups == cuts + (n > 0) == {"batch_rows": 4, "batch_bytes": 4}.get(
        next(iter(batches), ""), 1)
    assert not safe.temp_of(tmp_path / columnar.PARQUET).exists()


def test_no_record_is_the_schema_alone(tmp_path: Path) -> None:
    assert _write(tmp_path, [])
    assert _same_file(tmp_path).metadata.num_rows == 0


def test_a_simulated_runs_records_stay_mirrored(tmp_path: Path) -> None:
    trace = str(data_path("tracelab/multi_session_example.csv"))
    result = simulate({"trace": trace, "context": "prefix-preserving", "out_dir": str(tmp_path),
                       "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
    run_dir = Path(result.run_dir or "")
    recs = [RequestRecord.from_dict(d) for d in iter_jsonl(run_dir / RECORDS)]
    again = tmp_path / "again"
    again.mkdir()
    assert _write(again, recs, batch_rows=5)
    _same_file(again, batch_rows=5)
    # the run's own file is the reading's of its JSONL (written as it was), nothing left
    columns.convert(run_dir, out=tmp_path / "read.parquet")
    assert (run_dir / columnar.PARQUET).read_bytes() == (tmp_path / "read.parquet").read_bytes()
    assert not safe.temp_of(run_dir / columnar.PARQUET).exists()


ODD: list[dict[str, Any]] = [
    {"prompt_tokens": np.int64(48)},  # an int JSON reads as int, held as another type
    {"planned_input_tokens": 3.5},  # a float where an int goes
    {"cached_tokens": 2**64},  # wider than orjson: the stdlib writes the line
    {"cached_tokens_reported": 1},
    {"status": Label.OK},  # a str subclass
    {"extra": {"worker": np.int64(1)}},  # reads back as an int, not nulled
    {"token_times_ns": None, "token_counts": None},  # no list to cut
    {"token_times_ns": [1_000_000_000, True]},  # not the JSON of int64 values
    {"error": "key sk-abcdefghijklmnopqrstuvwx1234", "status": "error"},  # redacted line
]


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_record_turns_it_off(tmp_path: Path, odd: int) -> None:
    recs = [_record(i) for i in range(6)]
    recs[4] = _record(4, **ODD[odd])
    assert not _write(tmp_path, recs, batch_rows=2)  # (a row group written before it)
    assert not (tmp_path / columnar.PARQUET).exists()
    assert not safe.temp_of(tmp_path / columnar.PARQUET).exists()
    if "error" in ODD[odd]:  # the line was redacted as written: not the record's values
        assert b"sk-abc" not in (tmp_path / RECORDS).read_bytes()
    columns.convert(tmp_path)  # the file is read instead: it converts as before


def test_a_failed_write_turns_it_off(tmp_path: Path) -> None:
    """A row group that cannot be written (here: its temporary's place is a directory)
    leaves nothing behind; the reading decides."""
    safe.temp_of(tmp_path / columnar.PARQUET).mkdir()
    assert not _write(tmp_path, [_record(i) for i in range(4)], batch_rows=2)
    assert not (tmp_path / columnar.PARQUET).exists()
