"""``records.parquet`` converted from rows parsed by ``orjson.loads`` alone (no write-back
check a line) is the file the exact reading (``loads_line``, ``batch_table``) makes, byte
for byte: on a simulated run, and on lines with odd values — nulls, integers out of
int64's (or orjson's) range in every kind of field, floats where ints go, bools in token
lists, cluster ``extra`` fields of every type, absent and unknown fields — each of which
must send its batch through the exact reading."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.metrics import columns
from workbench.metrics.derive import _flat, int_rows
from workbench.storage import columnar
from workbench.storage.rundir import RECORDS, iter_jsonl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

BIG = 2**64  # orjson reads it as a float; the standard parser as an int
LOW = -(2**63) - 1  # as a float it is -2**63 exactly: an int64 pyarrow would take


def _exact_batches(path: Path, rows: int, size: int) -> Iterator[list[Any]]:
    """The lines read exactly (``iter_jsonl``, ``loads_line``), cut where the conversion
    cuts its batches (``rows`` lines or ``size`` bytes of JSON, whichever comes first)."""
    batch: list[Any] = []
    got = 0
    for obj, line, _ in iter_jsonl(path, lines=True):
        batch.append(obj)
        got += len(line)
        if len(batch) >= rows or got >= size:
            yield batch
            batch, got = [], 0
    if batch:
        yield batch


def _reference(run_dir: Path, out: Path, *, token_times: bool, rows: int, size: int) -> None:
    """The conversion as it was: every line read exactly, every batch by ``batch_table``."""
    batches = _exact_batches(run_dir / RECORDS, rows, size)
    tables = (columns.batch_table(b, token_times=token_times) for b in batches)
    columnar.write_tables(tables, out, columnar.schema(columns.DERIVED_TYPES, token_times))


def _same_file(run_dir: Path, tmp: Path, *, token_times: bool = False, rows: int = 8_192,
               size: int = 8 << 20) -> pa.Table:  # fmt: skip
    want, got = tmp / "want.parquet", tmp / "got.parquet"
    _reference(run_dir, want, token_times=token_times, rows=rows, size=size)
    columns.convert(run_dir, token_times=token_times, batch_rows=rows, batch_bytes=size,
                    out=got)  # fmt: skip
    assert got.read_bytes() == want.read_bytes()
    table = pq.read_table(got)
    assert table.equals(pq.read_table(want))
    return table


def _record(i: int, **changes: Any) -> dict[str, Any]:
    t0 = 1_000_000_000 + i * 10_000_000
    rec: dict[str, Any] = {
        "run_id": "r", "request_id": f"q{i}", "unit_ordinal": i, "session_id": f"s{i % 3}",
        "round_idx": 0, "backend": "openai", "policy": None, "planned_prefix_tokens": 16,
        "planned_input_tokens": 32, "planned_output_tokens": 3, "folded_prefix_tokens": 0,
        "derived_prefix": 16, "prefix_shortfall_tokens": 0, "sent_prompt_tokens": 48,
        "scheduled_ns": t0, "released_ns": t0, "admitted_ns": t0, "dispatch_ns": t0,
        "first_token_ns": t0 + 5_000_000, "last_token_ns": t0 + 9_000_000,
        "end_ns": t0 + 9_000_000,
        "token_times_ns": [t0 + 5_000_000, t0 + 7_000_000, t0 + 9_000_000],
        "token_counts": [1, 1, 1], "http_status": 200, "prompt_tokens": 48,
        "completion_tokens": 3, "cached_tokens": 16, "cached_tokens_reported": True,
        "echoed_prompt_tokens": 0, "finish_reason": "length", "server_request_id": None,
        "routing_slot": i, "warmup": False, "status": "ok", "error": None,
        "extra": {"input_sequence_hashes": [2**64 - 1, 12], "worker": i % 2,
                  "worker_waiting": 0},
        "schema": 1,
    }  # fmt: skip
    rec.update(changes)
    return rec


ODD: list[dict[str, Any]] = [
    {"prompt_tokens": BIG},  # out of orjson's range in an int field
    {"cached_tokens": LOW},  # a float of -2**63 to orjson: not nulled if read so
    {"first_token_ns": None, "completion_tokens": None, "cached_tokens": None},
    {"planned_input_tokens": 3.5},  # a real float: truncated, as the old reading did
    {"token_times_ns": [1_000_000_000, BIG]},
    {"token_times_ns": [1_000_000_000, 2**63]},  # in orjson's range, out of int64's
    {"token_times_ns": [1_000_000_000, 1_500_000_000.0], "token_counts": [1, 1]},
    {"token_counts": [1.0, 1, True]},  # == 1 each
    {"token_counts": [2, True, 0]},
    {"token_times_ns": [True, 2_000_000_000, 3_000_000_000]},
    {"token_times_ns": [], "token_counts": []},
    {"token_times_ns": None, "token_counts": None},
    {"error": BIG, "status": "error"},  # text stored as its string: "1844...", not a float's
    {"error": "upstream said no", "status": "error", "http_status": 500},
    {"request_id": 7},
    {"warmup": "yes", "cached_tokens_reported": 1},
    {"extra": {"worker": 3.0, "worker_waiting": BIG, "dp_rank": 1}},
    {"extra": {"worker": 2**63, "worker_waiting": True, "dp_rank": None}},
    {"extra": [1, 2]},
    {"surprise": {"nested": [BIG]}},  # a field no reader knows: ignored either way
]


def _write(path: Path, recs: list[dict[str, Any]]) -> None:
    lines = []
    for r in recs:
        try:
            lines.append(orjson.dumps(r))
        except TypeError:  # an int wider than 64 bits: the standard library writes it
            lines.append(json.dumps(r, separators=(",", ":")).encode())
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_a_simulated_runs_file_is_the_exact_readings(tmp_path: Path) -> None:
    trace = str(data_path("tracelab/multi_session_example.csv"))
    result = simulate({"trace": trace, "context": "prefix-preserving", "out_dir": str(tmp_path),
                       "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
    run_dir = Path(result.run_dir or "")
    n = sum(1 for _ in iter_jsonl(run_dir / RECORDS))
    for token_times in (False, True):
        table = _same_file(run_dir, tmp_path, token_times=token_times, rows=7)
        assert table.num_rows == n
    # the file the run itself wrote is the exact reading's too
    _reference(run_dir, tmp_path / "ref.parquet", token_times=False, rows=8_192, size=8 << 20)
    assert (run_dir / columnar.PARQUET).read_bytes() == (tmp_path / "ref.parquet").read_bytes()


@pytest.mark.parametrize("token_times", [False, True])
@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_line_reads_as_the_exact_reading_does(tmp_path: Path, odd: int,
                                                     token_times: bool) -> None:  # fmt: skip
    recs = [_record(i) for i in range(9)]
    recs[4] = _record(4, **ODD[odd])
    _write(tmp_path / RECORDS, recs)
    # batches of 3 rows: the odd line's batch and two plain ones
    _same_file(tmp_path, tmp_path, token_times=token_times, rows=3)


def test_absent_fields_take_their_defaults_both_ways(tmp_path: Path) -> None:
    recs = [_record(i) for i in range(5)]
    _write(tmp_path / RECORDS, recs)
    lines = (tmp_path / RECORDS).read_bytes().splitlines()
    short = orjson.loads(lines[2])
    for key in ("folded_prefix_tokens", "schema", "status", "warmup", "extra", "token_counts"):
        del short[key]
    lines[2] = orjson.dumps(short)
    (tmp_path / RECORDS).write_bytes(b"\n".join(lines) + b"\n")
    _same_file(tmp_path, tmp_path, rows=2)


def test_the_plain_reading_declines_exactly_the_odd_rows() -> None:
    def rows(lines: list[bytes]) -> list[Any]:
        return [columnar.cut_times(line) for line in lines]

    plain = [orjson.dumps(_record(i)) for i in range(3)]
    assert all(t is not None for _, t in rows(plain))
    assert columns._plain_table(rows(plain), False) is not None
    for change in ({"prompt_tokens": BIG}, {"cached_tokens": LOW},
                   {"token_times_ns": [1, BIG]}, {"error": BIG}):  # fmt: skip
        line = json.dumps(_record(9, **change)).encode()
        assert columns._plain_table(rows([*plain, line]), False) is None, change


#: a record line's token times written otherwise than orjson writes them, or placed where
#: the cut must not take them: (what is replaced, by what) in the line of ``_record(4)``
EDITS: list[tuple[bytes, bytes]] = [
    (b'"token_times_ns":[', b'"token_times_ns": ['),  # not the member's exact text
    (b'"token_times_ns":[1', b'"token_times_ns":[ 1'),  # a space inside
    (b'"token_times_ns":[1', b'"token_times_ns":[01'),  # a leading zero: not JSON
    (b'"token_times_ns":[1', b'"token_times_ns":[-0,1'),
    (b'"token_times_ns":[1', b'"token_times_ns":[99999999999999999999,1'),  # saturates
    (b'"token_times_ns":[1', b'"token_times_ns":[1.5,1'),
    (b'"token_times_ns":[1', b'"token_times_ns":[[7],1'),  # nested: the first "]" is wrong
    (b'"token_times_ns":[1', b'"token_times_ns":["]",1'),
    (b'"token_times_ns":', b'"token\\u005ftimes_ns":'),  # the key spelled with an escape
    (b'"extra":{', b'"extra":{"token_times_ns":[5,6],'),  # the key twice, one nested
    (b'"request_id":"q4"', b'"request_id":"q4","token_times_ns":[9]'),  # twice: last wins
    (b'"token_times_ns":', b'"token_times_nz":'),  # absent: the default
    # the counts, cut apart only as orjson writes them: else the row keeps them as read
    (b'"token_counts":[', b'"token_counts": ['),
    (b'"token_counts":[1', b'"token_counts":[1.0'),
    (b'"token_counts":[1', b'"token_counts":[true'),
    (b'"token_counts":[1', b'"token_counts":[-0,2'),
    (b'"token_counts":[1', b'"token_counts":[99999999999999999999,2'),
    (b'"token_counts":[1', b'"token_counts":[3'),  # as orjson writes it
    (b'"extra":{', b'"extra":{"token_counts":[5],'),  # the key twice, one nested
    (b'"token_counts":', b'"token_counts_":'),  # absent: the default
]


@pytest.mark.parametrize("token_times", [False, True])
@pytest.mark.parametrize("edit", range(len(EDITS)))
def test_token_times_not_as_orjson_writes_them_read_exactly(tmp_path: Path, edit: int,
                                                            token_times: bool) -> None:  # fmt: skip
    old, new = EDITS[edit]
    lines = [orjson.dumps(_record(i)) for i in range(9)]
    assert old in lines[4]
    lines[4] = lines[4].replace(old, new, 1)
    (tmp_path / RECORDS).write_bytes(b"\n".join(lines) + b"\n")
    try:
        _reference(tmp_path, tmp_path / "probe.parquet", token_times=token_times, rows=3,
                   size=8 << 20)  # fmt: skip
    except ValueError as exc:  # not JSON at all: the conversion refuses it the same way
        assert "invalid JSON line" in str(exc)
        with pytest.raises(ValueError) as got:
            columns.convert(tmp_path, token_times=token_times, batch_rows=3,
                            out=tmp_path / "got.parquet")  # fmt: skip
        assert str(got.value) == str(exc)
        return
    _same_file(tmp_path, tmp_path, token_times=token_times, rows=3)


def test_the_cut_takes_the_one_top_level_member() -> None:
    line = orjson.dumps(_record(2))
    obj, cut = columnar.cut_times(line)
    assert obj == {**orjson.loads(line), "token_times_ns": [], "token_counts": []}
    assert cut is not None and line[cut.start : cut.end] == b"1025000000,1027000000,1029000000"
    assert cut.values.tolist() == [1025000000, 1027000000, 1029000000]
    assert cut.counts is not None and cut.counts.tolist() == [1, 1, 1]
    assert line[cut.cstart : cut.cend] == b"1,1,1"
    text = line[cut.start : cut.end]
    # the counts before the times in the line: found where they are
    flipped = orjson.dumps({"token_counts": [2, 3], **orjson.loads(line)})
    _, cut = columnar.cut_times(flipped)
    assert cut is not None and flipped[cut.cstart : cut.cend] == b"1,1,1"
    swapped = line.replace(b'"token_counts":[1,1,1],', b"").replace(
        b'"token_times_ns"', b'"token_counts":[4,5],"token_times_ns"')
    _, cut = columnar.cut_times(swapped)
    assert cut is not None and swapped[cut.cstart : cut.cend] == b"4,5"
    assert cut.counts is not None and cut.counts.tolist() == [4, 5]
    flat = columnar.token_times([text, b"", b"7"])
    assert flat is not None
    assert flat[0].tolist() == [1025000000, 1027000000, 1029000000, 7]
    assert flat[1].tolist() == [3, 0, 1]
    for bad in (b"1,,2", b"1,2,", b"01", b"1 ,2", b"+1", b"-0", b"99999999999999999999"):
        assert columnar.token_times([bad]) is None, bad


def test_token_lists_flat_as_fromiter_makes_them() -> None:
    lists: list[Any] = [[1, 1, 1], [5, 7], [], [1.0, True, 1], [3, 1], [2**40, -3]]
    lens = np.array([len(v) for v in lists], dtype=np.int64)
    want = np.fromiter((int(x) for v in lists for x in v), dtype=np.int64)
    assert np.array_equal(_flat(lists, lens), want)
    assert np.array_equal(_flat([[2.5, 4]], np.array([2])), np.array([2, 4]))  # truncated
    cut = np.array([2, 1, 0, 3, 1, 2])  # rows cut to their first values
    want_cut = np.concatenate(
        [np.array(v[:k], dtype=np.int64) for v, k in zip(lists, cut, strict=True)])
    assert np.array_equal(_flat(lists, cut), want_cut)
    rows = int_rows(lists)
    assert rows is not None and np.array_equal(rows.values, want)
    assert rows.lens.tolist() == lens.tolist()
    assert int_rows([[1, 2.5]]) is None and int_rows([[2**63]]) is None and int_rows([None]) is None
