"""Raw session CSV reader: public files, ordering rules, every bad-input rule.

Rules: docs/trace-formats.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corruption import OPS, corrupt, loads_or_format_error_both_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from public_data import BUNDLED, public
from trace_files import trace_error, write_trace

from workbench import load_trace
from workbench.errors import ConfigError, TraceFormatError
from workbench.traces import canonical

SESSION_CSVS = sorted((BUNDLED / "tracelab").glob("*.csv")) + sorted(
    (BUNDLED / "request-factory").glob("*.csv")
)
HEADER = "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms"
VALID = (
    f"{HEADER}\n"
    "0,0,0,0,512,64,100\n"
    "0,0,1,576,128,64,100\n"
    "1,200,0,0,400,48,80\n"
    "1,200,1,448,100,48,0\n"
)


def _write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    return write_trace(tmp_path, text, name)


@pytest.fixture(params=[False, True], ids=["strict", "fast"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test through the row-by-row path and through the column-wise fast path."""
    monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 0 if request.param else 10**9)
    return bool(request.param)


@pytest.mark.parametrize("path", SESSION_CSVS, ids=lambda p: p.name)
def test_public_session_csvs_are_detected_and_load(path: Path, fast_path: bool) -> None:
    assert SESSION_CSVS, f"no session CSVs under {BUNDLED}"
    workload = load_trace(path)
    assert workload.meta["detected_format"] == "session"
    assert workload.meta["needs_context_policy"] is True
    for unit in workload.units:
        assert [r.round_idx for r in unit.rounds] == list(range(len(unit.rounds)))
        assert all(r.request_id == f"session_{unit.unit_id}_round_{r.round_idx:06d}"
                   for r in unit.rounds)


def test_fast_and_strict_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    for path in SESSION_CSVS:
        monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 0)
        fast = load_trace(path, fmt="session")
        monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 10**9)
        assert load_trace(path, fmt="session") == fast


def test_multi_session_example_shape() -> None:
    w = load_trace(public("tracelab/multi_session_example.csv"))
    assert [u.unit_id for u in w.units] == ["0", "1", "2"]
    assert [u.arrival_ms for u in w.units] == [0.0, 200.0, 500.0]
    r = w.units[0].rounds[1]
    assert (r.request_id, r.prefix_len, r.input_len, r.output_len, r.tool_wait_after_ms) == (
        "session_0_round_000001", 576, 128, 64, 100.0)
    assert all(u.kind == "session" for u in w.units)


def test_raw_prefixes_are_kept_as_reported() -> None:
    w = load_trace(public("tracelab/session_workload_example.csv"))
    rounds = w.units[0].rounds
    assert rounds[0].prefix_len == 12461  # first-round prefix: not folded by the reader
    assert rounds[10].prefix_len == 48060 < rounds[9].prefix_len  # compaction kept
    assert w.units[0].arrival_ms == 0.0  # no arrival_time column: default 0


def test_id_alias_any_column_order_and_interleaved_sessions(tmp_path: Path, fast_path: bool):
    text = (
        "tool_wait_after_ms,output_len,input_len,prefix_len,round_idx,id\n"
        "5,10,100,0,0,b\n"
        "1,10,100,0,1,a\n"
        "2,10,50,110,1,b\n"
        "3,10,100,0,0,a\n"
    )
    w = load_trace(_write(tmp_path, text))
    assert w.fmt == "session"
    assert [u.unit_id for u in w.units] == ["b", "a"]  # first appearance, never sorted by id
    assert [(r.round_idx, r.tool_wait_after_ms) for r in w.units[1].rounds] == [(0, 3.0), (1, 1.0)]
    assert w.meta["id_column"] == "id"


def test_numeric_session_ids_are_not_sorted(tmp_path: Path) -> None:
    rows = "".join(f"session-{k},0,0,0,10,1,0\n" for k in (10, 2, 1))
    w = load_trace(_write(tmp_path, HEADER + "\n" + rows))
    assert [u.unit_id for u in w.units] == ["session-10", "session-2", "session-1"]


