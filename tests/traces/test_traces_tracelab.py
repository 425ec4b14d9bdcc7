"""TraceLab round JSONL reader: mapping, identity, tool waits, arrivals, bad input.

Rules: docs/trace-formats.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import OPS, corrupt, loads_or_format_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from public_data import public
from trace_files import trace_error

from workbench import load_trace
from workbench.errors import ConfigError, TraceFormatError
from workbench.traces.tracelab import union_length

PUBLIC = public("tracelab/round_trace.sanitized.jsonl")


def _round(sid: str = "s1", idx: int = 0, *, project: str | None = "p", prefix: int = 0,
           new: int = 100, out: int = 10, start: str = "2026-01-01T00:00:00.000Z",
           tools: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "provider": "claude", "session_id": sid, "round_index": idx, "model": "m",
        "input_tokens_total": prefix + new, "prefix_tokens": prefix,
        "newly_append_tokens": new, "output_tokens": out,
        "timing_events": [{"event_type": "user_message", "timestamp": start}],
        "tools": tools or [],
    }
    if project is not None:
        row["project"] = project
    row.update(extra)
    return row


def _tool(start: str, end: str, wall: float | None = None) -> dict[str, Any]:
    return {"emitted_at": f"2026-01-01T00:00:{start}Z", "result_at": f"2026-01-01T00:00:{end}Z",
            "tool_wall_latency_ms": wall}


def _write(tmp_path: Path, rows: list[Any], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(
        (r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows))
    return path


def test_public_file_is_detected_and_mapped() -> None:
    w = load_trace(PUBLIC)
    assert w.meta["detected_format"] == "tracelab"
    assert (len(w.units), w.n_rounds) == (2, 19)
    claude, codex = w.units
    assert (claude.meta["provider"], claude.meta["project"], codex.meta["project"]) == (
        "claude", "project_4c7b8a1b", None)
    r0 = claude.rounds[0]
    assert (r0.prefix_len, r0.input_len, r0.output_len) == (27217, 5055, 931)
    # two overlapping tools 30.836..31.696 and 31.647..50.938: union, not 860+19291
    assert r0.tool_wait_after_ms == pytest.approx(20102.0)
    assert claude.rounds[-1].tool_wait_after_ms == 0.0 == codex.rounds[-1].tool_wait_after_ms
    assert codex.arrival_ms == 0.0 < claude.arrival_ms  # rebased to the earliest session
    assert w.meta["tool_wait"] == "union"


def test_unknown_fields_are_one_warning_the_schema_own_fields_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A field the round schema does not have is named once, with its first line; the
    schema's fields replay does not use (the public file has many) are no warning."""
    rows = [_round(idx=0, sentiment="ok"), _round(idx=1, prefix=110, sentiment="ok",
                                                  gpu="h100", reasoning_output_tokens=3)]
    with caplog.at_level(logging.WARNING):
        w = load_trace(_write(tmp_path, rows))
    assert w.meta["unknown_fields"] == ["gpu", "sentiment"]
    assert caplog.text.count("unknown field") == 1
    assert "gpu (line 2), sentiment (line 1)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert "unknown_fields" not in load_trace(PUBLIC).meta
    assert "unknown field" not in caplog.text


def test_sum_mode_adds_parallel_tools() -> None:
    w = load_trace(PUBLIC, tool_wait="sum")
    assert w.units[0].rounds[0].tool_wait_after_ms == pytest.approx(860 + 19291)
    assert w.meta["tool_wait"] == "sum"


def test_union_length() -> None:
    assert union_length([(0, 10), (5, 12), (20, 21), (11, 11.5)]) == 13
    assert union_length([]) == 0


def test_session_identity_includes_provider_and_project(tmp_path: Path) -> None:
    rows = [_round("dup", 0, project="a"), _round("dup", 0, project="b"),
            _round("dup", 1, project="a", prefix=110, new=5)]
    w = load_trace(_write(tmp_path, rows))
    assert [u.unit_id for u in w.units] == ["dup", "dup~2"]
    assert [len(u.rounds) for u in w.units] == [2, 1]
    assert w.units[1].rounds[0].request_id == "session_dup~2_round_000000"
    assert w.units[1].meta["source_session_id"] == "dup"


def test_rounds_order_by_round_index_then_file_order(tmp_path: Path) -> None:
    rows = [_round(idx=3, new=3), _round(idx=1, new=1), _round(idx=1, new=2),
            _round(idx=0, new=7)]
    w = load_trace(_write(tmp_path, rows))
    assert [r.input_len for r in w.units[0].rounds] == [7, 1, 2, 3]
    assert [r.round_idx for r in w.units[0].rounds] == [0, 1, 2, 3]  # renumbered
    assert w.units[0].meta["source_lines"] == [4, 2, 3, 1]


