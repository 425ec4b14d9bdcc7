"""Files real users have and tests rarely do, through every registered reader: one rule,
one message, whether the format is detected or named (docs/trace-formats.md, "Rules that
hold for every format"; docs/trace-bounds.md, "Files" and "Unique ids")."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from trace_files import trace_error, write_trace

from workbench.errors import TraceFormatError
from workbench.traces._io import WINDOW_HINT
from workbench.traces.bounds import MAX_HEAD_BYTES
from workbench.traces.load import load_trace

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "workbench/data"
FIX = ROOT / "tests/fixtures"


def _lines(path: Path, n: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:n]


#: a few records of every JSON-lines format (weka reads whole documents too: not here)
JSONL = {
    "mooncake": _lines(FIX / "mooncake_sessions.jsonl", 3),
    "bailian": _lines(FIX / "bailian_chains.jsonl", 3),
    "tracelab": _lines(DATA / "tracelab/round_trace.sanitized.jsonl", 2),
    "trajectory": _lines(DATA / "batchbench/trajectories_v1.jsonl", 2),
    "abench": _lines(FIX / "abench_sessions.jsonl", 2),
    "dynamo": _lines(FIX / "dynamo_trace.jsonl", 8),
}
CSV = {
    "session": _lines(DATA / "tracelab/session_workload_example.csv", 4),
    "independent": _lines(FIX / "independent_requests.csv", 3),
    "azure": _lines(FIX / "serving-traces/azure_conv_2023_head150.csv", 3),
    "burstgpt": _lines(FIX / "serving-traces/burstgpt_constructed.csv", 3),
    "session-execution-v2": [
        "request_id,session_id,round_idx,arrival_time_ms,prefix_len,input_len,output_len,"
        "tool_wait_after_ms",
        "session_a_round_000000,a,0,0.000000,0,10,5,0.000000",
        "session_a_round_000001,a,1,0.000000,15,4,5,0.000000",
    ],
}
WEKA = _lines(DATA / "weka/cc_traces_sample.jsonl", 2)
EVERY = {**JSONL, **CSV, "weka": WEKA}


def _both(path: Path, fmt: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """The error of the detected and of the named read: (line, rule) each."""
    out = []
    for name in ("auto", fmt):
        with pytest.raises(TraceFormatError) as exc:
            load_trace(path, name, **({"sidecars": False} if name.startswith("session-") else {}))
        assert exc.value.path == str(path)
        out.append((exc.value.line, exc.value.rule))
    return out[0], out[1]


@pytest.mark.parametrize("fmt", sorted(EVERY))
def test_bare_cr_line_endings_are_one_rule_in_every_format(tmp_path, fmt):
    path = tmp_path / "mac.txt"
    path.write_bytes("\r".join(EVERY[fmt]).encode() + b"\r")
    rule = ("lines end in a bare CR (classic Mac OS line endings): traces take LF or CRLF "
            "(convert: tr '\\r' '\\n' < FILE)")
    assert _both(path, fmt) == ((1, rule), (1, rule))


@pytest.mark.parametrize("fmt", sorted(JSONL))
@pytest.mark.parametrize(("shape", "indent", "what", "jq"), [
    ("array", None, "one JSON array", "'.[]'"),
    ("array", 2, "one JSON array", "'.[]'"),
    ("object", 2, "one JSON object written over several lines", "."),
])
def test_a_json_document_is_not_json_lines_detected_or_named(tmp_path, fmt, shape, indent,
                                                             what, jq):
    objs = [json.loads(line) for line in JSONL[fmt]]
    doc = objs if shape == "array" else objs[0]
    path = tmp_path / "doc.json"
    path.write_text("\n" + json.dumps(doc, indent=indent) + "\n")
    rule = (f"the file is {what}, not JSON lines: {fmt} takes one JSON object a line "
            f"(convert: jq -c {jq} FILE)")
    assert _both(path, fmt) == ((2, rule), (2, rule))


def test_an_array_of_records_no_format_knows_names_the_json_lines_rule(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text('[{"a": 1}, {"b": 2}]\n')
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1, (
        "the file is one JSON array, not JSON lines: each JSON format but weka takes one JSON "
        "object a line (convert: jq -c '.[]' FILE)"))


def test_weka_still_reads_a_json_array_of_conversations(tmp_path):
    path = tmp_path / "convs.json"
    path.write_text(json.dumps([json.loads(WEKA[0])], indent=1))
    assert load_trace(path).fmt == "weka"


@pytest.mark.parametrize("fmt", sorted(EVERY))
@pytest.mark.parametrize(("cut", "line"), [(20, 1), (-1, None)])
def test_a_nul_byte_is_the_same_error_detected_or_named(tmp_path, fmt, cut, line):
    body = ("\n".join(EVERY[fmt]) + "\n").encode()
    at = cut if cut >= 0 else len(body) - 2
    path = tmp_path / "nul.txt"
    path.write_bytes(body[:at] + b"\x00" + body[at:])
    want = line or len(EVERY[fmt])
    rule = "binary data (NUL byte): not a text trace"
    assert _both(path, fmt) == ((want, rule), (want, rule))


@pytest.mark.parametrize("fmt", sorted(CSV))
def test_blank_lines_before_a_csv_header_are_skipped_as_blank_rows_are(tmp_path, fmt):
    path = tmp_path / "lead.csv"
    path.write_text("\n \n" + "\n".join(CSV[fmt]) + "\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(CSV[fmt]) + "\n")
    opts = {"sidecars": False} if fmt == "session-execution-v2" else {}
    assert load_trace(path, **opts).units == load_trace(plain, **opts).units


@pytest.mark.parametrize(("fmt", "header", "rule"), [
    ("azure", "TIMESTAMP,ContextTokens", "missing column: GeneratedTokens"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens,Region",
     "unknown column Region; expected exactly TIMESTAMP,ContextTokens,GeneratedTokens"),
    ("azure", "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens",
     "unknown column NumImages; expected exactly TIMESTAMP,ContextTokens,GeneratedTokens: "
     "the 2025 multimodal trace's images are not text tokens: workbench replays text "
     "prompts only"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Log Type",
     "missing column: Total tokens"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,User",
     "unknown column User; expected Timestamp,Model,Request tokens,Response tokens,"
     "Total tokens,Log Type (and BurstGPT_3's Session ID, Elapsed time)"),
    ("independent", "id,arrival_time,input_len,output_len,extra",
     "unknown column extra; expected exactly id,arrival_time,input_len,output_len"),
    ("session", "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,zz",
     "unknown column zz; expected only arrival_time, id, input_len, join_round, output_len, "
     "parent_session_id, prefix_len, round_idx, session_id, spawn_delay_ms, spawn_round, "
     "spawn_trigger, tool_wait_after_ms"),
    ("session-execution-v2",
     "session_id,request_id,round_idx,arrival_time_ms,prefix_len,input_len,output_len,"
     "tool_wait_after_ms",
     "header must be exactly 'request_id,session_id,round_idx,arrival_time_ms,prefix_len,"
     "input_len,output_len,tool_wait_after_ms'"),
    ("independent", "id,id,arrival_time,input_len,output_len", "duplicate column names in header"),
])
def test_a_header_error_names_the_header_line(tmp_path, fmt, header, rule):
    path = write_trace(tmp_path, "\n\n" + header + "\n", "h.csv")
    err = trace_error(path, fmt, **({"sidecars": False} if fmt.startswith("session-") else {}))
    assert (err.line, err.rule) == (3, rule)


def test_a_header_without_rows_names_the_line_after_it(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("\n\nid,arrival_time,input_len,output_len\n\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, "independent")
    assert (exc.value.line, exc.value.rule) == (4, "no data rows")


def test_a_first_line_longer_than_the_sniffed_head_says_name_the_format(tmp_path):
    row = json.loads(JSONL["mooncake"][0])
    row["pad"] = "x" * (MAX_HEAD_BYTES + 10)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1, (
        f"cannot tell the trace format: line 1 is longer than the {MAX_HEAD_BYTES:,} bytes "
        "format detection reads; name the format (--format on the command line, fmt= in "
        "Python, trace.format in a config)"))
    assert len(load_trace(path, "mooncake").units) == 1  # named, it reads


def _twice(fmt: str) -> str:
    lines = EVERY[fmt]
    if fmt in CSV:
        return "\n".join([*lines, lines[1]]) + "\n"
    return "\n".join([*lines, lines[0]]) + "\n"


#: the one wording of an id used twice: ``bounds.duplicate``
@pytest.mark.parametrize(("fmt", "line", "rule"), [
    ("independent", 4, "duplicate id 'req-b' (also at line 2)"),
    ("session-execution-v2", 4, "duplicate request_id 'session_a_round_000000' (also at line 2)"),
    ("bailian", 4, "duplicate chat_id '159' (also at line 1)"),
    ("tracelab", 3, "duplicate round_id 'msg_3e0cf83dc2523801f59077fd' (also at line 1)"),
    ("trajectory", 3, "duplicate trajectory_id 'fixer-a' (also at line 1)"),
    ("abench", 3, "duplicate session_id 'swe-001' (also at line 1)"),
    ("dynamo", 9, "duplicate request_id 'a1' (also at line 1)"),
    ("weka", 3, "duplicate conversation id 'trace_0277' (also at line 1)"),
])
def test_an_id_used_twice_is_one_rule_in_every_format(tmp_path, fmt, line, rule):
    path = tmp_path / "twice.txt"
    path.write_text(_twice(fmt))
    assert _both(path, fmt) == ((line, rule), (line, rule))


def test_mooncake_duplicate_request_id_has_the_same_wording(tmp_path):
    path = tmp_path / "m.jsonl"
    row = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], '
    path.write_text(row + '"request_id": "r"}\n' + row + '"request_id": "r"}\n')
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (2, "duplicate request_id 'r' (also at line 1)")


def test_bailian_timestamp_bound_is_in_seconds_as_its_timestamps(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.7e12,
                                "input_length": 20, "output_length": 4}) + "\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1, (
        "timestamp 1700000000000.0 exceeds the bound of 31,622,400 s (docs/trace-bounds.md)"))


def test_abench_names_unknown_fields_as_the_other_json_readers(tmp_path, caplog):
    obj = json.loads(JSONL["abench"][0])
    obj["priority"] = 3
    obj["turns"][1]["latency_ms"] = 5
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    with caplog.at_level(logging.WARNING, logger="workbench.traces.json_io"):
        w = load_trace(path)
    assert w.meta["unknown_fields"] == ["priority", "turns[].latency_ms"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: unknown fields ignored: priority (line 1), turns[].latency_ms (line 1)"]
    caplog.clear()
    fixture = load_trace(FIX / "abench_sessions.jsonl")  # every field it writes is known
    assert "unknown_fields" not in fixture.meta and not caplog.records


def test_trajectory_schema_version_written_as_1_0_is_1(tmp_path):
    obj = json.loads(JSONL["trajectory"][0])
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({**obj, "schema_version": 1.0}) + "\n")
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps(obj) + "\n")
    assert load_trace(path).units == load_trace(plain).units


@pytest.mark.parametrize("command", [("stats",), ("simulate", "--trace"),
                                     ("replay", "--dry-run", "--trace")])
def test_the_cli_prints_the_json_document_rule_as_one_line(tmp_path, command):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps([json.loads(line) for line in JSONL["mooncake"]], indent=2))
    proc = subprocess.run([sys.executable, "-m", "workbench", *command, str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 3
    assert proc.stderr.strip().endswith(
        f"error: {path}:1: the file is one JSON array, not JSON lines: mooncake takes one JSON "
        "object a line (convert: jq -c '.[]' FILE)")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_spawn_past_a_one_round_parent_counts_its_round_in_the_singular(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,"
                    "parent_session_id,spawn_round\na,0,0,10,5,0,,\nb,0,0,10,5,0,a,7\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (
        3, "unit 'b' spawns at round 7 of 'a', which has 1 round")


def _weka(**request: object) -> str:
    req = {"t": 0, "type": "s", "in": 100, "out": 5, "hash_ids": [1, 2], **request}
    return json.dumps({"id": "c1", "block_size": 64, "hash_id_scope": "local",
                       "tool_tokens": 0, "system_tokens": 0, "requests": [req]})


@pytest.mark.parametrize(("text", "rule"), [
    (_weka(t=1.7e12), "conversation 'c1': requests[0].t 1700000000000.0 exceeds the bound of "
     "31,622,400 s (docs/trace-bounds.md)"),
])
def test_weka_seconds_are_bounded_in_seconds(tmp_path, text, rule):
    path = tmp_path / "w.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1, rule)


def test_a_weka_subagent_duration_is_milliseconds_bounded_as_an_arrival(tmp_path):
    """``duration_ms`` was checked against the seconds bound (31,622,400 ms: 8.8 h)."""
    conv = json.loads(_weka())
    marker = {"t": 1, "type": "subagent", "duration_ms": 10 * 3600 * 1000.0,
              "requests": [{"t": 1, "type": "s", "in": 64, "out": 5, "hash_ids": [9]}]}
    conv["requests"].append(marker)
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(conv) + "\n")
    assert len(load_trace(path).units) == 2
    marker["duration_ms"] = 4e10
    path.write_text(json.dumps(conv) + "\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1, (
        "conversation 'c1': requests[1].duration_ms 40000000000.0 exceeds the bound of "
        "31,622,400,000 ms (docs/trace-bounds.md)"))


def _dynamo(rid: str, at: float, sid: str, parent: str | None = None) -> dict[str, object]:
    ctx = {"session_id": sid, **({"parent_session_id": parent} if parent else {})}
    return {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "agent_context": ctx, "request": {
                "request_id": rid, "input_tokens": 8, "output_tokens": 4,
                "request_received_ms": at, "replay": {
                    "trace_block_size": 4, "input_length": 8, "input_sequence_hashes": [1, 2]}}}


#: a parent that is not there: one wording (``graph.dangling``), each reader's field
@pytest.mark.parametrize(("name", "text", "line", "rule"), [
    ("g.csv", "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,"
     "parent_session_id,spawn_round\na,0,0,10,5,0,,\nb,0,0,10,5,0,zz,0\n", 3,
     "unit 'b': parent 'zz' is not in the trace (dangling parent)"),
    ("d.jsonl", "".join(json.dumps(o) + "\n" for o in (
        _dynamo("a", 1000, "s"), _dynamo("b", 1100, "c", parent="zz"))), 2,
     "unit 'c': parent_session_id 'zz' is not in the trace (dangling parent)"),
])
def test_a_dangling_parent_is_one_rule(tmp_path, name, text, line, rule):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (line, rule)


def test_a_file_gzipped_twice_says_so(tmp_path):
    import gzip

    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(gzip.compress(("\n".join(JSONL["mooncake"]) + "\n").encode())))
    rule = "compressed with gzip twice: one layer is read (gunzip it once)"
    assert _both(path, "mooncake") == ((1, rule), (1, rule))


def test_a_file_past_the_size_bound_is_the_same_error_detected_or_named(tmp_path, monkeypatch):
    """Detection read the head of a 2 GB file of zeros and said 'binary data (NUL byte)';
    named, the reader said the size (what stops it whatever its bytes)."""
    from workbench.traces import bounds

    monkeypatch.setattr(bounds, "MAX_TRACE_BYTES", 1000)
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\x00" * 2000)
    rule = ("file is larger than the bound of 1,000 bytes (2,000 bytes or more; "
            "docs/trace-bounds.md)" + WINDOW_HINT)
    assert _both(path, "weka") == ((0, rule), (0, rule))


def _cut(text: str) -> str:
    """How ``bounds.shown`` quotes a long string: 60 characters of its repr and its length."""
    return f"{repr(text)[:60]}... ({len(repr(text)):,} characters)"


@pytest.mark.parametrize(("name", "text", "rule"), [
    ("m.jsonl", json.dumps({"timestamp": 0, "input_length": "1" + "2" * 300_000,
                            "output_length": 5, "hash_ids": [1]}) + "\n",
     "input_length must be an integer, got " + _cut("1" + "2" * 300_000)),
    ("i.csv", "id,arrival_time,input_len,output_len\na,0," + "9" * 100_000 + ",5\n",
     "input_len must be an integer, got " + _cut("9" * 100_000)),
    ("t.jsonl", json.dumps({"schema_version": 1, "trajectory_id": "a",
                            "requests": [{"prompt_tokens": 5, "output_tokens": 1,
                                          "reset_before": "x" * 5000}]}) + "\n",
     "requests[0].reset_before must be true or false, got " + _cut("x" * 5000)),
])
def test_a_huge_value_is_quoted_cut_with_its_length(tmp_path, name, text, rule):
    """A 300 KB field was printed whole in the error: one line of stderr 300 KB long."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (1 + name.endswith(".csv"), rule)
    assert len(rule) < 160