BAD = [
    ("missing column", "session_id,round_idx,prefix_len,input_len,output_len\n0,0,0,1,1\n", 1,
     "missing column"),
    ("missing id column", "round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
     "0,0,1,1,0\n", 1, "session_id"),
    ("unknown column", f"{HEADER},extra\n0,0,0,0,1,1,0,x\n", 1, "unknown column"),
    ("both id columns", f"{HEADER},id\n0,0,0,0,1,1,0,0\n", 1, "both session_id"),
    ("wrong type", VALID + "2,0,0,zero,1,1,0\n", 6, "prefix_len must be an integer"),
    ("fractional length", VALID + "2,0,0,0,1.5,1,0\n", 6, "input_len must be an integer"),
    ("negative length", VALID + "2,0,0,0,-4,1,0\n", 6, "input_len must be >= 0"),
    ("NaN length", VALID + "2,0,0,0,nan,1,0\n", 6, "input_len must be an integer"),
    ("NaN tool wait", VALID + "2,0,0,0,4,1,nan\n", 6, "tool_wait_after_ms must be finite"),
    ("negative tool wait", VALID + "2,0,0,0,4,1,-1\n", 6, "tool_wait_after_ms must be >= 0"),
    ("zero output", VALID + "2,0,0,0,4,0,0\n", 6, "output_len must be >= 1"),
    ("empty prompt", VALID + "2,0,0,0,0,5,0\n", 6, "prefix_len + input_len must be > 0"),
    ("empty session id", VALID + ",0,0,0,4,5,0\n", 6, "must not be empty"),
    ("round gap", VALID + "1,200,3,0,4,5,0\n", 6, "contiguous from 0: expected 2, found 3"),
    ("rounds not from 0", f"{HEADER}\n7,0,1,0,4,5,0\n", 2, "expected 0, found 1"),
    ("duplicate round", VALID + "0,0,1,0,4,5,0\n", 6, "duplicate round_idx 1"),
    ("arrival differs", VALID + "1,300,2,0,4,5,0\n", 6, "arrival_time must be the same"),
    ("short row", VALID + "2,0,0,0,4\n", 6, "expected 7 fields, found 5"),
    ("every row too wide", HEADER + "\n" + "".join(
        f"x,{k},0,{k},0,4,5,0\n" for k in range(3)), 2, "expected 7 fields, found 8"),
]


@pytest.mark.parametrize(("text", "line", "rule"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_with_path_line_rule(
    tmp_path: Path, fast_path: bool, text: str, line: int, rule: str
) -> None:
    path = _write(tmp_path, text)
    err = trace_error(path, "session")
    assert err.line == line and rule in err.rule
    assert str(err).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("data", "line", "rule"),
    [
        (b"", 0, "file is empty"),
        (b"\n  \n", 0, "file is empty"),
        (HEADER.encode() + b"\n0,0,0,\x00\x01\x02,1,1,0\n", 2, "binary data"),
        (b"\x89PNG\r\n\x1a\n\xff\xfe garbage", 1, "not UTF-8"),
        (HEADER.encode() + b"\n", 2, "no data rows"),
    ],
    ids=["empty", "blank", "binary NUL", "binary non-utf8", "header only"],
)
def test_empty_and_binary_files(tmp_path: Path, data: bytes, line: int, rule: str) -> None:
    path = _write(tmp_path, data)
    err = trace_error(path, "session")
    assert err.line == line and rule in err.rule
    with pytest.raises(TraceFormatError):  # auto-detection fails just as cleanly
        load_trace(path)


def test_unknown_reader_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"session.* unknown option.* tool_wait; valid: none"):
        load_trace(_write(tmp_path, VALID), fmt="session", tool_wait="sum")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, fast=st.booleans())
def test_corrupted_files_load_or_raise_trace_format_error(ops, fast) -> None:
    loads_or_format_error_both_paths(corrupt(VALID.encode(), ops), ".csv", fast, "session", "auto")
