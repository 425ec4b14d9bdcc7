"""Independent-request CSV reader: one whole prompt per row, never a session.

Rules: docs/trace-formats.md.
"""

from pathlib import Path

import pytest
from public_data import FIXTURES
from trace_files import trace_error, write_trace

from workbench.traces.load import load_trace

FIXTURE = FIXTURES / "independent_requests.csv"
HEADER = "id,arrival_time,input_len,output_len\n"


def _write(tmp_path: Path, text: str | bytes) -> Path:
    return write_trace(tmp_path, text, "requests.csv")


def test_fixture_keeps_file_order_and_ids():
    w = load_trace(FIXTURE)
    assert w.fmt == "independent" and not w.has_sessions
    assert [u.unit_id for u in w.units] == [
        "independent_req-b",
        "independent_req-a",
        "independent_10",
        "independent_2",
    ]
    assert [u.arrival_ms for u in w.units] == [0.0, 0.0, 12.5, 250.25]
    for u in w.units:
        (r,) = u.rounds
        assert u.kind == "independent" and r.prefix_len == 0 and r.round_idx == 0
        assert r.request_id == u.unit_id and r.arrival_ms == u.arrival_ms
    assert [(u.rounds[0].input_len, u.rounds[0].output_len) for u in w.units] == [
        (812, 64),
        (2048, 128),
        (300, 1),
        (4096, 512),
    ]


def test_columns_in_any_order(tmp_path):
    w = load_trace(_write(tmp_path, "output_len,input_len,id,arrival_time\n7,9,x,1.5\n"))
    assert w.fmt == "independent"
    r = w.units[0].rounds[0]
    assert (r.request_id, r.arrival_ms, r.input_len, r.output_len) == ("independent_x", 1.5, 9, 7)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(
            "id,arrival_time,input_len\na,0,5\n",
            1,
            "missing column: output_len",
            id="missing-column",
        ),
        pytest.param(
            "id,arrival_time,input_len,output_len,round_idx\na,0,5,1,0\n",
            1,
            "unknown column round_idx",
            id="session-column",
        ),
        pytest.param(
            HEADER + "a,0,5,1\nb,0,five,1\n", 3, "input_len must be an integer", id="wrong-type"
        ),
        pytest.param(HEADER + "a,0,-5,1\n", 2, "input_len must be >= 1", id="negative-length"),
        pytest.param(HEADER + "a,0,5,0\n", 2, "output_len must be >= 1", id="zero-output"),
        pytest.param(HEADER + "a,0,nan,1\n", 2, "input_len must be an integer", id="nan-length"),
        pytest.param(HEADER + "a,inf,5,1\n", 2, "arrival_time must be finite", id="inf-arrival"),
        pytest.param(HEADER + "a,-1,5,1\n", 2, "arrival_time must be >= 0", id="negative-arrival"),
        pytest.param(HEADER + "a,0,5.5,1\n", 2, "input_len must be an integer", id="fraction"),
        pytest.param(HEADER + "a,0,5,1\n ,0,5,1\n", 3, "id must not be empty", id="empty-id"),
        pytest.param(HEADER + "a,0,5,1\na,3,5,1\n", 3, "duplicate id", id="duplicate-id"),
        pytest.param(HEADER + "a,0,5,1\nb,0,5\n", 3, "expected 4 fields", id="truncated-row"),
        pytest.param(HEADER, 2, "no data rows", id="header-only"),
        pytest.param("", 0, "empty", id="empty-file"),
        # a gzip header alone: read as gzip (traces may be compressed), cut short
        pytest.param(b"\x1f\x8b\x08\x00\x00\x00", 0, "gzip data is cut short", id="binary-gzip"),
    ],
)
def test_bad_input_is_one_trace_format_error(tmp_path, text, line, words):
    err = trace_error(_write(tmp_path, text), "independent")
    assert err.line == line and words in err.rule
