"""Mooncake JSONL reader (docs/trace-formats.md): the public trace, sessions, options, bad input."""

import logging
from pathlib import Path

import pytest
from public_data import FIXTURES, needs, public
from trace_files import trace_error, write_trace

from workbench.errors import ConfigError, TraceFormatError
from workbench.traces.load import load_trace

PUBLIC = public("mooncake/conversation_trace.jsonl")  # the full trace: not bundled

needs_public = needs(PUBLIC)


def _write(tmp_path: Path, text: str | bytes, name: str = "t.jsonl") -> Path:
    return write_trace(tmp_path, text, name)


def _row(ts=0, inp=1000, out=10, ids="[1, 2]", extra=""):
    return (
        f'{{"timestamp": {ts}, "input_length": {inp}, "output_length": {out}, '
        f'"hash_ids": {ids}{extra}}}\n'
    )


@needs_public
def test_public_trace_matches_paper_table():
    w = load_trace(PUBLIC, fmt="mooncake")
    rounds = list(w.rounds())
    assert len(rounds) == 12031 and len(w.units) == 12031
    assert round(sum(r.prompt_len for r in rounds) / len(rounds)) == 12035
    assert round(sum(r.output_len for r in rounds) / len(rounds)) == 343
    assert w.block_size == 512 and not w.has_sessions
    assert all(r.hash_ids is not None for r in rounds)
    # arrivals span the hour, units keep file order (non-decreasing timestamps)
    arrivals = [u.arrival_ms for u in w.units]
    assert arrivals == sorted(arrivals) and arrivals[-1] == pytest.approx(3_536_999, abs=1)


@needs_public
def test_public_trace_prefix_is_leading_seen_blocks():
    w = load_trace(PUBLIC, fmt="mooncake")
    rounds = list(w.rounds())
    # row 0 is the first; rows 1.. share only block id 0 with it
    assert (rounds[0].prefix_len, rounds[0].input_len) == (0, 6758)
    assert (rounds[1].prefix_len, rounds[1].input_len) == (512, 7322 - 512)
    assert all(0 <= r.prefix_len <= r.prompt_len for r in rounds)
    assert all(r.prefix_len % 512 == 0 or r.input_len == 0 for r in rounds)


# how fast the public trace loads is measured in bench/bench_load.py
# (bench/README.md#trace-loading), not asserted here: a wall-time bound fails on a loaded machine.


def test_sessions_delay_and_request_ids():
    w = load_trace(FIXTURES / "mooncake_sessions.jsonl")
    assert w.fmt == "mooncake"
    assert [u.unit_id for u in w.units] == ["mooncake_0", "chat-1", "mooncake_3"]
    assert [u.kind for u in w.units] == ["independent", "session", "independent"]
    chat = w.units[1]
    assert chat.arrival_ms == 150.0  # timestamp 100 + first delay 50
    assert [r.request_id for r in chat.rounds] == ["c1-t0", "c1-t1", "mooncake_4"]
    assert [r.round_idx for r in chat.rounds] == [0, 1, 2]
    assert [r.tool_wait_after_ms for r in chat.rounds] == [2000.0, 0.0, 0.0]
    assert [(r.prefix_len, r.input_len) for r in chat.rounds] == [
        (512, 688),
        (1536, 164),
        (2048, 52),
    ]
    # a whole prompt seen before: the ideal prefix is all of it
    assert (w.units[2].rounds[0].prefix_len, w.units[2].rounds[0].input_len) == (1024, 0)
    assert isinstance(w.units[0].arrival_ms, float)


def test_block_size_and_floor_rounding(tmp_path):
    p = _write(tmp_path, _row(inp=1000, ids="[1]") + _row(ts=5, inp=1100, ids="[1, 2]"))
    with pytest.raises(TraceFormatError) as exc:
        load_trace(p, fmt="mooncake")
    assert exc.value.line == 1 and "expected 2" in exc.value.rule
    w = load_trace(p, fmt="mooncake", hash_rounding="floor")
    assert [(r.prefix_len, r.input_len) for r in w.rounds()] == [(0, 1000), (512, 588)]
    w = load_trace(p, fmt="mooncake", block_size=1000)  # ceil(1000/1000)=1, ceil(1100/1000)=2
    assert w.block_size == 1000
    assert [r.prefix_len for r in w.rounds()] == [0, 1000]