@pytest.mark.parametrize("fmt", sorted(CSV))
@pytest.mark.parametrize(("sep", "name", "shown"), [
    (";", "semicolons", ";"), ("\t", "tabs", "\\t"), ("|", "vertical bars", "|")])
def test_a_csv_with_another_separator_says_so_detected_or_named(tmp_path, fmt, sep, name,
                                                                 shown):
    """A spreadsheet's semicolon export: detected it was 'cannot tell the trace format',
    named 'missing columns: ...' (all of them, the header being one name)."""
    path = tmp_path / "export.csv"
    path.write_text("\n".join(line.replace(",", sep) for line in CSV[fmt]) + "\n")
    rule = (f"the header is separated by {name}, not commas: {fmt} is comma-separated CSV "
            f"(export it as CSV, or tr '{shown}' ',' < FILE when no field holds a comma)")
    assert _both(path, fmt) == ((1, rule), (1, rule))


#: a file joined to itself (``cat t.jsonl t.jsonl``): each round was loaded twice
def test_a_tracelab_file_duplicated_wholesale_is_refused_at_its_first_repeat(tmp_path):
    text = (DATA / "tracelab/round_trace.sanitized.jsonl").read_text()
    path = tmp_path / "twice.jsonl"
    path.write_text(text + text)
    n = len(text.splitlines())
    rule = "duplicate round_id 'msg_3e0cf83dc2523801f59077fd' (also at line 1)"
    assert _both(path, "tracelab") == ((n + 1, rule), (n + 1, rule))


