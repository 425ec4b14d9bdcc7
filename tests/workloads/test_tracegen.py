"""tracegen: canonical output, manifest, golden policy vectors, arrivals.

Rules: docs/trace-formats.md, docs/context-policy.md, docs/arrival.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from public_data import public

import workbench
from workbench import load_trace
from workbench.cli import main as cli_main
from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.workloads import materialize as tg
from workbench.workloads.materialize import TracegenSpec, tracegen
from workbench.workloads.synthetic import Distribution, parse_synthetic

V2 = public("request-factory/session_rounds_v2_example.csv")
WORKLOAD = public("tracelab/session_workload_example.csv")
MULTI = public("tracelab/multi_session_example.csv")
LARGE = public("tracelab/multi_session_large.csv")
TRACELAB = public("tracelab/round_trace.sanitized.jsonl")
MANIFEST_FIELDS = {
    "schema", "generator", "sessions", "rounds", "total_prompt_tokens", "total_prefix_tokens",
    "total_output_tokens", "planned_prefix_hit_rate", "parameters",
}
PARAMETER_FIELDS = {
    "source_path", "source_schema", "source_sha256", "source_bytes", "context_policy",
    "major_compaction_min_drop_tokens", "major_compaction_min_drop_ratio", "selection_rule",
    "max_sessions", "session_order", "arrival_pattern", "arrival_rate_per_second", "seed",
    "arrival_origin_ms", "folded_prefix_tokens", "folded_rounds", "folded_first_rounds",
    "major_compaction_rounds",
}


def _split(result: tg.TracegenResult) -> list[list[tuple[int, int]]]:
    return [[(r.prefix_len, r.input_len) for r in u.rounds] for u in result.workload.units]


def test_public_api_name_resolves_to_the_function() -> None:
    assert workbench.tracegen is tracegen


def test_v2_example_trace_reported_manifest_totals_equal_row_sums(tmp_path: Path) -> None:
    res = tracegen(V2, tmp_path / "out.csv", policy="trace-reported")
    w = load_trace(res.csv_path)  # auto-detected as canonical, sidecars read
    assert w.fmt == "session-execution-v2"
    m = orjson.loads(res.manifest_path.read_bytes())
    assert m == res.manifest == w.meta["manifest"]
    assert m.keys() >= MANIFEST_FIELDS and m["parameters"].keys() >= PARAMETER_FIELDS
    rounds = list(w.rounds())
    prefix = sum(r.prefix_len for r in rounds)
    prompt = sum(r.prefix_len + r.input_len for r in rounds)
    assert (m["sessions"], m["rounds"]) == (len(w.units), len(rounds)) == (3, 211)
    assert m["total_prompt_tokens"] == prompt
    assert m["total_prefix_tokens"] == prefix
    assert m["total_output_tokens"] == sum(r.output_len for r in rounds)
    assert m["planned_prefix_hit_rate"] == pytest.approx(prefix / prompt)
    p = m["parameters"]
    assert m["schema"] == "session-execution-v2"
    assert p["source_schema"] == "session" and p["source_bytes"] == V2.stat().st_size
    assert p["context_policy"] == "trace-reported" and p["arrival_origin_ms"] == 0.0
    # raw rows keep p + i = P + I per round
    raw = load_trace(V2)
    assert [r.prefix_len + r.input_len for r in raw.rounds()] == [
        r.prefix_len + r.input_len for r in rounds]


def test_plan_sidecar_matches_rows(tmp_path: Path) -> None:
    res = tracegen(V2, tmp_path / "out.csv")
    plan = orjson.loads(res.plan_path.read_bytes())
    rounds = list(res.workload.rounds())
    assert [p["request_id"] for p in plan] == [r.request_id for r in rounds]
    for p, prev, r in zip(plan, [None, *rounds[:-1]], rounds, strict=True):
        expected = prev.request_id if prev is not None and r.round_idx else None
        assert p["predecessor_request_id"] == expected
        assert (p["prefix_len"], p["input_len"], p["output_len"]) == (
            r.prefix_len, r.input_len, r.output_len)
        assert p["tool_wait_after_ms"] == f"{r.tool_wait_after_ms:.6f}"


def test_golden_trace_reported_folds_first_round_prefix(tmp_path: Path) -> None:
    res = tracegen(WORKLOAD, tmp_path / "g.csv", policy="trace-reported")
    rounds = res.workload.units[0].rounds
    assert (rounds[0].prefix_len, rounds[0].input_len) == (0, 18336)  # 12461 + 5875
    # next C = 18336 + 124 = 18460 >= 18333: the reported prefix exists
    assert (rounds[1].prefix_len, rounds[1].input_len) == (18333, 13570)
    p = res.manifest["parameters"]
    assert p["folded_prefix_tokens"] == 12461
    assert (p["folded_rounds"], p["folded_first_rounds"], p["major_compaction_rounds"]) == (1, 1, 0)


def test_golden_prefix_preserving_grows_and_truncates(tmp_path: Path) -> None:
    res = tracegen(MULTI, tmp_path / "m.csv", policy="monotonic")
    assert res.manifest["parameters"]["context_policy"] == "prefix-preserving"
    assert _split(res)[0][:2] == [(0, 512), (576, 128)]  # C=576, T=704 -> (576, 128)
    res = tracegen(WORKLOAD, tmp_path / "w.csv", policy="prefix-preserving")
    # round 9: T = 57378, C after = 57902; round 10 T = 48060 + 9844 = 57904 -> grow
    assert _split(res)[0][10] == (57902, 2)


def _raw_csv(tmp_path: Path, rows: list[tuple[int, int, int]]) -> Path:
    lines = ["session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms"]
    lines += [f"s,{k},{p},{i},{o},0" for k, (p, i, o) in enumerate(rows)]
    path = tmp_path / "raw.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prefix_preserving_major_compaction_and_thresholds(tmp_path: Path) -> None:
    # C after round 0 = 140000; round 1 target 70000: drop 70000 (50 %) -> major compaction
    raw = _raw_csv(tmp_path, [(0, 139000, 1000), (60000, 10000, 10)])
    res = tracegen(raw, tmp_path / "c.csv", policy="prefix-preserving")
    assert _split(res)[0] == [(0, 139000), (0, 70000)]
    assert res.manifest["parameters"]["major_compaction_rounds"] == 1
    res = tracegen(raw, tmp_path / "d.csv", policy="prefix-preserving",
                   major_compaction_min_drop_tokens=80000)
    assert _split(res)[0][1] == (70000, 0)  # now only a truncation
    assert res.manifest["parameters"]["major_compaction_min_drop_tokens"] == 80000
    res = tracegen(raw, tmp_path / "e.csv", policy="trace-reported")
    assert _split(res)[0][1] == (60000, 10000)


def test_source_arrivals_are_rebased_and_recorded(tmp_path: Path) -> None:
    res = tracegen(LARGE, tmp_path / "l.csv", max_sessions=5)
    arrivals = [u.arrival_ms for u in res.workload.units]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert res.manifest["parameters"]["arrival_origin_ms"] == 117.0
    assert arrivals[1] == 393.0 - 117.0
    assert res.manifest["parameters"]["arrival_pattern"] == "source"


def test_selection_then_constant_arrivals(tmp_path: Path) -> None:
    res = tracegen(LARGE, tmp_path / "c.csv", session_order="shuffle", max_sessions=7,
                   arrival="constant", rate=4.0, seed=3)
    units = res.workload.units
    assert [u.arrival_ms for u in units] == [k * 250.0 for k in range(7)]
    order = np.random.default_rng(3).permutation(48)[:7]
    assert [u.unit_id for u in units] == [str(k) for k in order]
    again = tracegen(LARGE, tmp_path / "c2.csv", session_order="shuffle", max_sessions=7,
                     arrival="constant", rate=4.0, seed=3)
    assert again.csv_path.read_bytes() == res.csv_path.read_bytes()


def test_poisson_arrivals_keep_rate_after_capping(tmp_path: Path) -> None:
    res = tracegen(LARGE, tmp_path / "p.csv", max_sessions=40, arrival="poisson", rate=2.0,
                   seed=11)
    arrivals = np.array([u.arrival_ms for u in res.workload.units])
    assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)
    rng = np.random.default_rng(11)
    expected = np.concatenate(([0.0], np.cumsum(rng.exponential(500.0, 39))))
    assert arrivals == pytest.approx(np.round(expected, 6), abs=1e-6)
    p = res.manifest["parameters"]
    assert (p["arrival_pattern"], p["arrival_rate_per_second"], p["seed"]) == ("poisson", 2.0, 11)


def test_tracelab_input_records_tool_wait_choice(tmp_path: Path) -> None:
    res = tracegen(TRACELAB, tmp_path / "t.csv", tool_wait="sum")
    p = res.manifest["parameters"]
    assert (p["source_schema"], p["tool_wait"]) == ("tracelab", "sum")
    assert res.workload.units[0].unit_id.startswith("codex:")  # emitted in arrival order
    assert p["folded_first_rounds"] == 2


def test_canonical_input_is_idempotent(tmp_path: Path) -> None:
    first = tracegen(V2, tmp_path / "a.csv")
    second = tracegen(first.csv_path, tmp_path / "b.csv")
    assert second.workload.units == first.workload.units


def test_non_session_input_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = Round("independent_1", "1", 0, 0.0, 0, 10, 5)
    lone = Workload((Unit("1", "independent", 0.0, (r,)),), "independent")
    monkeypatch.setattr(tg, "load_trace", lambda *a, **k: lone)
    with pytest.raises(ConfigError, match="needs session units"):
        tracegen(MULTI, tmp_path / "o.csv")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"policy": "nope"}, "unknown context policy"), ({"rate": 0.0}, "rate"),
     ({"max_sessions": 0}, "max_sessions"), ({"session_order": "random"}, "session_order"),
     ({"arrival": "bursty"}, "arrival"), ({"tool_wait": "max"}, "tool_wait")],
)
def test_bad_options_are_config_errors(tmp_path: Path, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        tracegen(MULTI, tmp_path / "x.csv", **overrides)


def test_synthetic_syntax_and_generation(tmp_path: Path) -> None:
    text = ("synthetic:sessions=30,rounds=uniform:2..6,input=lognormal:2000,1.0,"
            "output=fixed:200,tool_wait=uniform:100..5000,compaction=0.2")
    spec = parse_synthetic(text)
    assert spec.input == Distribution("lognormal", 2000, 1.0)
    assert spec.rounds == Distribution("uniform", 2, 6) and spec.compaction == 0.2
    res = tracegen(text, tmp_path / "s.csv", seed=5)
    w = res.workload
    assert len(w.units) == 30 and all(2 <= len(u.rounds) <= 6 for u in w.units)
    assert all(r.output_len == 200 for r in w.rounds())
    assert all(u.rounds[-1].tool_wait_after_ms == 0.0 for u in w.units)
    p = res.manifest["parameters"]
    assert p["source_schema"] == "synthetic" and p["arrival_pattern"] == "poisson"
    assert p["synthetic"]["compaction_rounds"] == sum(
        r.prefix_len == 0 for u in w.units for r in u.rounds[1:])
    assert p["folded_prefix_tokens"] == 0  # a synthetic prefix always exists
    # a round reuses its whole conversation unless it compacts
    for u in w.units:
        for a, b in zip(u.rounds, u.rounds[1:], strict=False):
            assert b.prefix_len in (0, a.prefix_len + a.input_len + a.output_len)
    assert tracegen(text, tmp_path / "t.csv", seed=5).csv_path.read_bytes() == (
        res.csv_path.read_bytes())


@pytest.mark.parametrize(
    "text",
    ["synthetic:sessions=0", "synthetic:rounds=uniform:5..2", "synthetic:input=gamma:1",
     "synthetic:colour=blue", "synthetic:compaction=1.5", "synthetic:output=lognormal:0,1",
     "synthetic:junk"],
)
def test_bad_synthetic_descriptions(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="synthetic"):
        tracegen(text, tmp_path / "x.csv")


def test_missing_input_and_nested_output_dir(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file") as info:
        tracegen(tmp_path / "nope.csv", tmp_path / "o.csv")
    assert info.value.line == 0
    res = tracegen(MULTI, tmp_path / "a" / "b" / "o.csv")
    assert res.csv_path.exists() and res.plan_path.parent == tmp_path / "a" / "b"


def test_spec_object_and_overrides(tmp_path: Path) -> None:
    spec = TracegenSpec(policy="monotonic", max_sessions=1)
    res = tracegen(MULTI, tmp_path / "o.csv", spec, max_sessions=2)
    assert res.manifest["sessions"] == 2
    assert res.manifest["parameters"]["context_policy"] == "prefix-preserving"


def test_cli_writes_three_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.csv"
    code = cli_main(["tracegen", str(WORKLOAD), "-o", str(out), "--policy", "monotonic",
                     "--arrival", "constant", "--rate", "2", "--seed", "1"])
    assert code == 0
    assert out.exists() and (tmp_path / "cli.manifest.json").exists()
    assert (tmp_path / "cli.plan.json").exists()
    assert "11 rounds" in capsys.readouterr().out


def test_cli_help_documents_synthetic_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["tracegen", "--help"])
    text = capsys.readouterr().out
    assert "lognormal:MEDIAN,SIGMA" in text and "--max-sessions" in text


def test_cli_reports_bad_input_as_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.csv"
    bad.write_text("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
                   "0,0,0,x,1,0\n")
    assert cli_main(["tracegen", str(bad), "-o", str(tmp_path / "o.csv")]) == 3  # trace error
    assert f"{bad}:2: input_len must be an integer" in capsys.readouterr().err
