"""Azure LLM inference traces (Azure/AzurePublicDataset 2023, 2024): detected from the
header, wall-clock TIMESTAMPs read to the nanosecond and rebased to the first request,
independent one-round units in file order (docs/trace-formats.md, "azure")."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from public_data import FIXTURES
from trace_files import trace_error, write_trace

from workbench.traces.load import detect_format, load_trace

CODE = FIXTURES / "serving-traces/azure_code_2023_head150.csv"
CONV = FIXTURES / "serving-traces/azure_conv_2023_head150.csv"
WEEK = FIXTURES / "serving-traces/azure_2024_notebook.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(tmp_path: Path, rows: str, header: str = HEADER) -> Path:
    return write_trace(tmp_path, header + rows, "azure.csv")


@pytest.mark.parametrize("path", [CODE, CONV, WEEK], ids=lambda p: p.name)
def test_public_slices_are_detected_as_azure(path):
    assert detect_format(path) == "azure"
    w = load_trace(path)
    assert w.fmt == "azure" and not w.has_sessions and not w.has_hash_ids
    assert [u.unit_id for u in w.units] == [f"azure_{n}" for n in range(len(w.units))]
    for u in w.units:
        (r,) = u.rounds
        assert u.kind == "independent" and r.prefix_len == 0 and r.request_id == u.unit_id
    arrivals = [u.arrival_ms for u in w.units]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_the_2023_conversation_slice_exactly():
    """The file's first rows: 2023-11-16 18:15:46.6805900,374,44 / 18:15:50.9951690,396,109."""
    w = load_trace(CONV)
    assert len(w.units) == 150
    first, second = w.units[0].rounds[0], w.units[1].rounds[0]
    assert (first.input_len, first.output_len, second.input_len, second.output_len) == (
        374, 44, 396, 109)
    assert second.arrival_ms == 4314.579  # 4.3145790 s: the 7th digit kept
    assert w.meta["arrival_origin"] == "2023-11-16 18:15:46.6805900"
    assert w.meta["arrival_origin_ms"] == 1700158546680.59  # the clock as written, read as UTC
    assert w.meta["timestamp_offset"] is False


def test_the_2024_week_with_utc_offsets():
    """Rows as the 2024 notebook prints them: a week of arrivals, +00:00 offsets."""
    w = load_trace(WEEK)
    assert len(w.units) == 10 and w.meta["timestamp_offset"] is True
    assert w.units[1].arrival_ms == 7.405
    assert w.units[-1].arrival_ms == 604799919.571  # 6 d 23:59:59.919571
    assert w.meta["arrival_origin"] == "2024-05-10 00:00:00.009930+00:00"


def test_seven_and_nine_fractional_digits_keep_nanosecond_order(tmp_path):
    """datetime.fromisoformat keeps 6 digits: these rows would tie, or not parse."""
    p = _write(tmp_path, "2023-11-16 18:15:46.6805900,10,1\n"
                         "2023-11-16 18:15:46.6805901,10,1\n"
                         "2023-11-16 18:15:46.6805902,10,1\n"
                         "2023-11-16 18:15:46.680590201,10,1\n"
                         "2023-11-16 18:15:47,10,1\n")
    assert [u.arrival_ms for u in load_trace(p).units] == [
        0.0, 0.0001, 0.0002, 0.000201, 319.41]


def test_offsets_other_than_utc_are_converted(tmp_path):
    p = _write(tmp_path, "2024-05-12 00:00:00+00:00,10,1\n"
                         "2024-05-12 02:00:00.5+02:00,10,1\n"
                         "2024-05-11T19:00:01-05:00,10,1\n"
                         "2024-05-12 00:00:02Z,10,1\n")
    assert [u.arrival_ms for u in load_trace(p).units] == [0.0, 500.0, 1000.0, 2000.0]


def test_generated_tokens_zero_is_one_token_counted_and_warned_once(tmp_path, caplog):
    p = _write(tmp_path, "2024-05-12 00:00:00+00:00,10,0\n"
                         "2024-05-12 00:00:01+00:00,20,5\n"
                         "2024-05-12 00:00:02+00:00,30,0\n")
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert [u.rounds[0].output_len for u in w.units] == [1, 5, 1]
    assert w.meta["clamped_output_tokens"] == 2
    warned = [r.getMessage() for r in caplog.records if "GeneratedTokens" in r.getMessage()]
    assert warned == [f"{p}: 2 rows have GeneratedTokens 0 (first at line 2): each replayed "
                      "as 1 output token (an output of 0 cannot be replayed)"]