def test_a_repeated_tracelab_line_without_round_id_is_refused(tmp_path):
    row = {k: v for k, v in json.loads(JSONL["tracelab"][0]).items()
           if k not in ("round_id", "trace_key")}
    other = {**row, "round_index": 1}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (row, other, row)) + "\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (3, (
        "duplicate round: line 3 repeats line 1 byte for byte (session_id "
        "'claude:92ee5b8a-429c-e80b-5db6-5381512f4697', round_index 0)"))


def _bailian(*rows: tuple[int, int, float]) -> str:
    return "".join(json.dumps({"chat_id": c, "parent_chat_id": p, "timestamp": t,
                               "input_length": 32, "output_length": 4, "hash_ids": [1, c]})
                   + "\n" for c, p, t in rows)


def test_a_bailian_turn_earlier_than_its_parent_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(_bailian((1, -1, 10.0), (2, 1, 12.0), (3, 2, 11.5)))
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (3, (
        "chat_id '3' arrives at 11.5 s, before its parent_chat_id '2' (line 2, 12.0 s): a "
        "turn's prompt holds its parent's answer, so it cannot come first (docs/trace-formats.md,"
        " \"bailian\")"))


def test_a_bailian_turn_at_its_parents_instant_runs_after_it_whatever_the_file_order(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(_bailian((2, 1, 10.0), (1, -1, 10.0)))
    unit, = load_trace(path).units
    assert [r.request_id for r in unit.rounds] == ["1", "2"]


def _mooncake(*stamps: float | None, **extra: object) -> str:
    rows = []
    for n, ts in enumerate(stamps):
        row: dict[str, object] = {"input_length": 600, "output_length": 2, "hash_ids": [n, 90 + n]}
        if ts is not None:
            row["timestamp"] = ts
        rows.append(json.dumps({**row, **extra}))
    return "\n".join(rows) + "\n"


def test_mooncake_unix_ms_timestamps_are_rebased_to_the_first_request(tmp_path, caplog):
    t0 = 1_765_000_000_000
    path = tmp_path / "m.jsonl"
    path.write_text(_mooncake(t0 + 100, t0, t0 + 250.5))
    with caplog.at_level(logging.WARNING, logger="workbench.traces.mooncake"):
        w = load_trace(path)
    assert [u.arrival_ms for u in w.units] == [100.0, 0.0, 250.5]
    assert w.meta["arrival_origin_ms"] == t0
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: timestamps are Unix time in ms (the first 2025-12-06T05:46:40+00:00), not "
        f"ms from the trace's start: rebased to the first request (arrival_origin_ms {t0})"]
    plain = tmp_path / "p.jsonl"
    plain.write_text(_mooncake(100, 0, 250.5))
    assert load_trace(plain).units == w.units and "arrival_origin_ms" not in load_trace(
        plain).meta


