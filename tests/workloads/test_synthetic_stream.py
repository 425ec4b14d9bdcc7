"""The streamed path of a synthetic agentic run (issue 28, docs/virtual-time.md, "Streamed
runs"): sessions drawn a block at a time and planned when admitted give the run the
materialised workload gives, and what the run holds does not grow with its sessions."""

from __future__ import annotations

import dataclasses
import gc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench.executors.virtual import simulate
from workbench.records import RequestRecord, Round, Unit
from workbench.replay.plan import PlanStream, RoundPlan, UnitPlan
from workbench.replay.rounds import UnitRun
from workbench.replay.session import RecordSinks
from workbench.report.canonical import canonical_report, report_digest
from workbench.sim.handles import EngineRequest
from workbench.sim.scheduler import Sequence as EngineSequence
from workbench.workloads import synthetic
from workbench.workloads.synthetic import parse_synthetic, synthetic_stream, synthetic_workload
from workbench.workloads.trace_stats import trace_stats

SPECS = [
    "synthetic:sessions=300,rounds=uniform:2..20,input=lognormal:600,0.8,output=fixed:100,"
    "tool_wait=uniform:100..5000",
    # every column drawn (first input, output and waits from a distribution, compactions)
    "synthetic:sessions=257,rounds=uniform:1..9,input=lognormal:2000,1.0,"
    "first_input=uniform:10..900,output=lognormal:300,1,tool_wait=exponential:300,"
    "compaction=0.1",
    "synthetic:sessions=5,rounds=fixed:3,input=normal:50,10,output=uniform:1..9,tool_wait=0",
]


