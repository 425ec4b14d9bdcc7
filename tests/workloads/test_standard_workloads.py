"""``--trace synthetic:KIND,...``: each kind against its definition, reproducible, recorded.

Statistical checks use fixed seeds; each tolerance is about four standard errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.cli import main
from workbench.errors import ConfigError
from workbench.workloads.standard import PRESETS
from workbench.workloads.standard import load_source as load_trace


def lengths(text: str) -> tuple[np.ndarray, np.ndarray]:
    w = load_trace(text)
    return (np.array([r.input_len for r in w.rounds()]),
            np.array([r.output_len for r in w.rounds()]))


def test_random_fixed_lengths_are_exact() -> None:
    inputs, outputs = lengths("synthetic:random,requests=50,input=fixed:300,output=7")
    assert inputs.tolist() == [300] * 50 and outputs.tolist() == [7] * 50


def test_random_uniform_range_and_mean() -> None:
    inputs, _ = lengths("synthetic:random,requests=20000,input=uniform:100..200,seed=2")
    assert inputs.min() == 100 and inputs.max() == 200  # inclusive integers
    assert inputs.mean() == pytest.approx(150, abs=0.7)  # se = 29/√n = 0.2


@pytest.mark.parametrize(("dist", "mean", "tol"), [
    ("normal:1000,100", 1000, 3),            # se 0.7
    ("exponential:500", 500, 15),            # se 3.5
    ("lognormal:400,0.5", 400 * np.exp(0.125), 6),  # mean e^(μ+σ²/2), se 1.5
])
def test_random_named_distribution_means(dist: str, mean: float, tol: float) -> None:
    inputs, _ = lengths(f"synthetic:random,requests=20000,input={dist}")
    assert inputs.mean() == pytest.approx(mean, abs=tol)
    assert inputs.min() >= 1


def test_random_is_independent_requests_at_a_poisson_rate() -> None:
    w = load_trace("synthetic:random,requests=4000,rate=8,seed=1")
    assert {u.kind for u in w.units} == {"independent"}
    gaps = np.diff([u.arrival_ms for u in w.units]) / 1000
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.07)  # se 1.6 %
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.09)


def test_gamma_arrival_key_sets_the_burstiness() -> None:
    w = load_trace("synthetic:random,requests=8000,rate=2,arrival=gamma,burstiness=0.25")
    gaps = np.diff([u.arrival_ms for u in w.units])
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.12)  # CV 1/√b, se ~3 %


def test_shared_prefix_groups_share_their_system_blocks() -> None:
    w = load_trace("synthetic:shared-prefix,groups=5,prompts=6,system=fixed:100,"
                   "question=fixed:20,block=16,seed=4")
    assert len(w.units) == 30 and w.block_size == 16
    by_group: dict[str, list] = {}
    for u in w.units:
        by_group.setdefault(u.unit_id.split("_")[0], []).append(u.rounds[0])
    assert len(by_group) == 5
    system_ids = []
    for rounds in by_group.values():
        heads = {r.hash_ids[:7] for r in rounds}  # 100 tokens → 7 whole blocks (112)
        assert len(heads) == 1
        system_ids.append(heads.pop())
        # the first of its group reports no prefix, the others the system prompt
        assert [r.prefix_len for r in rounds] == [0] + [112] * 5
        assert {r.prompt_len for r in rounds} == {132}
        tails = [r.hash_ids[7:] for r in rounds]
        assert len(set(tails)) == 6  # each question its own blocks
    assert len({i for ids in system_ids for i in ids}) == 35  # no block shared across groups
    # shuffled: the groups interleave
    order = [u.unit_id.split("_")[0] for u in w.units]
    assert order != sorted(order)


def test_shared_prefix_hits_the_embedded_engines_cache(tmp_path: Path) -> None:
    result = wb.simulate({"trace": "synthetic:shared-prefix,groups=2,prompts=8,"
                          "system=fixed:512,question=fixed:32,output=fixed:4,rate=2",
                          "out_dir": str(tmp_path)})
    summary = wb.summarize(result)
    assert summary["ok"] == 16
    planned = 14 * 512 / (16 * 544)
    assert summary["planned_prefix_hit_rate"] == pytest.approx(planned)
    assert summary["actual_prefix_hit_rate"] > 0.5 * planned


def test_agentic_preset_is_the_fit_and_keys_override_it() -> None:
    w = load_trace("synthetic:agentic,preset=coding-agent,sessions=300,seed=9")
    roots = [u for u in w.units if u.spawn is None]
    assert len(roots) == 300
    rounds = np.array([len(u.rounds) for u in roots])
    assert rounds.min() >= 1 and rounds.max() <= 57  # censored at the sample's longest
    assert np.median(rounds) == pytest.approx(18, abs=1.5)
    outputs = np.array([r.output_len for u in roots for r in u.rounds])
    # lognormal median 260: the sample median of ~5.7k draws (sigma 1.16) within ~4 %
    assert np.median(outputs) == pytest.approx(260, rel=0.06)
    assert outputs.max() <= 6531
    params = w.meta["generator"]["parameters"]
    assert params["output_len"] == PRESETS["coding-agent"]["output"]
    assert params["subagents"]["rounds"] == PRESETS["coding-agent"]["subagent_rounds"]
    # a round carries its whole conversation so far
    for u in roots[:5]:
        for a, b in zip(u.rounds, u.rounds[1:], strict=False):
            assert b.prefix_len == a.prefix_len + a.input_len + a.output_len
    short = load_trace("synthetic:agentic,preset=coding-agent,sessions=5,rounds=fixed:3,"
                       "subagents=0")
    assert {len(u.rounds) for u in short.units} == {3} and len(short.units) == 5


def test_same_description_same_workload_other_seed_another() -> None:
    text = "synthetic:agentic,sessions=20,seed=3"
    a, b = load_trace(text), load_trace(text)
    assert a.units == b.units
    assert load_trace(text.replace("seed=3", "seed=4")).units != a.units
    # tracegen's kindless description still means sessions
    assert load_trace("synthetic:sessions=3").units[0].kind == "session"


@pytest.mark.parametrize(("text", "rule"), [
    ("synthetic:zipf,requests=3", "unknown kind 'zipf'"),
    ("synthetic:random,groups=3", "unknown key 'groups'"),
    ("synthetic:random,requests=0", "integer in 1"),
    ("synthetic:random,input=normal:10", "expected fixed:N"),
    ("synthetic:agentic,preset=chat", "unknown preset 'chat'"),
    ("synthetic:random,arrival=gamma,burstiness=0",
     r"synthetic\.burstiness: expected a finite number in \(0, 1000000\]"),
    ("synthetic:random,arrival=poisson,burstiness=2", "use mode 'gamma'"),
    ("synthetic:random,seed=-1", "bad seed"),
])
def test_bad_descriptions_name_the_key(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        load_trace(text)


def test_manifest_records_the_generator(tmp_path: Path) -> None:
    text = "synthetic:random,requests=12,input=uniform:50..80,output=fixed:3,rate=4,seed=6"
    result = wb.simulate({"trace": text, "out_dir": str(tmp_path)})
    manifest = json.loads((Path(result.run_dir) / "manifest.json").read_text())
    gen = manifest["trace"]["generator"]
    assert gen["kind"] == "random" and gen["seed"] == 6
    assert gen["parameters"] == {"requests": 12, "input": "uniform:50..80",
                                 "output": "fixed:3"}
    assert gen["arrival"]["process"] == "poisson" and gen["arrival"]["rate"] == 4
    assert manifest["trace"]["format"] == "synthetic"


def test_cli_dry_run_and_stats_take_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    text = "synthetic:random,requests=9,input=fixed:100,output=fixed:10"
    assert main(["replay", "--trace", text, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert '"units": 9' in plan and '"total_prompt_tokens": 900' in plan
    assert main(["stats", text, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["units"] == 9 and stats["total_output_tokens"] == 90