def test_mooncake_unix_seconds_are_read_as_seconds_and_rebased(tmp_path, caplog):
    """Every timestamp in Unix seconds (``time.time()``; as ms from the start, a trace whose
    first request came 11.6 days in): read as seconds, rebased, said once; a row's
    ``delay`` stays ms."""
    t0 = 1_765_000_000
    path = tmp_path / "m.jsonl"
    path.write_text(_mooncake(t0 + 1, t0, t0 + 2.5)
                    + _mooncake(t0 + 3, t0 + 9, session_id="s", delay=5))
    with caplog.at_level(logging.WARNING, logger="workbench.traces.mooncake"):
        w = load_trace(path)
    assert [u.arrival_ms for u in w.units] == [1000.0, 0.0, 2500.0, 3005.0]
    assert w.meta["arrival_origin_ms"] == t0 * 1000 and w.meta["timestamp_unit"] == "s"
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: timestamps are Unix time in seconds (the first 2025-12-06T05:46:40+00:00), "
        f"not ms from the trace's start: rebased to the first request (arrival_origin_ms "
        f"{t0 * 1000})"]
    # ms from the start beside them: read as ms, as before (no unit explains both)
    mixed = tmp_path / "x.jsonl"
    mixed.write_text(_mooncake(0, t0))
    assert [u.arrival_ms for u in load_trace(mixed).units] == [0.0, float(t0)]


