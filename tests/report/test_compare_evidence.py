"""Compare calls no change significant on fewer requests than its percentile needs
(docs/metrics.md, "Evidence"; "Compare"): two virtual-time runs of the bundled Mooncake
slice, 2 requests against 19, and 40 against 40."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli import main
from workbench.data import path as data_path
from workbench.report import compare

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def _run(tmp: Path, run_id: str, items: int, *extra: str) -> str:
    assert main(["simulate", "--trace", MOONCAKE, "--max-items", str(items), "-o", str(tmp),
                 "--run-id", run_id, *extra]) == 0
    return str(tmp / run_id)


def test_two_requests_cannot_make_a_change_significant(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    runs = compare.load_runs([_run(tmp_path, "two", 2), _run(tmp_path, "many", 19)],
                             ["two", "many"])
    capsys.readouterr()
    changes = compare.change_table(runs, n_boot=500)
    for _, row in changes.iterrows():
        assert row["significant"] is None, row.to_dict()  # undecided, neither way
        assert row["n baseline"] == 2 and row["n run"] == 19
        # one trace, but other requests (sessions of one each): nothing to pair
        assert row["design"] == "independent: other sessions (2 and 19, 2 shared)"
    line = compare.change_line("many", changes)
    assert line.startswith("TTFT p50 ")
    assert "too few requests (2 and 19 ok; a p50 needs 5 in each)" in line
    assert "significant" not in line
    # the CLI's compare report prints the same headline
    assert main(["report", runs["two"].run_dir, runs["many"].run_dir, "-o",
                 str(tmp_path / "reports")]) == 0
    assert "a p90 needs 29 in each" in capsys.readouterr().out


def test_enough_requests_decide_as_before(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", 40)
    slow = _run(tmp_path, "slow", 40, "--engine", "request_overhead_ms=5000")
    changes = compare.change_table(compare.load_runs([base, slow], ["base", "slow"]),
                                   n_boot=500)
    ttft = changes[changes["metric"] == "TTFT (ms)"]
    assert list(ttft["significant"]) == [True, True]
    # Mooncake's sessions are single requests: resampled by request, and paired (the
    # same 40 requests in both runs)
    assert set(changes["resampled"]) == {"requests"} and set(changes["design"]) == {"paired"}
    assert compare.compare_headline(compare.load_runs([base, slow], ["base", "slow"]),
                                    changes).lines[-1].startswith(
        "  slow vs base (intervals by request, paired): TTFT p50 +")
