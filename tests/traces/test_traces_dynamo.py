"""Dynamo request-trace reader: sessions, prefixes, tool waits, tolerance, bad input.

Rules: docs/trace-formats.md.
"""

import json
import logging
from pathlib import Path

import pytest
from public_data import FIXTURES
from trace_files import trace_error, write_trace

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace

FIXTURE = FIXTURES / "dynamo_trace.jsonl"
SCHEMA = "dynamo.request.trace.v1"
T0 = 1_700_000_000_000


def _req(rid="r1", recv=T0, length=8, hashes=(1, 2), out=4, sid="s", total=None, **extra):
    request = {
        "request_id": rid,
        "output_tokens": out,
        "request_received_ms": recv,
        "replay": {
            "trace_block_size": 4,
            "input_length": length,
            "input_sequence_hashes": list(hashes),
        },
    }
    if total is not None:
        request["total_time_ms"] = total
    row = {"schema": SCHEMA, "event_type": "request_end", "request": request}
    if sid is not None:
        row["agent_context"] = {"session_id": sid}
    row.update(extra)
    return row


def _tool(start, end, sid="s", call="c1", kind="tool_end"):
    return {
        "schema": SCHEMA,
        "event_type": kind,
        "agent_context": {"session_id": sid},
        "tool": {"tool_call_id": call, "started_at_unix_ms": start, "ended_at_unix_ms": end},
    }


def _write(tmp_path: Path, rows) -> Path:
    """``rows``: the file's text or bytes, or records written one JSON object a line."""
    text = rows if isinstance(rows, str | bytes) else "".join(json.dumps(r) + "\n" for r in rows)
    return write_trace(tmp_path, text, "trace.jsonl")


def test_fixture_sessions_prefixes_and_tool_waits():
    w = load_trace(FIXTURE)
    assert w.fmt == "dynamo" and w.block_size == 4
    assert [u.unit_id for u in w.units] == ["run-a", "run-b"]
    a, b = w.units
    assert (a.arrival_ms, b.arrival_ms) == (0.0, 500.0)  # rebased to the earliest request
    assert b.meta == {"parent_session_id": "run-a"}
    assert [r.request_id for r in a.rounds] == ["a1", "a2", "a3"]
    # prefix = leading hashes seen in any earlier request x block size, capped to the prompt
    assert [(r.prefix_len, r.input_len) for r in a.rounds] == [(0, 10), (8, 8), (16, 1)]
    assert [(r.prefix_len, r.input_len) for r in b.rounds] == [(4, 4), (8, 1)]
    # a1->a2: union of overlapping tools [600,1000] and [800,1200]; a2->a3: idle gap
    # 3000 - (1500 + 700); b1->b2: tool linked through its tool_call_id only
    assert [r.tool_wait_after_ms for r in a.rounds] == [600.0, 800.0, 0.0]
    assert [r.tool_wait_after_ms for r in b.rounds] == [300.0, 0.0]
    assert a.rounds[1].output_len == 32  # "32" written as a string
    assert b.rounds[1].output_len == 1  # 0 output tokens replayed as 1
    big = 2**70
    assert b.rounds[1].hash_ids == (101, big, big + 1)  # > 64 bits kept exact
    assert w.meta["skipped_events"] == {"request_payload": 1}
    assert w.meta["tool_wait_sources"] == {"tools": 2, "gap": 1}
    assert w.meta["clamped_output_tokens"] == 1


def test_without_agent_context_each_request_is_independent(tmp_path):
    rows = [_req("late", T0 + 50, sid=None), _req("early", T0, hashes=(1, 3), sid=None)]
    w = load_trace(_write(tmp_path, rows))
    assert [(u.unit_id, u.kind, u.arrival_ms) for u in w.units] == [
        ("early", "independent", 0.0),
        ("late", "independent", 50.0),
    ]
    # "late" was received after "early": it shares block 1
    assert w.units[1].rounds[0].prefix_len == 4


def test_no_tools_and_no_total_time_means_zero_wait(tmp_path):
    rows = [_req("r2", T0 + 900, hashes=(1, 2, 3), length=12), _req("r1", T0)]
    w = load_trace(_write(tmp_path, rows))
    (unit,) = w.units
    assert [r.request_id for r in unit.rounds] == ["r1", "r2"]  # received order, not file order
    assert [r.tool_wait_after_ms for r in unit.rounds] == [0.0, 0.0]
    assert w.meta["tool_wait_sources"] == {"none": 1}


def test_envelope_strings_and_unknown_fields(tmp_path):
    row = _req(out="5", total="12.0", extra_field={"x": 1})
    row["request"]["replay"]["trace_block_size"] = "4"
    row["request"]["replay"]["input_sequence_hashes"] = ["1", "2"]
    w = load_trace(_write(tmp_path, [{"timestamp": 1.0, "event": row}]))
    r = w.units[0].rounds[0]
    assert (r.output_len, r.hash_ids) == (5, (1, 2))
    assert w.meta["unknown_fields"] == ["extra_field"]


