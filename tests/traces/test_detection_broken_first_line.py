"""QA: a JSON-lines trace whose first line is broken names that line and the JSON error.

Found by the independent check: a Mooncake, trajectory, abench or Dynamo file whose
first line is truncated or holds ``NaN`` got "cannot tell the trace format; pass
fmt=", while the same damage on line 2 is "line 2: invalid JSON (...)".
"""

import json

import pytest

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace

ROW = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}


@pytest.mark.parametrize("first", [
    json.dumps(ROW)[:-3],                           # truncated
    json.dumps(ROW).replace("0,", "NaN,", 1),       # not JSON
    json.dumps(ROW).replace("10", "1" + "0" * 400),  # an integer orjson cannot hold
])
def test_a_broken_first_json_line_is_named_as_invalid_json(tmp_path, first):
    path = tmp_path / "t.jsonl"
    path.write_text("\n\n" + first + "\n" + json.dumps(ROW) + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert err.value.line == 3
    assert "invalid JSON" in err.value.rule


def test_csv_that_no_reader_takes_still_says_it_cannot_tell(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceFormatError, match="cannot tell the trace format"):
        load_trace(path)
