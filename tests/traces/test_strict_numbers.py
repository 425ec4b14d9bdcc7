"""QA: text integers are integral in decimal, not only after rounding to a float.

Found by the independent check: ``4.9999999999999999`` (and ``1.00000000000000001e3``)
were accepted as token counts 5 and 1000, because ``float()`` rounds them to
integral values; docs/trace-bounds.md says an integer has an integral value.
"""

import pytest

from workbench.errors import TraceFormatError
from workbench.traces.load import load_trace

HEADER = "id,arrival_time,input_len,output_len\n"


@pytest.mark.parametrize("text", ["4.9999999999999999", "1.00000000000000001e3",
                                  "5.0000000000000001"])
def test_a_fraction_that_rounds_to_an_integer_is_not_an_integer(tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + f"a,0,{text},4\n")
    with pytest.raises(TraceFormatError, match="input_len must be an integer") as err:
        load_trace(path)
    assert err.value.line == 2


@pytest.mark.parametrize(("text", "value"), [("5.0", 5), ("5e0", 5), ("1.5e1", 15), ("+7", 7),
                                             ("-0", 0), (" 12 ", 12), ("1.000e3", 1000)])
def test_integral_spellings_still_load(tmp_path, text, value):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + f"a,0,{text},4\n" if value else HEADER + f"a,0,3,4\nb,{text},3,4\n")
    w = load_trace(path)
    got = w.units[0].rounds[0].input_len if value else w.units[-1].arrival_ms
    assert got == value


TRACELAB = "tracelab/round_trace.sanitized.jsonl"


@pytest.mark.parametrize(("field", "value"), [
    ("output_tokens", "-0"), ("prefix_tokens", "+5"), ("newly_append_tokens", "12"),
    ("tool_wall_latency_ms", "5"),
])
def test_tracelab_numbers_are_json_numbers(tmp_path, field, value):
    """docs/trace-bounds.md: JSON formats take JSON numbers, only Dynamo tolerates strings;
    the TraceLab reader took ``"output_tokens": "-0"`` and ``"tool_wall_latency_ms": "5"``."""
    import json

    from workbench.data import path as data_path

    rows = [json.loads(x) for x in data_path(TRACELAB).read_text().splitlines() if x.strip()]
    row = rows[2]
    if field == "tool_wall_latency_ms":
        row["tools"] = [{"tool_wall_latency_ms": value}]
    else:
        row[field] = value
        row.pop("input_tokens_total", None)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceFormatError, match=f"{field} must be") as err:
        load_trace(path)
    assert err.value.line == 3