def test_mooncake_unix_ms_session_rows_are_rebased_too(tmp_path):
    t0 = 1_765_000_000_000
    path = tmp_path / "m.jsonl"
    path.write_text(_mooncake(t0 + 50, t0 + 60, session_id="s", delay=5) + _mooncake(t0))
    w = load_trace(path)
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [("s", 55.0), ("mooncake_2", 0.0)]


@pytest.mark.parametrize(("stamps", "line", "rule"), [
    # Unix ms beside ms from the start: no origin makes both true
    ((0, 1_765_000_000_000), 2,
     "timestamp 1765000000000 exceeds the bound of 31,622,400,000 ms (docs/trace-bounds.md)"),
    # between the offset bound (366 days) and Unix ms from 2001: neither
    ((5e10, 5e10), 1,
     "timestamp 50000000000.0 exceeds the bound of 31,622,400,000 ms (docs/trace-bounds.md)"),
    ((1_765_000_000_000, -1), 2, "timestamp must be >= 0.0, got -1"),
])
def test_mooncake_timestamps_that_no_origin_explains_are_still_refused(tmp_path, stamps, line,
                                                                         rule):
    path = tmp_path / "m.jsonl"
    path.write_text(_mooncake(*stamps))
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (line, rule)


def test_dynamo_request_received_in_unix_seconds_is_read_as_seconds(tmp_path, caplog):
    t0 = 1_765_000_000.25
    path = tmp_path / "d.jsonl"
    rows = [_dynamo("a", t0, "s"), _dynamo("b", t0 + 1.5, "s"), _dynamo("c", t0 + 0.5, "t")]
    path.write_text("".join(json.dumps(o) + "\n" for o in rows))
    with caplog.at_level(logging.WARNING, logger="workbench.traces.dynamo"):
        w = load_trace(path)
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [("s", 0.0), ("t", 500.0)]
    assert w.meta["request_received_unit"] == "s"
    assert w.meta["time_origin_unix_ms"] == t0 * 1000
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: request_received_ms is in Unix seconds (the first {t0}: "
        "2025-12-06T05:46:40.250000+00:00), not ms: read as seconds"]


