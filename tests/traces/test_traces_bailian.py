"""Bailian usage traces: detected as their own format (not Mooncake), seconds read as
seconds, turns chained by ``parent_chat_id``; unknown fields named in a warning."""

import logging

import pytest
from public_data import FIXTURES

from workbench.errors import TraceFormatError
from workbench.traces.load import detect_format, load_trace

CHAINS = FIXTURES / "bailian_chains.jsonl"


def test_detected_as_bailian_and_span_in_seconds():
    assert detect_format(CHAINS) == "bailian"
    w = load_trace(CHAINS)
    assert w.fmt == "bailian" and w.block_size == 16
    # 61.114 s .. 65.214 s: a 4.1 s span (Mooncake's reading would be 4.1 ms)
    arrivals = [u.arrival_ms for u in w.units]
    assert arrivals == [pytest.approx(61114.0), pytest.approx(61500.0)]
    chain = w.units[0]
    assert chain.unit_id == "159" and chain.is_session
    assert [r.request_id for r in chain.rounds] == ["159", "160", "161"]
    waits = [r.tool_wait_after_ms for r in chain.rounds]
    assert waits == [pytest.approx(1386.0), pytest.approx(2714.0), 0.0]
    assert chain.arrival_ms + sum(waits) - 61114.0 == pytest.approx(4100.0)
    # the prefix: leading hash ids seen before, 16 tokens each, capped at the prompt
    assert [(r.prefix_len, r.input_len) for r in chain.rounds] == [(0, 40), (48, 12), (64, 6)]
    single = w.units[1]
    assert single.kind == "independent" and single.rounds[0].prefix_len == 16


def test_unknown_field_is_a_warning_naming_it(tmp_path, caplog):
    p = tmp_path / "b.jsonl"
    p.write_text('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 4, '
                 '"output_length": 2, "priority": 3}\n')
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert w.meta["unknown_fields"] == ["priority"]
    assert "priority (line 1)" in caplog.text


def test_mooncake_names_unknown_fields_and_refuses_bailian_ones(tmp_path, caplog):
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1], '
                 '"extra": 1}\n')
    with caplog.at_level(logging.WARNING):
        assert load_trace(p).meta["unknown_fields"] == ["extra"]
    assert "extra (line 1)" in caplog.text
    q = tmp_path / "forced.jsonl"
    q.write_text('{"timestamp": 1, "input_length": 4, "output_length": 2, "hash_ids": [1], '
                 '"parent_chat_id": 7}\n')
    with pytest.raises(TraceFormatError, match=r":1: field .parent_chat_id.*bailian"):
        load_trace(q, "mooncake")


def test_chain_loop_and_duplicate_are_errors_with_line(tmp_path):
    row = '{{"chat_id": {}, "parent_chat_id": {}, "timestamp": 1, "input_length": 4, ' \
          '"output_length": 2}}\n'
    p = tmp_path / "loop.jsonl"
    p.write_text(row.format(1, 2) + row.format(2, 1))
    with pytest.raises(TraceFormatError, match=r":1: .*loops"):
        load_trace(p)
    p.write_text(row.format(1, -1) + row.format(1, -1))
    with pytest.raises(TraceFormatError, match=":2: duplicate chat_id"):
        load_trace(p)


def test_dangling_parent_starts_its_own_conversation(tmp_path, caplog):
    p = tmp_path / "slice.jsonl"
    p.write_text('{"chat_id": 5, "parent_chat_id": 4, "timestamp": 2, "input_length": 4, '
                 '"output_length": 2}\n')
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert w.meta["dangling_parents"] == 1 and w.units[0].unit_id == "5"
    assert "line 1" in caplog.text


def test_prefixes_follow_run_order_not_file_order(tmp_path):
    # the child (line 1) shares its parent's timestamp but comes first in the file; and an
    # unrelated chat at 1 s (line 3) sends block 7 before the parent's chat at 2 s does.
    # Run order (time, parents first): 3, 1, 2 — so the parent's prompt finds block 7
    # cached, and the child finds both of its parent's blocks (file order gave it 0).
    row = ('{{"chat_id": {}, "parent_chat_id": {}, "timestamp": {}, "input_length": {}, '
           '"output_length": 2, "hash_ids": {}}}\n')
    p = tmp_path / "order.jsonl"
    p.write_text(row.format(2, 1, 2, 48, [7, 8, 9]) + row.format(1, -1, 2, 32, [7, 8])
                 + row.format(3, -1, 1, 16, [7]))
    w = load_trace(p)
    rounds = {r.request_id: r for u in w.units for r in u.rounds}
    assert rounds["3"].prefix_len == 0
    assert rounds["1"].prefix_len == 16
    assert rounds["2"].prefix_len == 32
