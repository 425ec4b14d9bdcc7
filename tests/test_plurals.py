"""Counts in config and trace messages are worded in their number ("1 column",
"2 columns"), not "column(s)" (``workbench.plurals``, a base-layer module every layer
may import; ``storage.rundir`` had a copy of it)."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.errors import ConfigError, TraceFormatError
from workbench.plurals import counted, noun
from workbench.traces.independent import read_independent


def test_noun_and_counted():
    assert [counted(n, "line") for n in (0, 1, 2)] == ["0 lines", "1 line", "2 lines"]
    assert counted(True, "line") == "True lines" and counted("?", "line") == "? lines"
    assert noun(1, "match", "matches") == "match" and noun(3, "match", "matches") == "matches"


@pytest.mark.parametrize(("keys", "said"), [
    ({"bogus": 1}, "unknown config key ['bogus']"),
    ({"bogus": 1, "wrong": 2}, "unknown config keys ['bogus', 'wrong']"),
])
def test_unknown_config_keys_are_counted(keys, said):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"trace": "t.csv", **keys})
    assert said in str(info.value) and "(s)" not in str(info.value)


@pytest.mark.parametrize(("header", "said"), [
    ("id,arrival_time,input_len", "missing column: output_len"),
    ("id,arrival_time", "missing columns: input_len, output_len"),
    ("id,arrival_time,input_len,output_len,x", "unknown column x;"),
    ("id,arrival_time,input_len,output_len,x,y", "unknown columns x, y;"),
])
def test_trace_columns_are_counted(tmp_path, header, said):
    f = tmp_path / "t.csv"
    f.write_text(header + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_independent(f)
    assert said in str(info.value) and "(s)" not in str(info.value)
