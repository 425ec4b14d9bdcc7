"""Canonical session-execution-v2 reader and writer: every rule, both paths.

Rules: docs/trace-formats.md.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from corruption import OPS, corrupt, loads_or_format_error_both_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from public_data import public
from trace_files import trace_error, write_trace

from workbench import load_trace, tracegen
from workbench.errors import TraceFormatError
from workbench.records import Round, Unit
from workbench.traces import canonical

H = canonical.HEADER_LINE
VALID = (
    f"{H}\n"
    "session_0_round_000000,0,0,0.000000,0,512,64,100.000000\n"
    "session_0_round_000001,0,1,0.000000,576,128,64,0.000000\n"
    "session_1_round_000000,1,0,200.500000,0,400,48,80.000000\n"
    "session_1_round_000001,1,1,200.500000,448,100,48,0.000000\n"
)


def _row(sid: str, idx: int, arrival: str = "300.000000", prefix: object = 0, inp: object = 5,
         out: object = 1, wait: str = "0.000000", rid: str | None = None) -> str:
    rid = rid if rid is not None else f"session_{sid}_round_{idx:06d}"
    return f"{rid},{sid},{idx},{arrival},{prefix},{inp},{out},{wait}\n"


@pytest.fixture(params=[False, True], ids=["strict", "fast"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 0 if request.param else 10**9)
    return bool(request.param)


def test_valid_file_is_detected_and_read(tmp_path: Path, fast_path: bool) -> None:
    path = tmp_path / "v.csv"
    path.write_text(VALID)
    w = load_trace(path)
    assert w.meta["detected_format"] == "session-execution-v2"
    assert w.meta["needs_context_policy"] is False
    assert [u.unit_id for u in w.units] == ["0", "1"]
    assert [u.arrival_ms for u in w.units] == [0.0, 200.5]
    assert w.units[1].rounds[1] == Round("session_1_round_000001", "1", 1, 200.5, 448, 100, 48, 0.0)
    assert "manifest" not in w.meta


def test_writer_round_trips_units_and_quotes_odd_session_ids(tmp_path: Path, fast_path: bool):
    sids = ["a,b", 'q"x', "plain"]
    units = [
        Unit(s, "session", float(k), tuple(
            Round(canonical.request_id(s, i), s, i, float(k), 0 if i == 0 else 10, 7, 3, 1.25)
            for i in range(3)))
        for k, s in enumerate(sids)
    ]
    path = canonical.write_session_execution_v2(tmp_path / "w.csv", canonical.rows_of(units))
    w = load_trace(path)
    assert w.units == tuple(units)
    assert not (tmp_path / "w.csv.tmp").exists()


def test_sidecars_are_read_into_meta(tmp_path: Path) -> None:
    out = tracegen(public("tracelab/multi_session_example.csv"), tmp_path / "g.csv").csv_path
    w = load_trace(out)
    assert w.meta["manifest"]["schema"] == "session-execution-v2"
    assert len(w.meta["plan"]) == w.n_rounds == 8
    assert load_trace(out, sidecars=False).meta.keys().isdisjoint({"manifest", "plan"})


def test_bad_sidecar_is_a_trace_format_error(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text(VALID)
    (tmp_path / "v.manifest.json").write_text("{not json")
    with pytest.raises(TraceFormatError, match="manifest sidecar") as info:
        load_trace(path)
    assert info.value.path.endswith("v.manifest.json")
    (tmp_path / "v.manifest.json").write_text("{}")
    (tmp_path / "v.plan.json").write_text("{}")
    with pytest.raises(TraceFormatError, match="plan sidecar must be a JSON list"):
        load_trace(path)


BAD = [
    ("missing column", H.replace(",tool_wait_after_ms", "") + "\nx,0,0,0.000000,0,1,1\n", 1,
     "missing column: tool_wait_after_ms"),
    ("header order", H.replace("prefix_len,input_len", "input_len,prefix_len") + "\n"
     + _row("0", 0, "0.000000"), 1, "header must be exactly"),
    ("extra column", H + ",x\n" + _row("0", 0, "0.000000").rstrip("\n") + ",1\n", 1,
     "header must be exactly"),
    ("wrong type", VALID + _row("2", 0, inp="five"), 6, "input_len must be an integer"),
    ("negative length", VALID + _row("2", 0, prefix=-3), 6, "prefix_len must be >= 0"),
    ("NaN length", VALID + _row("2", 0, out="nan"), 6, "output_len must be an integer"),
    ("NaN tool wait", VALID + _row("2", 0, wait="nan"), 6, "tool_wait_after_ms must be finite"),
    ("negative tool wait", VALID + _row("2", 0, wait="-1.000000"), 6,
     "tool_wait_after_ms must be >= 0"),
    ("zero output", VALID + _row("2", 0, out=0), 6, "output_len must be >= 1"),
    ("prefix 0 and input 0", VALID + _row("2", 0, inp=0), 6, "input_len must be > 0"),
    ("first-round prefix", VALID + _row("2", 0, prefix=12461), 6,
     "prefix_len must be 0 on round 0"),
    ("non-contiguous session rows", VALID + _row("0", 2, "0.000000", prefix=10), 6,
     "rows of session '0' are not contiguous"),
    ("round gap", VALID + _row("1", 3, "200.500000", prefix=10), 6,
     "round_idx of session '1' must be 2, got 3"),
    ("rounds not from 0", VALID + _row("2", 1, prefix=10), 6, "must start at 0, got 1"),
    ("non-zero first arrival", VALID.replace("0,0,0.000000", "0,0,5.000000", 1), 2,
     "first row must arrive at 0"),
    ("arrival differs in session", VALID.replace("1,1,200.500000", "1,1,201.500000"), 5,
     "same on every row of session '1'"),
    ("arrivals decrease", VALID + _row("2", 0, "100.000000"), 6, "non-decreasing arrival"),
    ("wrong request id", VALID + _row("2", 0, rid="session_2_round_0"), 6,
     "request_id must be 'session_2_round_000000'"),
    ("duplicate request id", VALID + VALID.splitlines()[3] + "\n", 6,
     "duplicate request_id 'session_1_round_000000'"),
    ("wrong decimals arrival", VALID + _row("2", 0, "300.00000"), 6, "exactly 6 decimals"),
    ("wrong decimals tool wait", VALID + _row("2", 0, wait="7"), 6, "exactly 6 decimals"),
    ("empty session id", VALID + _row("", 0), 6, "session_id must not be empty"),
    ("every row too wide", H + "\n" + "".join(f"x,{line}" for line in VALID.splitlines(True)[1:]),
     2, "expected 8 fields, found 9"),
]


@pytest.mark.parametrize(("text", "line", "rule"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_with_path_line_rule(
    tmp_path: Path, fast_path: bool, text: str, line: int, rule: str
) -> None:
    err = trace_error(write_trace(tmp_path, text, "bad.csv"), "session-execution-v2")
    assert err.line == line and rule in err.rule


@pytest.mark.parametrize(
    ("data", "line", "rule"),
    [
        (b"", 0, "file is empty"),
        (H.encode() + b"\n" + b"\x00" * 40, 2, "binary data"),
        (bytes(range(128, 256)) * 4, 1, "not UTF-8"),
        (H.encode() + b"\n", 2, "no data rows"),
    ],
    ids=["empty", "binary NUL", "binary non-utf8", "header only"],
)
def test_empty_and_binary_files(tmp_path: Path, data: bytes, line: int, rule: str) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt="canonical")
    assert info.value.line == line and rule in info.value.rule


def test_fast_path_agrees_with_strict_path_on_a_large_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = "synthetic:sessions=200,rounds=uniform:1..30,compaction=0.1"
    out = tracegen(spec, tmp_path / "s.csv", seed=7).csv_path
    monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 0)
    fast = load_trace(out)
    monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", 10**9)
    assert load_trace(out) == fast


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, fast=st.booleans())
def test_corrupted_files_load_or_raise_trace_format_error(ops, fast) -> None:
    data = corrupt(VALID.encode(), ops)
    loads_or_format_error_both_paths(data, ".csv", fast, "session-execution-v2", "auto")


def test_plan_sidecar_is_json_array_of_rounds(tmp_path: Path) -> None:
    res = tracegen(public("tracelab/multi_session_example.csv"), tmp_path / "p.csv")
    plan = orjson.loads(res.plan_path.read_bytes())
    assert [p["predecessor_request_id"] for p in plan[:3]] == [
        None, "session_0_round_000000", "session_0_round_000001"]
