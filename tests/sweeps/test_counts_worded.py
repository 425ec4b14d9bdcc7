"""Counts printed with their noun in the number it takes: "1 probe in 1 round", never
"1 probes in 1 rounds" (``workbench.plurals.counted``), in a capacity search's lines and
the sweep headline above them."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli import main
from workbench.commands.sweep import search_lines
from workbench.data import path as data_path
from workbench.plurals import counted

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def test_counted_takes_the_number_of_its_count() -> None:
    assert counted(1, "round") == "1 round"
    assert [counted(n, "probe") for n in (0, 2, 24)] == ["0 probes", "2 probes", "24 probes"]
    assert counted(1, "ok request") == "1 ok request"
    assert counted("?", "round") == "? rounds"  # a count the record lacks


def test_a_search_line_of_one_probe_says_one_probe_in_one_round() -> None:
    line, = search_lines({"axis": "arrival.rate", "tolerance": 1, "status": "below_range",
                          "bracket": [None, 8], "probes": [0], "rounds": 1})
    assert line == ("search of arrival.rate: below_range, bracket [–, 8] (tolerance 1, "
                    "1 probe in 1 round)")


def test_a_capacity_search_broken_at_its_first_probe_prints_singulars(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real search whose first probe breaks the SLO (TTFT p90 <= 10 ms on the Mooncake
    slice, every TTFT above 10 ms): one point, one probe, one round."""
    args = ["sweep", "--trace", MOONCAKE, "--max-items", "10", "--virtual", "-o",
            str(tmp_path), "--sweep-id", "one", "--capacity", "rate", "--lo", "1",
            "--hi", "4", "--tolerance", "1", "--parallel", "1", "--slo", "ttft_ms:p90<=10"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("one: 1 point of arrival.rate 1 · "), out
    assert "(tolerance " in out and ", 1 probe in 1 round)" in out, out
    assert " 1 probes" not in out and " 1 rounds" not in out and "point(s)" not in out