def test_unknown_fields_are_one_warning_naming_each_with_its_first_line(tmp_path, caplog):
    """Fields the schema does not have, at any level (row, agent_context, request,
    replay, tool), are ignored and named once: the file, each field, the first line it
    is on. The schema's own fields that replay does not need are no warning."""
    a = _req("r1", sid="s", event_source="dynamo", event_time_unix_ms=T0 + 5)
    a["request"].update(ttft_ms=3.0, x_request_id="x", worker_id="w0", priority=2)
    a["agent_context"]["trajectory_id"] = "s"
    b = _req("r2", recv=T0 + 100, hashes=(1, 3), sid="s")
    b["request"]["priority"] = 1  # again: still its first line (1)
    b["request"]["replay"]["block_hash_kind"] = "xxh3"
    b["agent_context"]["tenant"] = "t"
    t = _tool(T0 + 10, T0 + 20)
    t["tool"].update(tool_class="bash", status="ok", exit_code=0)
    p = _write(tmp_path, [a, t, b])
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert w.meta["unknown_fields"] == [
        "agent_context.tenant", "request.priority", "request.replay.block_hash_kind",
        "tool.exit_code"]
    warnings = [r for r in caplog.records if "unknown field" in r.getMessage()]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert str(p) in text
    for named in ("agent_context.tenant (line 3)", "request.priority (line 1)",
                  "request.replay.block_hash_kind (line 3)", "tool.exit_code (line 2)"):
        assert named in text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert "unknown_fields" not in load_trace(FIXTURE).meta  # the schema's own fields
    assert "unknown field" not in caplog.text


def test_a_dependency_field_it_does_not_know_is_refused_with_its_line(tmp_path):
    """A sub-agent edge is read whole or not at all: an unknown field in it could move
    the child's start or join, so it is a refusal naming the line, not a warning."""
    parent = _req("p1", sid="p")
    child = _req("c1", recv=T0 + 50, hashes=(1, 5), sid="c")
    child["agent_context"].update(parent_session_id="p", dependency={
        "relation": "subagent", "parent_request_id": "p1", "wait_for": "all"})
    with pytest.raises(TraceFormatError, match=r":2: agent_context\.dependency has field "
                                               r"wait_for this reader does not know"):
        load_trace(_write(tmp_path, [parent, child]))


def _with(row, path, value):
    obj = row
    for key in path[:-1]:
        obj = obj[key]
    if value is KeyError:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return row


@pytest.mark.parametrize(
    ("rows", "line", "words"),
    [
        pytest.param(
            [_req(), _with(_req("r2"), ("request", "replay"), KeyError)],
            2,
            "replay must be an object",
            id="missing-replay",
        ),
        pytest.param(
            [_req(), _with(_req("r2"), ("request", "request_received_ms"), KeyError)],
            2,
            "request_received_ms",
            id="missing-field",
        ),
        pytest.param(
            [_with(_req(), ("request", "output_tokens"), "many")],
            1,
            "output_tokens must be an integer",
            id="wrong-type",
        ),
        pytest.param(
            [_with(_req(), ("request", "output_tokens"), -1)],
            1,
            "output_tokens must be >= 0",
            id="negative-length",
        ),
        pytest.param(
            [_with(_req(), ("request", "replay", "input_length"), "NaN")],
            1,
            "input_length must be an integer",
            id="nan-length",
        ),
        pytest.param(
            [_req(), _req("r2", hashes=(1, 2, 3))],
            2,
            "expected ceil(8/4) = 2",
            id="wrong-hash-count",
        ),
        pytest.param([_req(hashes=(1, "x"))], 1, "sequence hash must be an integer", id="bad-hash"),
        pytest.param(
            [_req(hashes=(1, True))], 1, "sequence hash must be an integer", id="bool-hash"
        ),
        pytest.param(
            [_req(), _with(_req("r2"), ("schema",), "dynamo.request.trace.v2")],
            2,
            "schema must be",
            id="wrong-schema",
        ),
        pytest.param(
            [_req(), _with(_req("r2"), ("event_type",), KeyError)],
            2,
            "event_type",
            id="missing-event-type",
        ),
        pytest.param([_req(), _req("r2", sid=None)], 2, "mixed trace", id="mixed-sessions"),
        pytest.param([_req(), _req()], 2, "duplicate request_id", id="duplicate-request"),
        pytest.param(
            [_req(), _with(_req("r2", hashes=(1,)), ("request", "replay", "trace_block_size"), 8)],
            2,
            "trace_block_size 8 differs",
            id="block-size-differs",
        ),
        pytest.param([_req(), _tool(T0 + 5, None)], 2, "ended_at_unix_ms", id="tool-no-end"),
        pytest.param([_req(), _tool(T0 + 5, T0 + 1)], 2, "after ended", id="tool-backwards"),
        pytest.param([_tool(T0, T0 + 1)], 0, "no request_end rows", id="no-requests"),
        pytest.param(
            [
                _req(),
                {
                    "schema": SCHEMA,
                    "event_type": "request_end",
                    "agent_context": "s",
                    "request": _req()["request"],
                },
            ],
            2,
            "agent_context must be an object",
            id="bad-agent-context",
        ),
        pytest.param(
            json.dumps(_req()) + "\n" + json.dumps(_req("r2"))[:50] + "\n",
            2,
            "invalid JSON",
            id="truncated-line",
        ),
        pytest.param("", 0, "empty", id="empty-file"),
        pytest.param(b"\x00" * 16, 1, "binary", id="binary"),
    ],
)
def test_bad_input_is_one_trace_format_error(tmp_path, rows, line, words):
    err = trace_error(_write(tmp_path, rows), "dynamo")
    assert err.line == line and words in err.rule