@pytest.mark.parametrize(("stamps", "line", "rule"), [
    ((5e10, 5e10 + 10), 1,
     "request_received_ms 50000000000 is neither Unix ms (from 1e12: 2001) nor Unix seconds "
     "(1e9 to 1e10: 2001 to 2286) nor ms from the trace's start (below 1e9): its unit cannot be "
     "told from its scale (docs/trace-formats.md, \"dynamo\")"),
    ((1_765_000_000, 1_765_000_000_000), 2,
     "request_received_ms 1765000000000 is not in Unix seconds as line 1's 1765000000 is "
     "(1e9 to 1e10): one unit for the whole file (docs/trace-formats.md, \"dynamo\")"),
])
def test_dynamo_request_received_of_no_one_unit_is_refused(tmp_path, stamps, line, rule):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(_dynamo(f"r{n}", at, "s")) + "\n"
                            for n, at in enumerate(stamps)))
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.rule) == (line, rule)


BOM_RULE = ("a byte order mark (U+FEFF) inside the file, not only as its first character: "
            "files joined with cat keep each one's (remove them: sed 's/\\xef\\xbb\\xbf//g' FILE)")


@pytest.mark.parametrize("fmt", sorted(EVERY))
@pytest.mark.parametrize("where", ["start", "middle"])
def test_a_second_byte_order_mark_names_its_line_detected_or_named(tmp_path, fmt, where):
    lines = [line.encode() for line in EVERY[fmt]]
    bom = "\ufeff".encode()
    if where == "start":
        lines[0] = bom + bom + lines[0]
    else:
        lines[1] = bom + lines[1]
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    want = 1 if where == "start" else 2
    assert _both(path, fmt) == ((want, BOM_RULE), (want, BOM_RULE))