def test_bad_options_are_config_errors(tmp_path):
    p = _write(tmp_path, _row())
    with pytest.raises(ConfigError):
        load_trace(p, fmt="mooncake", hash_rounding="round")
    with pytest.raises(ConfigError):
        load_trace(p, fmt="mooncake", block_size=0)
    with pytest.raises(ConfigError, match="unknown option"):
        load_trace(p, fmt="mooncake", blocksize=64)


def test_hash_ids_wider_than_64_bits_stay_exact(tmp_path):
    big = 2**70
    p = _write(tmp_path, _row(ids=f"[{big}, {big + 1}]") + _row(ids=f"[{big}, 7]"))
    w = load_trace(p, fmt="mooncake")
    rounds = list(w.rounds())
    assert rounds[0].hash_ids == (big, big + 1)
    assert rounds[1].prefix_len == 512


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(
            _row() + '{"timestamp": 1, "output_length": 3, "hash_ids": [1]}\n',
            2,
            "input_length",
            id="missing-field",
        ),
        pytest.param(
            _row() + _row(inp='"1000"'),
            2,
            "input_length must be an integer",
            id="wrong-type-string",
        ),
        pytest.param(_row(out=-3), 1, "output_length must be >= 1", id="negative-length"),
        pytest.param(_row(out=0), 1, "output_length must be >= 1", id="zero-output"),
        pytest.param(_row() + _row(inp="NaN"), 2, "invalid JSON", id="nan-length"),
        pytest.param(_row(inp=1000.5), 1, "input_length must be an integer", id="fraction"),
        pytest.param(_row() + _row(ids="[1, 2, 3]"), 2, "3 hash_ids", id="wrong-hash-count"),
        pytest.param(_row(ids="[1, true]"), 1, "list of integers", id="bool-hash"),
        pytest.param(_row(ids="[1, -2]"), 1, "non-negative", id="negative-hash"),
        pytest.param(_row(ids='"1,2"'), 1, "must be a list", id="hash-not-list"),
        pytest.param(_row(ts=-1), 1, "timestamp must be >= 0", id="negative-timestamp"),
        pytest.param(_row() + _row()[:30] + "\n", 2, "invalid JSON", id="truncated-line"),
        pytest.param(_row() + "[1, 2]\n", 2, "JSON object", id="not-an-object"),
        pytest.param(
            '{"input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}\n',
            1,
            "timestamp",
            id="independent-row-without-timestamp",
        ),
        pytest.param(
            _row(extra=', "request_id": "x"') + _row(extra=', "request_id": "x"'),
            2,
            "duplicate request_id 'x' (also at line 1)",
            id="duplicate-request-id",
        ),
        pytest.param(
            _row(extra=', "session_id": ""'), 1, "session_id must not be empty", id="empty-session"
        ),
        pytest.param(
            _row(extra=', "session_id": "s", "delay": -1'),
            1,
            "delay must be >= 0",
            id="negative-delay",
        ),
        pytest.param("   \n\n", 0, "empty", id="empty-file"),
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00garbage", 3, "binary", id="binary"),
        pytest.param(_row().encode() + b"\xff\xfe{}\n", 2, "UTF-8", id="not-utf8"),
    ],
)
def test_bad_input_is_one_trace_format_error(tmp_path, text, line, words):
    err = trace_error(_write(tmp_path, text), "mooncake")
    assert err.line == line and words in err.rule


