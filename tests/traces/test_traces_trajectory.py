"""batchbench v1 trajectory manifest reader: growth rule, resets, strictness.

Rules: docs/trace-formats.md.
"""

import json
from pathlib import Path

import pytest
from public_data import needs, public
from trace_files import trace_error, write_trace

from workbench.traces.load import load_trace

PUBLIC = public("batchbench/trajectories_v1.jsonl")


def _line(requests, **top):
    obj = {"schema_version": 1, "trajectory_id": "t", "requests": requests}
    obj.update(top)
    return json.dumps(obj) + "\n"


GOOD = _line([{"prompt_tokens": 100, "output_tokens": 10}])


def _write(tmp_path: Path, text: str | bytes) -> Path:
    return write_trace(tmp_path, text, "plans.jsonl")


@needs(PUBLIC)
def test_public_example_growth_and_reset():
    w = load_trace(PUBLIC)
    assert w.fmt == "trajectory"
    assert [u.unit_id for u in w.units] == ["fixer-a", "reviewer-b", "compactor-c"]
    assert all(u.is_session and u.arrival_ms == 0.0 for u in w.units)
    fixer = w.units[0].rounds
    # prefix of k+1 = prompt_k + output_k; input = next prompt - that
    assert [(r.prefix_len, r.input_len) for r in fixer] == [(0, 3072), (3168, 432), (3760, 464)]
    assert [r.tool_wait_after_ms for r in fixer] == [0.0, 40.0, 0.0]
    assert [r.prompt_len for r in fixer] == [3072, 3600, 4224]
    compactor = w.units[2].rounds
    assert [r.reset_before for r in compactor] == [False, False, True]
    assert (compactor[2].prefix_len, compactor[2].input_len) == (0, 900)
    assert w.n_rounds == 8
    assert fixer[1].request_id == "fixer-a_request_1" and fixer[1].round_idx == 1


def test_zero_growth_is_allowed_and_reset_on_first_request_is_harmless(tmp_path):
    reqs = [
        {"prompt_tokens": 100, "output_tokens": 10, "reset_before": True},
        {"prompt_tokens": 110, "output_tokens": 5, "delay_after_ms": 2.5},
    ]
    w = load_trace(_write(tmp_path, _line(reqs)), fmt="trajectory")
    r0, r1 = w.units[0].rounds
    assert (r0.prefix_len, r0.input_len, r0.reset_before) == (0, 100, True)
    assert (r1.prefix_len, r1.input_len, r1.tool_wait_after_ms) == (110, 0, 2.5)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(
            GOOD + _line([{"prompt_tokens": 1, "output_tokens": 1}], extra=1),
            2,
            "unknown field extra",
            id="unknown-top-field",
        ),
        pytest.param(
            GOOD
            + _line([{"prompt_tokens": 1, "output_tokens": 1, "blocks": []}], trajectory_id="v"),
            2,
            "unknown field blocks in requests[0]",
            id="unknown-request-field",
        ),
        pytest.param(
            _line([{"prompt_tokens": 1}]), 1, "missing field output_tokens", id="missing-field"
        ),
        pytest.param(
            '{"schema_version": 1, "requests": []}\n', 1, "trajectory_id", id="missing-top-field"
        ),
        pytest.param(
            _line([{"prompt_tokens": "100", "output_tokens": 1}]),
            1,
            "prompt_tokens must be an integer",
            id="wrong-type",
        ),
        pytest.param(
            _line([{"prompt_tokens": -5, "output_tokens": 1}]),
            1,
            "must be >= 1",
            id="negative-length",
        ),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1.5}]),
            1,
            "output_tokens must be an integer",
            id="fractional-length",
        ),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1, "reset_before": 1}]),
            1,
            "reset_before must be true or false",
            id="reset-not-bool",
        ),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1, "delay_after_ms": -1}]),
            1,
            "delay_after_ms must be >= 0",
            id="negative-delay",
        ),
        pytest.param(
            GOOD
            + _line(
                [
                    {"prompt_tokens": 3000, "output_tokens": 100},
                    {"prompt_tokens": 3050, "output_tokens": 10},
                ],
                trajectory_id="a",
            ),
            2,
            "negative growth",
            id="negative-growth-without-reset",
        ),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1}], schema_version=2),
            1,
            "schema_version must be 1",
            id="schema-v2",
        ),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1}], schema_version=True),
            1,
            "schema_version must be 1",
            id="schema-bool",
        ),
        pytest.param(_line([]), 1, "non-empty list", id="no-requests"),
        pytest.param(_line([5]), 1, "requests[0] must be an object", id="request-not-object"),
        pytest.param(
            _line([{"prompt_tokens": 5, "output_tokens": 1}], trajectory_id=""),
            1,
            "trajectory_id must be a non-empty string",
            id="empty-id",
        ),
        pytest.param(GOOD + GOOD, 2, "duplicate trajectory_id", id="duplicate-id"),
        pytest.param(GOOD + GOOD[:25] + "\n", 2, "invalid JSON", id="truncated-line"),
        pytest.param("\n \n", 0, "empty", id="empty-file"),
        pytest.param(b"\x00\x01\x02\xff", 1, "binary", id="binary"),
    ],
)
def test_bad_input_is_one_trace_format_error(tmp_path, text, line, words):
    err = trace_error(_write(tmp_path, text), "trajectory")
    assert err.line == line and words in err.rule
