"""Azure LLM inference traces (Azure/AzurePublicDataset 2023, 2024): detected from the
header, wall-clock TIMESTAMPs read to the nanosecond and rebased to the first request,
independent one-round units in file order (docs/trace-formats.md, "azure")."""

from __future__ import annotations

import gzip
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


# -- a window of a file past the bounds (docs/trace-bounds.md, "A window of a large file") --


def _week(n: int, *, empty_at: int = -1, zero_out_at: int = -1) -> str:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        prompt = 0 if i == empty_at else 100 + i
        out = 0 if i == zero_out_at else 7
        rows.append(f"2024-05-12 00:00:{i // 1000:02d}.{i % 1000:03d}000+00:00,{prompt},{out}")
    return "\n".join(rows) + "\n"


def test_a_window_is_read_without_the_rest_and_equals_the_whole_files_window(tmp_path):
    from workbench.traces.graph import window

    p = write_trace(tmp_path, _week(50, empty_at=3, zero_out_at=12), "week.csv")
    whole = load_trace(p)
    for offset, count in ((0, 5), (10, 7), (40, None), (48, 100)):
        part = load_trace(p, window=(offset, count))
        cut = window(whole, offset, count)
        assert part.units == cut.units, (offset, count)
        assert part.meta["arrival_origin_ms"] == whole.meta["arrival_origin_ms"]
        assert part.meta["window"]["offset"] == offset
        assert part.meta["window"]["count"] == len(cut.units)
        assert part.meta["window"]["read"] == "stream"
    assert load_trace(p, window=(0, 5)).meta["window"]["units_in_file"] is None  # not read
    assert load_trace(p, window=(40, None)).meta["window"]["units_in_file"] == 49
    # a broken row past the window is not read, so not refused; inside it, at its line
    broken = write_trace(tmp_path, _week(20) + "2024-05-12 00:01:00+00:00,x,1\n", "b.csv")
    assert len(load_trace(broken, window=(0, 20)).units) == 20
    err = trace_error(broken, window=(15, 10))
    assert err.line == 22 and "ContextTokens must be an integer" in err.rule


def test_a_window_past_the_last_unit_is_a_config_error(tmp_path):
    from workbench.errors import ConfigError

    p = write_trace(tmp_path, _week(10), "week.csv")
    with pytest.raises(ConfigError, match=r"trace.offset 10 is past the trace's 10 units"):
        load_trace(p, window=(10, 1))


def test_a_file_past_the_line_bound_says_how_to_replay_a_window(tmp_path, monkeypatch):
    from workbench.traces import bounds

    monkeypatch.setattr(bounds, "MAX_TRACE_LINES", 21)  # a header and 20 rows
    p = write_trace(tmp_path, _week(30), "week.csv")
    err = trace_error(p)
    assert err.line == 22 and "trace.offset and trace.max_items" in err.rule
    assert [u.unit_id for u in load_trace(p, window=(25, 3)).units] == [
        "azure_25", "azure_26", "azure_27"]
    err = trace_error(p, window=(0, None))
    assert "a window of more than 20 units" in err.rule


@pytest.mark.parametrize(("name", "change", "line", "rule"), [
    ("crlf", lambda b: b.replace(b"\n", b"\r\n"), None, None),
    ("bom", lambda b: b"\xef\xbb\xbf" + b, None, None),
    ("gzip", gzip.compress, None, None),
    ("utf16", lambda b: b.decode().encode("utf-16"), 1, "UTF-16 text: traces are UTF-8"),
    ("zstd", lambda b: b"\x28\xb5\x2f\xfd" + b, 1, "compressed with zstd"),
    ("gzip-cut", lambda b: gzip.compress(b)[:60], None, "gzip data is broken or cut short"),
    ("latin1", lambda b: b.replace(b",105,", b",10\xe9,", 1), 7, "not UTF-8 text"),
    ("nul", lambda b: b.replace(b",105,", b",10\x005,", 1), 7, "binary data (NUL byte)"),
    ("inner-bom", lambda b: b.replace(b"\n2024", b"\n\xef\xbb\xbf2024", 1), 2, "byte order mark"),
    ("empty", lambda b: b"", 0, "file is empty"),
    ("header-only", lambda b: b.split(b"\n")[0] + b"\n", 2, "no data rows"),
])
def test_a_window_read_as_a_stream_takes_and_refuses_what_a_whole_read_does(
        tmp_path, name, change, line, rule):
    """The stream a window is read from keeps the whole read's file rules: CRLF, a BOM
    and gzip are read the same; UTF-16, other compressors, bytes that are not UTF-8, a
    NUL, an inner BOM, a cut gzip stream are refused at their line (a decoder error, a
    buffer ahead, named line 1; a cut gzip stream was an EOFError traceback)."""
    seed = _week(12).encode()
    p = write_trace(tmp_path, change(seed), f"{name}.csv")
    if rule is None:
        assert load_trace(p, window=(2, 8)).units == load_trace(
            write_trace(tmp_path, seed, "seed.csv"), window=(2, 8)).units
        return
    err = trace_error(p, "azure", window=(2, 8))
    assert rule in err.rule and (line is None or err.line == line), err