def test_mapping_clamps_like_tracelab_export(tmp_path: Path) -> None:
    rows = [_round(prefix=-5, new=0, out=0, input_tokens_total=-5)]
    r = load_trace(_write(tmp_path, rows)).units[0].rounds[0]
    assert (r.prefix_len, r.input_len, r.output_len) == (0, 1, 1)


def test_tool_wait_union_sum_and_latency_only(tmp_path: Path) -> None:
    tools = [_tool("01.000", "03.000"), _tool("02.000", "04.000"),
             {"tool_wall_latency_ms": 500}]
    rows = [_round(tools=tools), _round(idx=1, prefix=110, new=5)]
    path = _write(tmp_path, rows)
    assert load_trace(path).units[0].rounds[0].tool_wait_after_ms == pytest.approx(3500)
    assert load_trace(path, tool_wait="sum").units[0].rounds[0].tool_wait_after_ms == (
        pytest.approx(4500))


def test_session_arrival_is_first_rounds_earliest_event(tmp_path: Path) -> None:
    rows = [_round("late", start="2026-01-01T00:00:10.000Z"),
            _round("early", start="2026-01-01T00:00:02.500Z")]
    w = load_trace(_write(tmp_path, rows))
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [("late", 7500.0), ("early", 0.0)]
    assert w.meta["arrival_origin"].startswith("2026-01-01T00:00:02.5")


BAD: list[tuple[str, list[Any], int, str]] = [
    ("truncated JSON line", [_round(), orjson.dumps(_round(idx=1))[:-7]], 2, "invalid JSON"),
    ("not an object", [_round(), b"[1, 2]"], 2, "must be a JSON object"),
    ("missing field", [_round(), {k: v for k, v in _round(idx=1).items() if k != "output_tokens"}],
     2, "missing field output_tokens"),
    ("wrong type", [_round(newly_append_tokens="many", input_tokens_total=None)], 1,
     "newly_append_tokens must be an integer"),
    ("NaN length", [b'{"provider":"c","session_id":"s","round_index":0,"prefix_tokens":NaN}'], 1,
     "invalid JSON"),
    ("negative round index", [_round(idx=-1)], 1, "round_index must be >= 0"),
    ("token invariant", [_round(input_tokens_total=5)], 1, "input_tokens_total 5 !="),
    ("bad timestamp", [_round(), _round(idx=1, start="yesterday")], 2, "ISO-8601"),
    ("tool ends before start", [_round(tools=[_tool("05.000", "01.000")])], 1,
     "result_at is before its emitted_at"),
    ("negative tool latency", [_round(tools=[{"tool_wall_latency_ms": -3}])], 1,
     "tool_wall_latency_ms must be >= 0"),
    ("empty session id", [_round(sid="")], 1, "session_id must be a non-empty string"),
    ("tools not a list", [_round(), {**_round(idx=1), "tools": {"a": 1}}], 2,
     "tools must be a list of objects"),
    ("no timestamp in first round", [_round(timing_events=[])], 1, "has no timestamp"),
    ("tool name not a string", [_round(), _round(idx=1, tools=[
        {**_tool("01.000", "02.000"), "tool_name": ["Task"]}])], 2,
     "tools[].tool_name must be a string"),
]


@pytest.mark.parametrize(("rows", "line", "rule"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_with_path_line_rule(
    tmp_path: Path, rows: list[Any], line: int, rule: str
) -> None:
    err = trace_error(_write(tmp_path, rows), "tracelab")
    assert err.line == line and rule in err.rule


@pytest.mark.parametrize(
    ("data", "line", "rule"),
    [(b"", 0, "file is empty"), (b"{\x00\x00\x00", 1, "binary data"),
     (b"\xfa\xfb\xfc" * 10, 1, "not UTF-8")],
    ids=["empty", "binary NUL", "binary non-utf8"],
)
def test_empty_and_binary_files(tmp_path: Path, data: bytes, line: int, rule: str) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt="tracelab")
    assert info.value.line == line and rule in info.value.rule


def test_bad_option_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tool_wait"):
        load_trace(PUBLIC, tool_wait="max")
    with pytest.raises(ConfigError, match=r"unknown option.* block_size; valid: tool_wait"):
        load_trace(PUBLIC, block_size=4)


SAMPLE = b"\n".join(PUBLIC.read_bytes().splitlines()[:4] + PUBLIC.read_bytes().splitlines()[-3:])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, mode=st.sampled_from(["union", "sum"]))
def test_corrupted_files_load_or_raise_trace_format_error(ops, mode) -> None:
    data = corrupt(SAMPLE, ops)
    loads_or_format_error(data, ".jsonl", "tracelab", tool_wait=mode)
