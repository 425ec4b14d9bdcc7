"""agentic-bench session JSONL reader (docs/trace-formats.md): mapping to rounds and bad input."""

import json
from pathlib import Path

import pytest
from public_data import FIXTURES
from trace_files import trace_error, write_trace

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace

FIXTURE = FIXTURES / "abench_sessions.jsonl"


def _turn(index=0, inp=100, out=10, cached=0, gap=0, **extra):
    t = {
        "index": index,
        "input_tokens": inp,
        "output_tokens": out,
        "cached_tokens": cached,
        "pre_gap_ms": gap,
    }
    t.update(extra)
    return t


def _line(turns, sid="s", **top):
    obj = {"session_id": sid, "system_prompt": "sys", "turns": turns}
    obj.update(top)
    return json.dumps(obj) + "\n"


GOOD = _line([_turn()], sid="good")


def _write(tmp_path: Path, text: str | bytes) -> Path:
    return write_trace(tmp_path, text, "sessions.jsonl")


def test_fixture_maps_cached_tokens_and_gaps():
    w = load_trace(FIXTURE)
    assert w.fmt == "abench"
    assert [u.unit_id for u in w.units] == ["swe-001", "7"]
    s = w.units[0]
    assert s.is_session and s.arrival_ms == 0.0
    assert [(r.prefix_len, r.input_len, r.output_len) for r in s.rounds] == [
        (0, 9000, 120),
        (9100, 300, 80),
        (9480, 220, 40),
    ]
    # tool wait after round i = pre_gap_ms of turn i+1; the first turn's gap goes to meta
    assert [r.tool_wait_after_ms for r in s.rounds] == [1500.5, 320.0, 0.0]
    assert s.meta == {"system_prompt_chars": 36, "first_pre_gap_ms": 5.0}
    assert [r.request_id for r in s.rounds] == [
        "swe-001_turn_0",
        "swe-001_turn_1",
        "swe-001_turn_2",
    ]
    # a fully cached turn: input 0 fresh tokens
    assert (w.units[1].rounds[1].prefix_len, w.units[1].rounds[1].input_len) == (700, 0)


def test_turn_indices_need_only_increase(tmp_path):
    w = load_trace(_write(tmp_path, _line([_turn(3), _turn(7, inp=200, cached=110)])), fmt="abench")
    assert [r.round_idx for r in w.units[0].rounds] == [0, 1]
    assert w.units[0].rounds[1].request_id == "s_turn_7"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(
            GOOD + _line([{"index": 0, "input_tokens": 5, "output_tokens": 1, "pre_gap_ms": 0}]),
            2,
            "cached_tokens",
            id="missing-field",
        ),
        pytest.param(GOOD + '{"session_id": "x"}\n', 2, "turns", id="missing-turns"),
        pytest.param(
            GOOD + _line([_turn(inp="100")]), 2, "input_tokens must be an integer", id="wrong-type"
        ),
        pytest.param(_line([_turn(out=-1)]), 1, "output_tokens must be >= 1", id="negative"),
        pytest.param(_line([_turn(gap=float("nan"))]), 1, "invalid JSON", id="nan-gap"),
        pytest.param(
            _line([_turn(inp=100, cached=150)]),
            1,
            "cached_tokens 150 > input_tokens",
            id="cached-exceeds-input",
        ),
        pytest.param(_line([_turn(0), _turn(0)]), 1, "does not increase", id="index-repeats"),
        pytest.param(_line([]), 1, "non-empty list", id="no-turns"),
        pytest.param(
            _line([_turn()], system_prompt=5),
            1,
            "system_prompt must be a string",
            id="system-prompt-type",
        ),
        pytest.param(
            _line([_turn()], sid=None), 1, "session_id must be a string", id="null-session-id"
        ),
        pytest.param(GOOD + GOOD, 2, "duplicate session_id", id="duplicate-session"),
        pytest.param(GOOD + GOOD[:40] + "\n", 2, "invalid JSON", id="truncated-line"),
        pytest.param("", 0, "empty", id="empty-file"),
        pytest.param(b"PK\x03\x04\x00\x00zip", 1, "a zip archive", id="binary"),
    ],
)
def test_bad_input_is_one_trace_format_error(tmp_path, text, line, words):
    err = trace_error(_write(tmp_path, text), "abench")
    assert err.line == line and words in err.rule


def test_raw_line_separators_inside_strings_do_not_split_lines(tmp_path):
    # json.dumps(ensure_ascii=False) writes U+2028 / U+0085 raw; they are not line breaks
    text = _line([_turn(assistant_text="a\u2028b\x85c")], sid="x").replace("\\u2028", "\u2028")
    text = text.replace("\\u0085", "\x85")
    assert "\u2028" in text
    bad = _line([_turn(out=0)], sid="y")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(_write(tmp_path, text + bad), fmt="abench")
    assert exc.value.line == 2  # line numbers count "\n" only
    w = load_trace(_write(tmp_path, text), fmt="abench")
    assert w.units[0].unit_id == "x"
