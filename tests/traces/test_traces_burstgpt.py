"""BurstGPT traces (HPMLL/BurstGPT): detected from the header, Timestamp seconds rebased to
the first request kept, failed requests (Response tokens 0) skipped and counted, rows kept
by model / log type, independent one-round units in file order (docs/trace-formats.md,
"burstgpt")."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from public_data import FIXTURES
from trace_files import trace_error, write_trace

from workbench.errors import ConfigError
from workbench.traces.load import detect_format, load_trace

FIXTURE = FIXTURES / "serving-traces/burstgpt_constructed.csv"
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _write(tmp_path: Path, rows: str, header: str = HEADER) -> Path:
    return write_trace(tmp_path, header + rows, "burst.csv")


def test_fixture_detected_rebased_failed_rows_skipped_and_warned(caplog):
    assert detect_format(FIXTURE) == "burstgpt"
    with caplog.at_level(logging.WARNING):
        w = load_trace(FIXTURE)
    assert w.fmt == "burstgpt" and not w.has_sessions and not w.has_hash_ids
    # rows 3 and 4 (lines 5, 6) failed: Response tokens 0
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [
        ("burstgpt_0", 0.0), ("burstgpt_1", 40000.0), ("burstgpt_2", 113000.0),
        ("burstgpt_5", 126500.0), ("burstgpt_6", 195000.0), ("burstgpt_7", 255000.0)]
    assert [(u.rounds[0].input_len, u.rounds[0].output_len) for u in w.units][:3] == [
        (472, 18), (1087, 230), (417, 276)]
    assert w.meta["arrival_origin_ms"] == 5000.0
    assert w.meta["skipped_failed_requests"] == 2
    assert [m.getMessage() for m in caplog.records] == [
        f"{FIXTURE}: 2 rows have Response tokens 0 (a failed request) (first at line 5): "
        "skipped (--trace-option failed=keep replays its prompt with 1 output token)"]
    for u in w.units:
        (r,) = u.rounds
        assert u.kind == "independent" and r.prefix_len == 0 and r.request_id == u.unit_id
    assert w.units[2].meta == {"model": "GPT-4", "log_type": "Conversation log"}
    assert w.units[3].meta == {"model": "GPT-4", "log_type": "API log"}


def test_failed_keep_replays_the_prompt_with_one_token():
    w = load_trace(FIXTURE, failed="keep")
    kept = {u.unit_id: u.rounds[0] for u in w.units}
    assert (kept["burstgpt_3"].input_len, kept["burstgpt_3"].output_len) == (2048, 1)
    assert kept["burstgpt_3"].arrival_ms == 113000.0  # the tie with row 2 keeps file order
    assert w.meta["clamped_output_tokens"] == 2 and "skipped_failed_requests" not in w.meta


def test_vllm_benchmark_selection_gpt4_with_a_response():
    """vLLM's ``--dataset-name burstgpt`` keeps GPT-4 rows whose response is not 0."""
    w = load_trace(FIXTURE, model="GPT-4")
    assert [u.unit_id for u in w.units] == ["burstgpt_2", "burstgpt_5", "burstgpt_7"]
    assert [u.arrival_ms for u in w.units] == [0.0, 13500.0, 142000.0]  # from the first kept
    assert w.meta["model"] == "GPT-4" and w.meta["arrival_origin_ms"] == 118000.0
    assert w.meta["skipped_failed_requests"] == 1  # the GPT-4 row at 130 s
    both = load_trace(FIXTURE, model="GPT-4", log_type="API log")
    assert [u.unit_id for u in both.units] == ["burstgpt_5"]
    assert {u.meta["log_type"] for u in load_trace(FIXTURE, log_type="API log").units} == {
        "API log"}


def test_a_filter_no_row_matches_names_the_values_the_file_has():
    err = trace_error(FIXTURE, model="GPT-5")
    assert (err.line, err.rule) == (
        0, "no row has Model 'GPT-5' (the model option); the file has 'ChatGPT', 'GPT-4'")