def test_one_byte_order_mark_at_the_start_is_still_dropped(tmp_path):
    text = "\n".join(JSONL["mooncake"]) + "\n"
    path = tmp_path / "bom.jsonl"
    path.write_bytes("\ufeff".encode() + text.encode())
    plain = tmp_path / "plain.jsonl"
    plain.write_text(text)
    assert load_trace(path).units == load_trace(plain).units


def test_dynamo_tool_times_in_unix_seconds_are_read_as_seconds(tmp_path):
    """A tool span in seconds beside requests in seconds lands in its gap, as in ms."""
    t0 = 1_765_000_000.0
    tool = {"schema": "dynamo.request.trace.v1", "event_type": "tool_end",
            "agent_context": {"session_id": "s"},
            "tool": {"tool_call_id": "c", "started_at_unix_ms": t0 + 0.5,
                     "ended_at_unix_ms": t0 + 1.25}}
    by_duration = {**tool, "tool": {"tool_call_id": "d", "duration_ms": 250,
                                    "ended_at_unix_ms": t0 + 3.0}}
    rows = [_dynamo("a", t0, "s"), tool, _dynamo("b", t0 + 2, "s"), by_duration,
            _dynamo("c", t0 + 4, "s")]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in rows))
    w = load_trace(path)
    assert [r.tool_wait_after_ms for r in w.units[0].rounds] == [750.0, 250.0, 0.0]
    assert (w.meta["request_received_unit"], w.meta["tool_time_unit"]) == ("s", "s")