@pytest.mark.parametrize("text", SPECS)
@pytest.mark.parametrize("seed", [0, 11])
def test_streamed_sessions_are_the_materialised_ones(
    text: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session i drawn by the stream (blocks of 7 sessions here, so every column is drawn
    in many pieces) is synthetic_workload's unit i, the generator ends in the same state,
    and the totals the stream counts without building a unit are the units' own."""
    monkeypatch.setattr(synthetic, "STREAM_BLOCK", 7)
    spec = parse_synthetic(text)
    r1, r2 = np.random.default_rng(seed), np.random.default_rng(seed)
    whole, streamed = synthetic_workload(spec, r1), synthetic_stream(spec, r2)
    assert r1.bit_generator.state == r2.bit_generator.state
    assert streamed.streamed and not whole.streamed
    assert tuple(streamed.units) == whole.units
    assert tuple(streamed.units) == whole.units  # a second pass starts over
    assert streamed.meta == whole.meta
    units = streamed.units
    n = len(whole.units)
    for i in (n - 1, 0, n // 2, n // 2, -1):  # backwards, forwards, repeated, from the end
        assert units[i] == whole.units[i]
    assert units[1:4] == whole.units[1:4] and units[::-2] == whole.units[::-2]
    with pytest.raises(IndexError):
        units[n]
    assert streamed.n_rounds == whole.n_rounds
    rounds = list(whole.rounds())
    assert units.prefix_tokens == sum(r.prefix_len for r in rounds)
    assert units.prompt_tokens == sum(r.prefix_len + r.input_len for r in rounds)
    assert units.output_tokens == sum(r.output_len for r in rounds)
    assert not streamed.has_hash_ids and streamed.has_sessions


def test_streamed_ideal_hit_rate_is_trace_stats() -> None:
    """The manifest's ideal prefix hit rate of a streamed workload (from the stream's
    totals) is trace_stats' over the materialised one, to the last bit."""
    from workbench.context.policy import effective_policy
    from workbench.workloads.trace_stats import ideal_prefix_hit_rate

    for text in SPECS:
        spec = parse_synthetic(text)
        whole = synthetic_workload(spec, np.random.default_rng(3))
        streamed = synthetic_stream(spec, np.random.default_rng(3))
        ideal = ideal_prefix_hit_rate(streamed, effective_policy(streamed))
        assert ideal == trace_stats(whole)["ideal_prefix_hit_rate"]


def _run(tmp_path: Path, name: str, workload: Any, arrival: dict[str, Any],
         blocks: int = 600, **executor: Any) -> Any:  # fmt: skip
    trace = tmp_path / "synthetic.jsonl"
    trace.write_text("")
    cfg = {"trace": {"path": str(trace)}, "out_dir": str(tmp_path), "run_id": name,
           "arrival": arrival, "executor": executor}
    engine = {"workers": 3, "router": "prefix-aware", "num_blocks": blocks}
    return simulate(cfg, engine=engine,
                    workload=dataclasses.replace(workload, source=str(trace)))


@pytest.mark.parametrize("arrival", [
    {"mode": "saturated", "max_concurrency": 6},
    {"mode": "poisson", "rate": 3.0, "max_concurrency": 6},
    {"mode": "saturated", "max_concurrency": 4, "warmup": 3},  # the warm-up takes a slice
])  # fmt: skip
def test_streamed_run_is_the_materialised_run(
    tmp_path: Path, arrival: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed loop (with a warm-up) and open-loop Poisson, records on disk: the same seed
    streamed and materialised gives the same canonical report (records, lifecycle,
    summary, manifest with its plan totals and ideal hit rate), and the streamed run's
    plan is built unit by unit (a PlanStream)."""
    monkeypatch.setattr(synthetic, "STREAM_BLOCK", 5)
    spec = parse_synthetic(SPECS[1].replace("sessions=257", "sessions=40"))
    plans: list[Any] = []
    real = PlanStream.__init__

    def seen(self: PlanStream, *a: Any, **k: Any) -> None:
        plans.append(self)
        real(self, *a, **k)

    monkeypatch.setattr(PlanStream, "__init__", seen)
    digests = []
    for name, draw in (("whole", synthetic_workload), ("streamed", synthetic_stream)):
        wl = draw(spec, np.random.default_rng(5))
        result = _run(tmp_path, name, wl, arrival, 3000, keep_records=False)
        assert result.manifest.status == "completed"
        assert result.manifest.completion["recorded_rounds"] == wl.n_rounds
        digests.append(report_digest(canonical_report(result)))
    assert digests[0] == digests[1]
    assert len(plans) == 1  # the streamed run's plan only


LIVE_TYPES = (EngineSequence, EngineRequest, RequestRecord, UnitRun, UnitPlan, RoundPlan,
              Unit, Round)


def _live() -> Counter[str]:
    """Objects of the run's per-request and per-session types alive now (garbage not yet
    collected included: nothing here runs the collector)."""
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, LIVE_TYPES))


def _peak_live(tmp_path: Path, sessions: int, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The most objects of each type alive at any of the run's record ends."""
    spec = parse_synthetic(f"synthetic:sessions={sessions},rounds=uniform:2..8,"
                           "input=lognormal:300,0.8,output=fixed:20,tool_wait=uniform:10..500")
    peak: Counter[str] = Counter()
    real = RecordSinks.on_record
    gc.collect()  # what earlier tests left is counted out
    base = _live()

    def watched(self: RecordSinks, rec: RequestRecord) -> None:
        real(self, rec)
        if self.done % 50 == 0:
            for k, v in _live().items():
                peak[k] = max(peak[k], v - base[k])

    monkeypatch.setattr(RecordSinks, "on_record", watched)
    wl = synthetic_stream(spec, np.random.default_rng(2))
    result = _run(tmp_path, f"n{sessions}", wl, {"mode": "saturated", "max_concurrency": 4},
                  keep_records=False, block_hashes=False)
    assert result.manifest.completion["recorded_rounds"] == wl.n_rounds >= 2 * sessions
    assert result.records == [] and result.lifecycle == []
    return peak


def test_streamed_run_holds_nothing_per_finished_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records on disk, the workload streamed (blocks of 8 sessions): at every 50th
    record end, the engine's sequences and handles, the records, the units' runs and
    plans, the units and rounds alive are bounded by the 4 active sessions (and the
    stream's block), not by the requests done, and a run 4 times longer holds no
    more: finished requests are freed when they end, by reference counting (a
    sequence and its handle referred to each other, and waited for the rare cyclic
    collections of a virtual run)."""
    monkeypatch.setattr(synthetic, "STREAM_BLOCK", 8)
    small = _peak_live(tmp_path, 40, monkeypatch)
    large = _peak_live(tmp_path, 160, monkeypatch)
    # 4 sessions of at most 8 rounds in flight, one block of 8 sessions drawn
    bounds = {"Sequence": 8, "EngineRequest": 8, "RequestRecord": 8, "UnitRun": 8,
              "UnitPlan": 8, "RoundPlan": 8 * 8, "Unit": 16, "Round": 16 * 8}
    for name, bound in bounds.items():
        assert large[name] <= bound, (name, large[name], small[name])
        assert large[name] <= small[name] + 4, (name, large[name], small[name])


@pytest.mark.parametrize("arrival", ["rate=4", "arrival=gamma,rate=2,burstiness=0.5"])
def test_a_large_synthetic_trace_is_streamed_with_the_same_units(
    tmp_path: Path, arrival: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--trace synthetic:agentic,...`` (``standard.generate``) stays a stream from
    STREAM_MIN_ROUNDS rounds on: the same units with the same arrivals as the held
    workload, the bounds checked in one pass, ``max_items`` a slice of the stream,
    and a replay of the path itself (config only, as the CLI's ``simulate``) gives
    the held run's canonical report."""
    from workbench.workloads import standard

    text = (f"synthetic:agentic,sessions=30,rounds=uniform:2..6,input=lognormal:400,0.8,"
            f"output=fixed:16,tool_wait=uniform:10..900,seed=4,{arrival}")
    held = standard.load_source(text)
    monkeypatch.setattr(standard, "STREAM_MIN_ROUNDS", 1)
    monkeypatch.setattr(synthetic, "STREAM_BLOCK", 4)
    streamed = standard.load_source(text)
    assert streamed.streamed and not held.streamed
    assert tuple(streamed.units) == tuple(held.units) and streamed.meta == held.meta
    assert len({u.arrival_ms for u in held.units}) > 1

    def run(name: str, max_items: int | None) -> str:
        cfg = {"trace": {"path": text, "max_items": max_items}, "out_dir": str(tmp_path),
               "run_id": name, "arrival": {"mode": "poisson", "rate": 5.0,
                                           "max_concurrency": 5},
               "executor": {"keep_records": False}}
        engine = {"workers": 2, "router": "prefix-aware", "num_blocks": 2000}
        return report_digest(canonical_report(simulate(cfg, engine=engine)))

    streamed_digests = [run("s", None), run("s10", 10)]
    monkeypatch.setattr(standard, "STREAM_MIN_ROUNDS", 10**9)
    assert streamed_digests == [run("h", None), run("h10", 10)]


def test_a_streamed_trace_past_a_bound_names_the_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds pass over a stream names the culprit as the held check does."""
    from workbench.errors import TraceFormatError
    from workbench.workloads import standard

    monkeypatch.setattr(standard, "STREAM_MIN_ROUNDS", 1)
    text = "synthetic:agentic,sessions=3,rounds=fixed:40,input=fixed:400000,output=fixed:1"
    with pytest.raises(TraceFormatError, match="unit '0'"):
        standard.load_source(text)


def test_a_streamed_plan_pickles_to_a_worker_process() -> None:
    """A process or Ray shard is sent its plan pickled (``executors.processes``): a
    streamed plan, even mid-pass, pickles without its pass and gives the same units."""
    import pickle

    from workbench.config import RunConfig
    from workbench.replay.plan import build_plan

    spec = parse_synthetic(SPECS[1])
    wl = synthetic_stream(spec, np.random.default_rng(1))
    cfg = RunConfig.from_dict({"trace": {"path": "synthetic.jsonl"},
                               "arrival": {"mode": "saturated", "max_concurrency": 4}})
    plan = build_plan(cfg, wl)
    assert isinstance(plan.units, PlanStream)
    mid = plan.units[100]  # a pass in progress
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.units[100] == mid and list(copy.units) == list(plan.units)
    assert copy.n_rounds == plan.n_rounds == wl.n_rounds
