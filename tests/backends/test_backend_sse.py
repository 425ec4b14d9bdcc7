"""SSE framing: events must come out the same however the byte stream is split."""

from __future__ import annotations

import pytest

from workbench.sse import DONE, SSEDecoder


def decode_all(chunks: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(dec.feed(chunk))
    out.extend(dec.close())
    return out


STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a":1}\n\n'
    b"event: message\r\n"
    b"id: 7\r\n"
    b'data: {"b":\r\n'
    b"data: 2}\r\n"
    b"\r\n"
    b'data:{"c":3}\r\r'
    b"retry: 100\n"
    b"data\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a":1}', b'{"b":\n2}', b'{"c":3}', b"", DONE]


def test_whole_stream():
    assert decode_all([STREAM]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_at_every_position(cut: int):
    assert decode_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED


def test_split_into_single_bytes():
    assert decode_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, 40, 3))
def test_split_at_three_positions(cut: int):
    a, b = cut, cut + 17
    assert decode_all([STREAM[:a], STREAM[a:b], STREAM[b:]]) == EXPECTED


def test_events_complete_as_soon_as_their_blank_line_arrives():
    dec = SSEDecoder()
    assert dec.feed(b'data: {"x":1}\n') == []
    assert dec.feed(b"\n") == [b'{"x":1}']
    assert dec.feed(b"data: [DO") == []
    assert dec.feed(b"NE]\n\ndata: 1\n\ndata: 2\n\n") == [DONE, b"1", b"2"]


def test_final_event_without_blank_line_is_flushed_on_close():
    dec = SSEDecoder()
    assert dec.feed(b"data: 1\n\ndata: last") == [b"1"]
    assert dec.close() == [b"last"]
    assert dec.close() == []


def test_trailing_carriage_return_is_a_line_end_at_close():
    assert decode_all([b"data: x\r"]) == [b"x"]


def test_only_one_leading_space_is_stripped():
    assert decode_all([b"data:  two\n\n"]) == [b" two"]
