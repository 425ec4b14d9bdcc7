"""Dynamo request-trace export: row shape, hash counts, round trip through the reader."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from workbench.context.hashing import block_hashes
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.report.dynamo_export import SCHEMA, dynamo_rows, export_dynamo
from workbench.storage.rundir import read_jsonl

MS = 1_000_000
BS = 16
HAVE_READER = importlib.util.find_spec("workbench.traces.dynamo") is not None


def _rec(
    rid: str, sid: str, k: int, prompt: list[int], t_ms: float, e2e_ms: float, wait_ms: float, **kw
) -> RequestRecord:
    r = RequestRecord(
        run_id="run",
        request_id=rid,
        unit_ordinal=int(sid[1:]),
        session_id=sid,
        round_idx=k,
        backend="openai-chat",
        policy="trace-reported",
        planned_prefix_tokens=0,
        planned_input_tokens=len(prompt),
        planned_output_tokens=5,
        sent_prompt_tokens=len(prompt),
        dispatch_ns=int(t_ms * MS),
        end_ns=int((t_ms + e2e_ms) * MS),
        token_times_ns=[int((t_ms + 10) * MS)],
        token_counts=[5],
        prompt_tokens=len(prompt),
        completion_tokens=5,
        cached_tokens=0 if k == 0 else BS * (len(prompt) // BS // 2),
        cached_tokens_reported=True,
        extra={"input_sequence_hashes": block_hashes(prompt, BS), "tool_wait_ms": wait_ms},
    )
    for key, v in kw.items():
        setattr(r, key, v)
    return r


def _result() -> RunResult:
    p0 = list(range(40))  # 3 blocks, partial tail
    p1 = p0 + list(range(1000, 1030))  # 70 tokens: 5 blocks, shares the first 2 full blocks
    q0 = list(range(500, 532))  # exactly 2 blocks
    recs = [
        _rec("s0-r0", "s0", 0, p0, 0, 100, 250),
        _rec("s1-r0", "s1", 0, q0, 20, 50, 0),
        _rec("s0-r1", "s0", 1, p1, 350, 80, 0),
        _rec("warm", "s9", 0, q0, 0, 1, 0, warmup=True),
        _rec("bad", "s2", 0, q0, 30, 5, 0, status="error"),
    ]
    return RunResult("run", recs,
                     manifest=RunManifest.from_dict({"started_at": "2024-01-01T00:00:00+00:00"}))


def test_rows_have_schema_and_ceil_hashes(tmp_path: Path) -> None:
    path = export_dynamo(_result(), tmp_path / "trace.jsonl", BS)
    rows = read_jsonl(path)
    ends = [r for r in rows if r["event_type"] == "request_end"]
    assert [r["request"]["request_id"] for r in ends] == ["s1-r0", "s0-r0", "s0-r1"]
    for row in ends:
        assert row["schema"] == SCHEMA
        replay = row["request"]["replay"]
        assert replay["trace_block_size"] == BS
        assert len(replay["input_sequence_hashes"]) == math.ceil(replay["input_length"] / BS)
    first = ends[1]["request"]
    t0 = 1704067200000.0  # started_at in unix ms
    assert first["request_received_ms"] == t0
    assert (first["input_tokens"], first["output_tokens"], first["cached_tokens"]) == (40, 5, 0)
    assert first["total_time_ms"] == 100.0
    assert ends[1]["agent_context"] == {"session_id": "s0"}


def test_tool_rows_sit_between_rounds() -> None:
    rows = dynamo_rows(_result(), BS, t0_unix_ms=0)
    tools = [r for r in rows if r["event_type"] == "tool_end"]
    assert len(tools) == 1
    tool = tools[0]["tool"]
    assert tools[0]["agent_context"] == {"session_id": "s0"}
    assert (tool["started_at_unix_ms"], tool["ended_at_unix_ms"], tool["duration_ms"]) == (
        100.0,
        350.0,  # clipped at the next round's dispatch (the wait was 250 ms)
        250.0,
    )
    ends = {r["request"]["request_id"]: r for r in rows if r["event_type"] == "request_end"}
    calls = ends["s0-r0"]["request"]["finish_reason_metadata"]["tool_calls"]
    assert calls == [{"id": tool["tool_call_id"]}]


def test_failed_records_only_on_request_and_hash_mismatch_raises() -> None:
    ids = [r["request"]["request_id"] for r in dynamo_rows(_result(), BS, include_failed=True)
           if r["event_type"] == "request_end"]  # fmt: skip
    assert "bad" in ids and "warm" not in ids
    with pytest.raises(ValueError, match="block_size 32"):
        dynamo_rows(_result(), 32)
    res = _result()
    del res.records[0].extra["input_sequence_hashes"]
    with pytest.raises(ValueError, match="input_sequence_hashes"):
        dynamo_rows(res, BS)


def test_block_size_defaults_to_the_manifest(tmp_path: Path) -> None:
    res = _result()
    with pytest.raises(ValueError, match="no block_size"):
        export_dynamo(res, tmp_path / "t.jsonl")
    res.manifest.engine = {"block_size": BS}
    assert len(read_jsonl(export_dynamo(res, tmp_path / "t.jsonl"))) == 4


def test_closed_loop_repeats_are_separate_sessions() -> None:
    p = list(range(16))
    recs = [_rec("a~1", "s0", 0, p, 0, 10, 0), _rec("a~2", "s0", 0, p, 50, 10, 0)]
    rows = dynamo_rows(RunResult("run", recs), BS)
    assert [r["agent_context"]["session_id"] for r in rows] == ["s0~1", "s0~2"]


@pytest.mark.skipif(not HAVE_READER, reason="workbench.traces.dynamo (the reader) is not there yet")
def test_round_trip_through_dynamo_reader(tmp_path: Path) -> None:
    from workbench.traces.load import load_trace

    result = _result()
    result.records[1].extra["input_sequence_hashes"][0] = 2**70  # wider than 64 bits
    path = export_dynamo(result, tmp_path / "trace.jsonl", BS)
    wl = load_trace(path, fmt="auto")
    assert wl.fmt == "dynamo" and wl.block_size == BS
    units = {u.unit_id: u for u in wl.units}
    assert set(units) == {"s0", "s1"}
    s0 = units["s0"].rounds
    assert [r.request_id for r in s0] == ["s0-r0", "s0-r1"]
    assert [r.prompt_len for r in s0] == [40, 70]
    assert [r.output_len for r in s0] == [5, 5]
    assert s0[0].tool_wait_after_ms == pytest.approx(250.0)
    assert s0[1].hash_ids == tuple(result.records[2].extra["input_sequence_hashes"])
    assert s0[1].prefix_len == 2 * BS  # the two shared full blocks
    assert units["s1"].arrival_ms == pytest.approx(20.0)
    assert units["s1"].rounds[0].hash_ids is not None
    assert units["s1"].rounds[0].hash_ids[0] == 2**70


def test_an_unreported_cached_count_is_left_out_not_written_as_zero() -> None:
    result = _result()
    result.records[0].cached_tokens_reported = False  # usage came without cache detail
    ends = [r for r in dynamo_rows(result, BS) if r["event_type"] == "request_end"]
    by_id = {r["request"]["request_id"]: r["request"] for r in ends}
    assert "cached_tokens" not in by_id["s0-r0"]
    assert by_id["s0-r1"]["cached_tokens"] == result.records[2].cached_tokens  # reported
