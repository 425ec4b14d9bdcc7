"""``cut_ints``: the compiled kernel (workbench/kernels.c) and its Python twin
(``columnar.cut_ints_py``, the reference) find the same token times array of a record
line and read the same values, or both decline it (docs/virtual-time.md, "The conversion
reads a line once")."""

import random

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.kernels import native
from workbench.storage import columnar

KEY = columnar.TIMES_KEY
pytestmark = pytest.mark.skipif(native is None or not hasattr(native, "cut_ints"),
                                reason="the compiled kernels are not built")  # fmt: skip

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _line(times: list[int], extra: bytes = b"") -> bytes:
    return orjson.dumps({"request_id": "q", "token_times_ns": times, "token_counts": [1],
                         "extra": {"h": [2**64 - 1]}}) + extra  # fmt: skip


def _both(line: bytes, key: bytes = KEY):
    got, want = native.cut_ints(line, key), columnar.cut_ints_py(line, key)
    assert got == want, line[:200]
    return got


@settings(max_examples=300, deadline=None)
@given(st.lists(INT64, max_size=40))
def test_orjson_written_times_are_read_as_they_were(times):
    line = _line(times)
    start, end, values = _both(line)
    assert np.frombuffer(values, dtype=np.int64).tolist() == times
    assert line[start:end] == orjson.dumps(times)[1:-1]


#: texts in the array's place that orjson never writes for int64 values, and lines where
#: the member is not surely the one
ODD = [
    b"01", b"-0", b"1,,2", b",1", b"1,", b"-", b"--1", b"1-2", b" 1", b"1 ", b"+1", b"1.5",
    b"1e3", b"9223372036854775808", b"-9223372036854775809", b"99999999999999999999",
    b"18446744073709551615", b"[1]", b'"1"', b"null", b"1,2,3,a", b"00", b"0,-0",
]  # fmt: skip


@pytest.mark.parametrize("text", ODD)
def test_text_not_as_orjson_writes_it_is_declined_both_ways(text):
    line = _line([5]).replace(KEY + b"5", KEY + text, 1)
    assert _both(line) is None


@pytest.mark.parametrize("text", [b"", b"0", b"-9223372036854775808", b"9223372036854775807",
                                  b"-1,0,1", b"1234567890123456789"])  # fmt: skip
def test_edges_orjson_writes_are_taken(text):
    line = _line([5]).replace(KEY + b"5", KEY + text, 1)
    _, _, values = _both(line)
    want = [int(x) for x in text.split(b",")] if text else []
    assert np.frombuffer(values, dtype=np.int64).tolist() == want


@pytest.mark.parametrize("line", [
    _line([1, 2]).replace(b'"request_id"', b'"req\\u0075est_id"'),  # an escape before
    _line([1, 2]).replace(b'"h"', b'"\\u0068"'),  # an escape after
    _line([1, 2]).replace(b'"h":', b'"token_times_ns":[3],"h":'),  # the key again, nested
    _line([1, 2]).replace(KEY + b"1,2]", KEY + b"1,2"),  # no closing bracket before the end
    b'{"token_times_ns":[1,2', b"", KEY, b'{"a":1}', _line([1]) + KEY + b"2]",
])  # fmt: skip
def test_lines_where_the_member_is_not_surely_the_one_are_declined(line):
    assert _both(line) is None


def test_another_key_and_random_bytes_agree():
    rng = random.Random(44)
    alphabet = b'0123456789,-]["\\u ta'
    for _ in range(3000):
        body = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        _both(b'{"x":1,' + KEY + body + b',"y":2}')
        _both(b'{"c":[' + body + b"]}", b'"c":[')
