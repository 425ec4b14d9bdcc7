"""The arrival span: stats, --dry-run and the manifest state it and warn past a day;
tracegen from TraceLab JSONL keeps the reader's origin (docs/arrival.md)."""

from __future__ import annotations

import json

import pytest

from workbench.arrival.schedule import ARRIVAL_SPAN_WARN_MS, arrival_span
from workbench.cli import main as cli_main
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run
from workbench.traces.load import load_trace
from workbench.workloads.materialize import tracegen

TRACELAB = str(data_path("tracelab/round_trace.sanitized.jsonl"))
SPAN_MS = 6_204_860_823.0  # the bundled TraceLab example: its two sessions 71.8 days apart


def test_span_and_warning_past_a_day():
    assert arrival_span([5.0, 0.0]) == {"arrival_span_ms": 5.0, "arrival_span_warning": None}
    assert arrival_span([])["arrival_span_ms"] == 0.0
    assert arrival_span([0.0, ARRIVAL_SPAN_WARN_MS])["arrival_span_warning"] is None
    msg = arrival_span([0.0, 2.5 * ARRIVAL_SPAN_WARN_MS])["arrival_span_warning"]
    assert "2.5 days" in msg and "--rate" in msg and "saturated" in msg


def test_stats_states_the_span_and_warns(capsys):
    assert cli_main(["stats", TRACELAB]) == 0
    out = capsys.readouterr().out
    assert "6,204,860,823" in out and "warning: arrivals span 71.8 days" in out
    # stats replays nothing: its advice names the command whose flags it gives
    assert "when replaying it, rescale the arrivals with replay --rate R" in out, out
    assert cli_main(["stats", TRACELAB, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["arrival_span_ms"] == SPAN_MS and "71.8 days" in summary[
        "arrival_span_warning"]
    assert cli_main(["stats", str(data_path("tracelab/multi_session_example.csv"))]) == 0
    assert "warning" not in capsys.readouterr().out


def test_dry_run_states_the_span_and_warns(capsys, caplog):
    assert cli_main(["replay", "--trace", TRACELAB, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["arrival_span_ms"] == SPAN_MS and "--rate" in plan["arrival_span_warning"]
    assert "arrivals span 71.8 days" in caplog.text  # the CLI logs warnings to stderr
    caplog.clear()
    # rescaled or saturated: the span the replay will really take, no warning
    assert cli_main(["replay", "--trace", TRACELAB, "--dry-run", "--rate", "2"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["arrival_span_ms"] == pytest.approx(500.0)
    assert plan["arrival_span_warning"] is None and "arrivals span" not in caplog.text
    assert cli_main(["replay", "--trace", TRACELAB, "--dry-run", "--arrival", "saturated"]) == 0
    assert json.loads(capsys.readouterr().out)["arrival_span_ms"] == 0.0


def test_the_manifest_states_the_span(tmp_path):
    cfg = RunConfig.from_dict({"trace": TRACELAB, "out_dir": str(tmp_path), "dry_run": True})
    result = run(cfg)
    assert result.manifest.plan["arrival_span_ms"] == SPAN_MS
    assert "71.8 days" in result.manifest.plan["arrival_span_warning"]


def test_tracegen_from_tracelab_records_the_readers_origin(tmp_path):
    reader_origin = load_trace(TRACELAB).meta["arrival_origin_ms"]
    assert reader_origin > 1.0e12  # epoch ms
    res = tracegen(TRACELAB, tmp_path / "c.csv", policy="trace-reported")
    assert res.manifest["parameters"]["arrival_origin_ms"] == reader_origin
    # the first emitted session still arrives at 0, the span is kept
    arrivals = sorted(u.arrival_ms for u in res.workload.units)
    assert arrivals[0] == 0.0 and arrivals[-1] == pytest.approx(SPAN_MS)
    # a session selection that drops the earliest: the origin moves with it
    one = tracegen(TRACELAB, tmp_path / "one.csv", policy="trace-reported", max_sessions=1)
    first = load_trace(TRACELAB).units[0]
    assert one.manifest["parameters"]["arrival_origin_ms"] == reader_origin + first.arrival_ms