@pytest.mark.parametrize(("options", "match"), [
    ({"model": 4}, "burstgpt option model must be a non-empty string"),
    ({"log_type": " "}, "burstgpt option log_type must be a non-empty string"),
    ({"failed": "clamp"}, "burstgpt option failed must be one of skip, keep, got 'clamp'"),
    ({"block_size": 16}, "burstgpt reader got unknown option block_size; valid: model, "
                         "log_type, failed"),
])
def test_bad_options_are_config_errors(options, match):
    with pytest.raises(ConfigError, match=re.escape(match)):
        load_trace(FIXTURE, **options)


def test_burstgpt_3_columns_are_kept_as_unit_metadata(tmp_path):
    header = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
              "Total tokens,Log Type\n")
    p = _write(tmp_path, "10,a1b2,1.5,ChatGPT,100,50,150,Conversation log\n"
                         "12,,,GPT-4,200,20,220,API log\n", header=header)
    assert detect_format(p) == "burstgpt"
    w = load_trace(p)
    assert [u.meta for u in w.units] == [
        {"model": "ChatGPT", "log_type": "Conversation log", "session_id": "a1b2",
         "elapsed_s": 1.5},
        {"model": "GPT-4", "log_type": "API log"}]
    assert not w.has_sessions  # a conversation's turns are still independent requests


def test_unsorted_rows_keep_file_order_and_are_warned(tmp_path, caplog):
    p = _write(tmp_path, "50,ChatGPT,10,2,12,API log\n"
                         "20,ChatGPT,10,2,12,API log\n")
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [
        ("burstgpt_0", 30000.0), ("burstgpt_1", 0.0)]
    assert w.meta["rows_out_of_order"] == 1 and "(first at line 3)" in caplog.text


def test_an_empty_prompt_is_skipped_and_counted(tmp_path):
    w = load_trace(_write(tmp_path, "1,ChatGPT,0,5,5,API log\n2,ChatGPT,10,5,15,API log\n"))
    assert [u.unit_id for u in w.units] == ["burstgpt_1"]
    assert w.meta["skipped_empty_prompts"] == 1


@pytest.mark.parametrize(("rows", "line", "rule"), [
    ("x,ChatGPT,10,2,12,API log\n", 2, "Timestamp must be a number, got 'x'"),
    ("-1,ChatGPT,10,2,12,API log\n", 2, "Timestamp must be >= 0.0, got '-1'"),
    ("1,ChatGPT,ten,2,12,API log\n", 2, "Request tokens must be an integer, got 'ten'"),
    ("1,ChatGPT,10,-2,8,API log\n", 2, "Response tokens must be >= 0, got '-2'"),
    ("1,ChatGPT,10,2,1.5,API log\n", 2, "Total tokens must be an integer, got '1.5'"),
    ("1,,10,2,12,API log\n", 2, "Model must not be empty"),
    ("1,ChatGPT,10,2,12\n", 2, "expected 6 fields, found 5"),
    ("1,ChatGPT,10,2,12,API log\n40000000,GPT-4,1,1,2,API log\n", 3,
     "Timestamp '40000000' exceeds the bound of 31,622,400 s (docs/trace-bounds.md)"),
    ("1,ChatGPT,10,0,10,API log\n", 2,
     "no row to replay: 0 left out by the model/log_type options, 1 failed (Response tokens "
     "0), 0 with an empty prompt (Request tokens 0)"),
])
def test_bad_rows_name_file_line_and_rule(tmp_path, rows, line, rule):
    err = trace_error(_write(tmp_path, rows))
    assert (err.line, err.rule) == (line, rule)


def test_rows_of_one_model_and_log_type_share_one_metadata_mapping():
    """Millions of rows need not hold a dict each: equal metadata is one read-only dict."""
    w = load_trace(FIXTURE)
    assert w.units[0].meta is w.units[1].meta
    assert w.units[0].meta is not w.units[2].meta


def test_the_values_a_filter_error_names_are_bounded(tmp_path):
    rows = "".join(f"{i},m{i},10,2,12,API log\n" for i in range(12))
    err = trace_error(_write(tmp_path, rows), model="GPT-4")
    line, rule = err.line, err.rule
    assert (line, rule) == (0, "no row has Model 'GPT-4' (the model option); the file has "
                               + ", ".join(f"'m{i}'" for i in range(10)) + " and 2 more")
