"""Run-directory store: streaming writer, save/load round trip, crash tolerance."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from workbench.metrics.files import load_frames, save
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.storage.rundir import (
    LIFECYCLE,
    MANIFEST,
    RECORDS,
    SUMMARY,
    TIMELINE,
    RecordWriter,
    dumps_line,
    iter_jsonl,
    load,
    loads_line,
    read_jsonl,
)

S = 1_000_000_000


def make_record(i: int, **kw: object) -> RequestRecord:
    d = 10 * S + i * S
    r = RequestRecord(
        run_id="run-1",
        request_id=f"req-{i}",
        unit_ordinal=i // 2,
        session_id=f"s{i // 2}",
        round_idx=i % 2,
        backend="openai-chat",
        policy="trace-reported",
        planned_prefix_tokens=10 * i,
        planned_input_tokens=100,
        planned_output_tokens=3,
        dispatch_ns=d,
        token_times_ns=[d + 10_000_000, d + 20_000_000],
        token_counts=[1, 2],
        end_ns=d + 25_000_000,
        prompt_tokens=100 + 10 * i,
        completion_tokens=3,
        cached_tokens=10 * i,
        extra={"input_sequence_hashes": [2**70 + i, 5]},
    )
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def make_result() -> RunResult:
    return RunResult(
        run_id="run-1",
        records=[make_record(i) for i in range(4)],
        manifest=RunManifest("run-1", config={"slo": {"ttft_ms": 15}}, status="done"),
        lifecycle=[{"unit_ordinal": 0, "rounds_done": 2}, {"unit_ordinal": 1, "rounds_done": 2}],
        metrics_timeline=[
            {"t_ns": 0, "vllm:prefix_cache_hits_total": 0, "vllm:prefix_cache_queries_total": 0},
            {"t_ns": 1, "vllm:prefix_cache_hits_total": 3, "vllm:prefix_cache_queries_total": 4},
        ],
    )


def test_record_writer_lines_are_on_disk_before_close(tmp_path: Path) -> None:
    path = tmp_path / RECORDS
    w = RecordWriter(path)
    w.write(make_record(0))
    assert path.read_bytes().endswith(b"\n")
    assert read_jsonl(path)[0]["request_id"] == "req-0"
    w.write({"unit_ordinal": 3, "reason": "done"})
    assert len(path.read_bytes().splitlines()) == 2
    w.close()
    assert w.closed


def test_record_writer_context_manager_append_and_wide_ints(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    with RecordWriter(path) as w:
        w.write({"h": [2**70, 1], "nan": float("nan")})
    with RecordWriter(path, "a") as w:
        w.write({"n": 2})
    assert read_jsonl(path) == [{"h": [2**70, 1], "nan": None}, {"n": 2}]


@pytest.mark.parametrize("value", [
    2**64 - 1, 2**64, 2**64 + 1, 10**19, 10**20, 10**30, -(2**63), -(2**63) - 1, -(10**19),
    -(10**25), 1234567890123456789, 0, -1])  # fmt: skip
@pytest.mark.parametrize("compact", [True, False])
def test_json_lines_keep_integers_of_any_width_exact(value: int, compact: bool) -> None:
    """orjson reads [-2**63, 2**64) exactly and wider integers as floats: every width
    comes back as the same int, beside digits in strings and long fractions, in lines
    written as orjson writes them (compact) or not."""
    obj = {"h": [value, 7], "id": f"q{10**25}", "x": 0.12345678901234567890123}
    line = json.dumps(obj, separators=(",", ":") if compact else None) + "\n"
    got = loads_line(line.encode())
    assert got == json.loads(line) and type(got["h"][0]) is int and got["h"][0] == value
    if -(2**63) <= value < 2**64:  # what orjson writes, read back
        assert loads_line(dumps_line(obj)) == obj


def test_save_load_round_trip(tmp_path: Path) -> None:
    result = make_result()
    out = save(result, tmp_path / "run")
    assert out == tmp_path / "run" and result.run_dir == str(out)
    for name in (RECORDS, MANIFEST, SUMMARY, LIFECYCLE, TIMELINE):
        assert (out / name).exists(), name
    back = load(out)
    assert back.records == result.records  # wide ints, lists and extra survive exactly
    assert back.lifecycle == result.lifecycle
    assert back.metrics_timeline == result.metrics_timeline
    assert back.run_id == "run-1" and back.run_dir == str(out) and not back.cancelled
    summary = json.loads((out / SUMMARY).read_text())
    assert summary["requests"] == 4
    assert summary["ttft_ms"]["p50"] == 10.0
    assert summary["slo"]["bounds"] == {"ttft_ms": 15.0}
    assert summary["server_prefix_hit_rate"] == 0.75


def test_save_does_not_duplicate_streamed_records(tmp_path: Path) -> None:
    result = make_result()
    run = tmp_path / "run"
    with RecordWriter(run / RECORDS) as w:
        w.write_all(result.records[:3])  # the runner streamed three, then stopped
    with RecordWriter(run / LIFECYCLE) as w:
        w.write(result.lifecycle[0])
    save(result, run)
    save(result, run)  # saving twice is harmless too
    assert [d["request_id"] for d in read_jsonl(run / RECORDS)] == [f"req-{i}" for i in range(4)]
    assert read_jsonl(run / LIFECYCLE) == result.lifecycle


def test_save_replaces_records_of_another_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RecordWriter(run / RECORDS) as w:
        w.write(make_record(99))
    save(make_result(), run)
    assert len(read_jsonl(run / RECORDS)) == 4


def test_truncated_last_line_is_skipped_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = save(make_result(), tmp_path / "run")
    data = (run / RECORDS).read_bytes()
    (run / RECORDS).write_bytes(data[: len(data) - 40])  # crash mid-line
    with caplog.at_level(logging.WARNING, logger="workbench.storage.rundir"):
        back = load(run)
    assert [r.request_id for r in back.records] == ["req-0", "req-1", "req-2"]
    assert "truncated last line" in caplog.text
    save(back, run)  # appending after a crash continues on a clean line
    assert len(read_jsonl(run / RECORDS)) == 3


def test_corrupt_middle_line_raises(tmp_path: Path) -> None:
    path = tmp_path / RECORDS
    path.write_bytes(b'{"a": 1}\n{"b": \n{"c": 3}\n')
    with pytest.raises(ValueError, match=":2: invalid JSON"):
        read_jsonl(path)
    with pytest.raises(ValueError, match=":2: invalid JSON"):
        list(iter_jsonl(path))


@pytest.mark.parametrize("data", [
    b'{"a": 1}\n{"b": 2}\n', b'{"a": 1}\n{"b": ', b'{"a": 1}\n\n{"b": \n  \n ',
    b'{"a": 1}\n{"b": \n\n', b'\n\n{"a": 1}', b"", b'{"a": [1, 2]}\n{"b": 2}',
    b'{"a": 1}\n \t\r\x0b\x0c\n{"b": 2}\n\x0c'])
def test_streamed_lines_are_read_jsonl_s(tmp_path: Path, data: bytes) -> None:
    """``iter_jsonl`` line by line gives what ``read_jsonl`` gives, or the same error:
    a cut-short last line skipped, a bad line followed by a newline an error."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    try:
        whole: object = read_jsonl(path)
    except ValueError as exc:
        whole = str(exc)
    try:
        streamed: object = list(iter_jsonl(path))
    except ValueError as exc:
        streamed = str(exc)
    assert streamed == whole
    assert list(iter_jsonl(tmp_path / "absent.jsonl")) == []


def test_load_frames_and_parent_dir_resolution(tmp_path: Path) -> None:
    save(make_result(), tmp_path / "out" / "run-1")
    frames = load_frames(tmp_path / "out")  # the one run under out_dir/<run_id>
    assert set(frames) == {"records", "lifecycle", "timeline", "summary"}
    assert len(frames["records"]) == 4 and "ttft_ms" in frames["records"].columns
    assert frames["summary"].loc[0, "ttft_ms.p50"] == 10.0
    assert list(frames["lifecycle"]["rounds_done"]) == [2, 2]
    assert len(frames["timeline"]) == 2
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load(tmp_path / "nothing-here")


def test_cancelled_flag_round_trips(tmp_path: Path) -> None:
    result = make_result()
    result.cancelled = True
    assert load(save(result, tmp_path / "r")).cancelled


def test_workbench_save_load_resolve_to_store(tmp_path: Path) -> None:
    import workbench

    assert workbench.load(workbench.save(make_result(), tmp_path / "r")).run_id == "run-1"