def test_prefix_follows_arrival_order_in_an_unsorted_file(tmp_path):
    # the second row arrives first: it is the one that finds nothing cached; a session's
    # later turn (its delays after the session's arrival: 10 + 500 ms) comes after the row
    # at 200 ms, so it finds block 7 that row sent
    p = _write(tmp_path, _row(ts=100, inp=1024, ids="[1, 2]") + _row(ts=0, inp=1024, ids="[1, 2]")
               + '{"session_id": "s", "timestamp": 0, "delay": 10, "input_length": 512, '
                 '"output_length": 2, "hash_ids": [5]}\n'
               + '{"session_id": "s", "delay": 500, "input_length": 1024, '
                 '"output_length": 2, "hash_ids": [7, 8]}\n'
               + _row(ts=200, inp=512, ids="[7]"))
    prefix = {r.request_id: r.prefix_len for r in load_trace(p).rounds()}
    assert prefix == {"mooncake_0": 1024, "mooncake_1": 0, "mooncake_2": 0, "mooncake_3": 512,
                      "mooncake_4": 0}


# ------------------------------------------------------------------ AIPerf's mooncake_trace
# AIPerf's MooncakeTrace (aiperf/dataset/loader/models.py, db4f639): input_length or
# text_input; hash_ids, timestamp, delay, session_id optional (docs/trace-formats.md)


def test_aiperf_rows_without_hash_ids_are_read_and_detected(tmp_path):
    """AIPerf's own examples: a row with input_length and output_length only, and its
    multi-turn version (session_id, delay; no hash_ids): no block ids, no cached prefix."""
    p = _write(tmp_path, '{"timestamp": 0, "input_length": 10, "output_length": 4}\n'
                         '{"session_id": "abc-123", "input_length": 300, "output_length": 40}\n'
                         '{"session_id": "abc-123", "delay": 2, "input_length": 150, '
                         '"output_length": 20}\n')
    w = load_trace(p)
    assert w.fmt == "mooncake"
    shape = [[(r.prefix_len, r.input_len, r.output_len, r.tool_wait_after_ms, r.hash_ids)
              for r in u.rounds] for u in w.units]
    assert shape == [[(0, 10, 4, 0.0, None)],
                     [(0, 300, 40, 2.0, None), (0, 150, 20, 0.0, None)]]


def test_text_input_rows_are_counted(tmp_path, caplog):
    """``text_input`` (AIPerf sends the text itself): its tokens are counted, as the text
    datasets' are (words, or the tokenizer option); input_length and hash_ids beside it
    are what AIPerf ignores: ignored, said once."""
    p = _write(tmp_path, '{"timestamp": 0, "text_input": "Hello world, how are you", '
                         '"output_length": 4}\n'
                         '{"timestamp": 5, "text_input": "one two", "input_length": 900, '
                         '"hash_ids": [7, 8], "output_length": 2}\n'
                         + _row(ts=9, ids="[7, 8]"))
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert w.fmt == "mooncake"
    rounds = list(w.rounds())
    assert [(r.prefix_len, r.input_len, r.output_len, r.hash_ids) for r in rounds] == [
        (0, 5, 4, None), (0, 2, 2, None), (0, 1000, 10, (7, 8))]
    assert w.meta["reader"]["token_count"].startswith("words")
    assert w.meta["text_input_rows"] == 2 and w.meta["ignored_beside_text_input"] == 1
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "1 row gives text_input with input_length or hash_ids (first at line 2)" in said


@pytest.mark.parametrize(("text", "line", "words"), [
    ('{"timestamp": 0, "output_length": 3}\n', 1,
     "missing field 'input_length' (or 'text_input', AIPerf's text)"),
    ('{"timestamp": 0, "input_length": 3}\n', 1,
     "missing field 'output_length': replay needs each request's output length"),
    ('{"timestamp": 0, "text_input": 7, "output_length": 3}\n', 1,
     "text_input must be a string, got 7"),
    ('{"timestamp": 0, "text_input": "  ", "output_length": 3}\n', 1,
     "text_input counts 0 tokens"),
    ('{"timestamp": 0, "hash_ids": [1], "text_input": "a", "output_length": 3}\n', 1,
     "hash_ids without input_length"),
])
def test_aiperf_rows_bad_input(tmp_path, text, line, words):
    err = trace_error(_write(tmp_path, text), "mooncake")
    assert err.line == line and words in err.rule, err.rule
