"""No verdict stronger than its evidence (docs/metrics.md, "Evidence").

A percentile bound "held" on a handful of requests, or a 99 % share "met" by two, is
stated with the count it rests on and the count that would show it at 95 % confidence.
The runs are real: the CLI in virtual time on the embedded engine, a bundled trace or a
small synthetic one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.data import path as data_path
from workbench.errors import ExitCode
from workbench.metrics.distribution import support
from workbench.metrics.slo import SLO
from workbench.report.headline import capacity_brief, capacity_sentence
from workbench.sweeps import load_sweep
from workbench.sweeps.groups import capacities

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))
FEW = "too few requests to show it at 95 % confidence"


@pytest.mark.parametrize(("q", "n"), [(50, 5), (90, 29), (95, 59), (99, 299), (99.9, 2995)])
def test_support_is_the_fewest_values_whose_maximum_bounds_the_percentile(q, n):
    assert support(q) == n
    # the defining property: n values all below the percentile happen with chance
    # (q/100)^n <= 5 %, one fewer not
    assert (q / 100) ** n <= 0.05 < (q / 100) ** (n - 1)


def test_no_count_shows_a_maximum():
    assert support(100) is None
    slo = SLO.parse("ttft_ms:p100<=2000")
    assert slo is not None
    assert slo.evidence(10_000, 10_000) == {"ttft_ms:p100": {"n": 10_000, "needed": None}}


def test_a_run_met_on_two_requests_says_they_are_too_few(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    args = ["simulate", "--trace", MOONCAKE, "--max-items", "2", "--slo", "ttft_ms<=2000",
            "-o", str(tmp_path), "--run-id", "two"]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert ("· SLO met: 2/2 within TTFT ≤ 2 s (too few requests to show 99 % at 95 % "
            "confidence: needs 299) ·") in first
    # a missed SLO needs no such note: one request over the bound shows it
    assert main([*args[:-1], "missed", "--slo", "ttft_ms<=1"]) == 0
    out = capsys.readouterr().out
    assert "SLO missed: 0/2 within TTFT ≤ 1 ms · virtual time" in out


def test_a_run_of_enough_requests_has_no_note(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]):
    trace = "synthetic:random,requests=299,input=fixed:64,output=fixed:4"
    assert main(["simulate", "--trace", trace, "--arrival", "poisson", "--rate", "50",
                 "--slo", "ttft_ms<=60000", "-o", str(tmp_path), "--run-id", "many"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "SLO met: 299/299 within TTFT ≤ 60 s · virtual time" in first
    assert "too few" not in first


def test_a_sweep_point_held_on_three_requests_says_so_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """One point of three requests under a p99 bound: the point's line, the capacity
    sentence, the table's cell and the stored verdict all say the p99 rests on 3 ok
    requests where 299 are needed."""
    assert main(["sweep", "--trace", MOONCAKE, "--max-items", "3", "--virtual",
                 "--over", "rate=1", "--slo", "ttft_ms:p99<=60000", "-o", str(tmp_path),
                 "--sweep-id", "one"]) == 0
    out, err = capsys.readouterr()
    part = "TTFT p99 from 3 ok requests (needs 299)"
    assert f"rate=1: SLO held — {FEW}: {part}" in out + err
    s = load_sweep(tmp_path / "one")
    (point,) = s.points
    assert point["slo"]["thin"] == {"ttft_ms:p99": {"n": 3.0, "needed": 299}}
    text = capacity_sentence(s)
    assert text.startswith("At TTFT p99 ≤ 60 s: capacity at least ")
    assert f"The verdict at 1 req/s rests on {FEW}: {part}." in text
    assert text in out.replace("\n", " ")
    (cap,) = capacities(s)
    assert capacity_brief(cap).endswith("(1 req/s offered; above the range; too few "
                                        "requests to show it)")
    doc = json.loads((tmp_path / "one" / "sweep.json").read_text())
    assert doc["points"][0]["slo"]["ok_requests"] == 3


def test_a_broken_point_needs_no_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["sweep", "--trace", MOONCAKE, "--max-items", "3", "--virtual",
                 "--over", "rate=1", "--slo", "ttft_ms:p99<=1", "-o", str(tmp_path),
                 "--sweep-id", "broken"]) == 0
    out, err = capsys.readouterr()
    assert "rate=1: SLO broken\n" in out + err
    assert "too few" not in out + err


def test_the_prefix_hit_is_compared_with_the_plan_of_the_same_requests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """40 Mooncake requests on a small KV cache: 2 fail, and the 38 that reported a cached
    count were planned to hit 0.051 (the whole plan 0.039). The headline compares the
    0.049 they hit with 0.051, not with 0.039 (which read as "above the plan")."""
    assert main(["simulate", "--trace", MOONCAKE, "--max-items", "40", "--engine",
                 "num_blocks=2000", "-o", str(tmp_path), "--run-id", "small"]) == \
        ExitCode.ERROR_RATE  # 2 of 40 failed: over the default error rate
    first = capsys.readouterr().out.splitlines()[0]
    summary = json.loads((tmp_path / "small" / "summary.json").read_text())
    assert summary["cache_reported_requests"] == 38 and summary["requests"] == 40
    actual = summary["actual_prefix_hit_rate"]
    measured = summary["planned_prefix_hit_rate_measured"]
    assert actual < measured and actual > summary["planned_prefix_hit_rate"]
    assert (f"· prefix hit {actual:.3f} of {measured:.3f} planned for the 38 requests that "
            "reported a cached count ·") in first


def test_the_pareto_sentence_rounds_as_the_tables_and_names_thin_evidence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The point of highest throughput under the SLO held on 3 requests: its sentence
    gives its numbers to 3 significant figures (the package's rounding, ``sig``) and says
    the verdict rests on too few requests."""
    from workbench.report.headline import sig
    from workbench.report.pareto import PER_INSTANCE, PER_USER, best_row, best_sentence

    assert main(["sweep", "--trace", MOONCAKE, "--max-items", "3", "--virtual",
                 "--over", "rate=1", "--slo", "ttft_ms:p99<=60000", "-o", str(tmp_path),
                 "--sweep-id", "one"]) == 0
    out = capsys.readouterr().out
    s = load_sweep(tmp_path / "one")
    row = best_row(s)
    assert row is not None
    text = best_sentence(s)
    assert text == (
        f"Highest throughput under TTFT p99 ≤ 60 s: rate=1 — "
        f"{sig(row[PER_INSTANCE])} output tokens/s per instance at {sig(row[PER_USER])} "
        f"tokens/s per user. Its verdict rests on {FEW}: TTFT p99 from 3 ok requests "
        "(needs 299).")
    assert text in out


def test_a_run_whose_bound_was_never_measured_is_not_called_missed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """One-token outputs have no TPOT: a TPOT bound was not missed, it was not measured."""
    trace = "synthetic:random,requests=5,output=fixed:1"
    assert main(["simulate", "--trace", trace, "--arrival", "poisson", "--rate", "1",
                 "--slo", "tpot_ms<=50", "-o", str(tmp_path), "--run-id", "one"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert ("· SLO not judged: 0/5 within TPOT ≤ 50 ms, TPOT not measured (no ok request "
            "had a value) ·") in first
    assert "missed" not in first