def test_context_tokens_zero_is_skipped_counted_and_warned(tmp_path, caplog):
    p = _write(tmp_path, "2024-05-12 00:00:00+00:00,0,3\n"
                         "2024-05-12 00:00:01+00:00,20,5\n")
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [("azure_1", 0.0)]
    assert w.meta["skipped_empty_prompts"] == 1
    assert f"{p}: 1 row has ContextTokens 0 (first at line 2): skipped" in caplog.text


def test_unsorted_rows_keep_file_order_and_their_own_times(tmp_path, caplog):
    p = _write(tmp_path, "2023-11-16 18:15:50.0000000,10,1\n"
                         "2023-11-16 18:15:46.0000000,20,1\n"
                         "2023-11-16 18:15:51.0000000,30,1\n")
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [
        ("azure_0", 4000.0), ("azure_1", 0.0), ("azure_2", 5000.0)]
    assert w.meta["rows_out_of_order"] == 1
    assert (f"{p}: 1 row has a TIMESTAMP earlier than a row above it (first at line 3): kept "
            "in file order, each sent at its own time") in caplog.text


@pytest.mark.parametrize(("rows", "line", "rule"), [
    ("2023-11-16 18:15:46.68,abc,4\n", 2, "ContextTokens must be an integer, got 'abc'"),
    ("2023-11-16 18:15:46.68,5,-4\n", 2, "GeneratedTokens must be >= 0, got '-4'"),
    ("2023-11-16 18:15:46.68,5,4\n2023-11-16 18:15:47,5\n", 3, "expected 3 fields, found 2"),
    ("1700158546.68,5,4\n", 2, "TIMESTAMP must be a date and time like 2023-11-16 "
     "18:15:46.6805900 (optionally +00:00), got '1700158546.68'"),
    ("2023-11-16 18:15:46.6805900000,5,4\n", 2, "TIMESTAMP must be a date and time like "
     "2023-11-16 18:15:46.6805900 (optionally +00:00), got '2023-11-16 18:15:46.6805900000'"),
    ("2023-02-30 18:15:46,5,4\n", 2, "TIMESTAMP '2023-02-30 18:15:46' is not a date "
     "(day is out of range for month)"),
    ("2023-11-16 24:00:00,5,4\n", 2, "TIMESTAMP '2023-11-16 24:00:00' is not a time of day "
     "(00:00:00 to 23:59:59)"),
    ("2024-05-12 00:00:00,5,4\n2024-05-12 00:00:01+00:00,5,4\n", 3,
     "TIMESTAMP '2024-05-12 00:00:01+00:00' has a UTC offset, but line 2's has none: "
     "a file mixes clocks"),
    ("2023-11-16 18:15:46,5,4\n2024-11-16 18:15:47,5,4\n", 3,
     "arrival after the first request 31622401000.0 exceeds the bound of 31,622,400,000 ms "
     "(docs/trace-bounds.md)"),
])
def test_bad_rows_name_file_line_and_rule(tmp_path, rows, line, rule):
    err = trace_error(_write(tmp_path, rows))
    assert (err.line, err.rule) == (line, rule)


def test_every_row_with_an_empty_prompt_is_an_error(tmp_path):
    p = _write(tmp_path, "2023-11-16 18:15:46.68,0,4\n")
    err = trace_error(p)
    assert (err.line, err.rule) == (
        2, "no row to replay: every row has ContextTokens 0 (an empty prompt)")


def test_a_multimodal_header_is_detected_and_refused_with_why(tmp_path):
    p = _write(tmp_path, "2025-01-01 00:00:00,1,5,4\n",
               header="TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n")
    assert detect_format(p) == "azure"
    assert trace_error(p).rule.endswith("workbench replays text prompts only")


def test_a_spreadsheet_export_with_quoted_names_is_detected(tmp_path):
    p = _write(tmp_path, '"2023-11-16 18:15:46.6805900","374","44"\n',
               header='"TIMESTAMP","ContextTokens","GeneratedTokens"\n')
    assert detect_format(p) == "azure"
    (r,) = load_trace(p).units[0].rounds
    assert (r.input_len, r.output_len) == (374, 44)
