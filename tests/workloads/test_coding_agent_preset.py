"""The ``coding-agent`` preset against the bundled captured conversations it is fitted on
(docs/trace-formats.md, "The ``coding-agent`` preset and its fit"), and the ``agentic``
kind's sub-agent fan-out: valid session graphs, children right after their parent,
replayed in virtual time with each child started when its parent's round ends.

The preset is drawn with a fixed seed (2000 sessions, ~37,000 rounds: its own percentiles
within ~2 %). The tolerance of a pooled percentile (every round of sessions and
sub-agents together) is the sample's own uncertainty: its 95 % bootstrap interval,
resampling the 28 conversations (each with its sub-agents; 1000 resamples, seeded) —
about ±20 % for the prompt's p50 and p90, ±30 % and -30 % / +80 % for the tool wait's,
whose p90 rests on a few long-waiting conversations. A fitted key's own p50 / p90 (the
fit goes through them) is within 10 % of its column's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from workbench import data
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.records import Workload
from workbench.traces.graph import check_graph
from workbench.traces.load import load_trace
from workbench.workloads import agent_fit
from workbench.workloads.standard import PRESETS, generate
from workbench.workloads.synthetic import (
    SessionStream,
    parse_distribution,
    parse_synthetic,
    synthetic_workload,
)

PRESET = "synthetic:agentic,preset=coding-agent,sessions=2000,seed=5"


@pytest.fixture(scope="module")
def sample() -> Workload:
    return load_trace(str(data.path(agent_fit.SAMPLE)), fmt="weka")


@pytest.fixture(scope="module")
def drawn() -> Workload:
    return generate(PRESET)


def _pooled(w: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Prompt tokens of every round, tool waits (ms) after every round but a unit's last:
    sessions and sub-agents together, as the engine sees them."""
    prompts = [r.prefix_len + r.input_len for u in w.units for r in u.rounds]
    waits = [r.tool_wait_after_ms for u in w.units for r in u.rounds[:-1]]
    return np.array(prompts, dtype=float), np.array(waits, dtype=float)


def test_the_preset_is_the_fit_of_the_bundled_sample(sample: Workload) -> None:
    assert agent_fit.fit(agent_fit.measure(sample)) == PRESETS["coding-agent"]


def _bootstrap(sample: Workload, q: int, resamples: int = 1000) -> np.ndarray:
    """The sample's 95 % interval of the pooled prompt's and tool wait's ``q``-th
    percentile, conversations resampled with their sub-agents: [[prompt lo, wait lo],
    [prompt hi, wait hi]]."""
    by_conv: dict[str, list] = defaultdict(list)
    for u in sample.units:
        by_conv[u.meta["conversation"]].append(u)
    parts = [_pooled(Workload(tuple(us), "weka")) for us in by_conv.values()]
    rng = np.random.default_rng(0)
    stats = []
    for _ in range(resamples):
        pick = rng.integers(0, len(parts), len(parts))
        stats.append([np.percentile(np.concatenate([parts[i][j] for i in pick]), q)
                      for j in (0, 1)])
    return np.percentile(np.array(stats), [2.5, 97.5], axis=0)


@pytest.mark.parametrize("q", [50, 90])
def test_prompt_and_tool_wait_percentiles_match_the_sample(
    sample: Workload, drawn: Workload, q: int
) -> None:
    (data_prompt, data_wait), (our_prompt, our_wait) = _pooled(sample), _pooled(drawn)
    (prompt_lo, wait_lo), (prompt_hi, wait_hi) = _bootstrap(sample, q)
    assert prompt_lo <= np.percentile(data_prompt, q) <= prompt_hi
    assert prompt_lo <= np.percentile(our_prompt, q) <= prompt_hi
    assert wait_lo <= np.percentile(our_wait, q) <= wait_hi
    # and the tails stay the data's size: no prompt past 1.5 × the sample's largest
    # (the old 5-session fit drew 763K-token prompts), no wait past the sample's largest
    assert our_prompt.max() <= 1.5 * data_prompt.max()
    assert our_wait.max() <= data_wait.max()


@pytest.mark.parametrize("group", agent_fit.GROUPS)
@pytest.mark.parametrize("key", ["rounds", "first_input", "input", "output", "tool_wait"])
def test_each_fitted_key_matches_its_column(sample: Workload, drawn: Workload, group: str,
                                            key: str) -> None:
    data_col = getattr(agent_fit.measure(sample)[group], key)
    ours = getattr(agent_fit.measure(drawn)[group], key)
    for q in (50, 90):
        assert np.percentile(ours, q) == pytest.approx(np.percentile(data_col, q), rel=0.1)


def test_the_fan_out_matches_the_sample(sample: Workload, drawn: Workload) -> None:
    data_s, ours = agent_fit.measure(sample)["session"], agent_fit.measure(drawn)["session"]
    share = ours.spawning_rounds / ours.open_rounds  # ~37,000 rounds: ±0.1 points
    assert share == pytest.approx(data_s.spawning_rounds / data_s.open_rounds, abs=0.002)
    assert set(ours.fan) == {1, 2, 3} == set(data_s.fan)
    assert ours.compactions == 0 == data_s.compactions


def test_subagents_are_children_right_after_their_parent(drawn: Workload) -> None:
    check_graph("preset", drawn)
    kids = [u for u in drawn.units if u.spawn is not None]
    assert len(kids) > 100
    last_root = None
    for u in drawn.units:
        if u.spawn is None:
            last_root = u
            continue
        assert last_root is not None and u.spawn.parent_id == last_root.unit_id
        sp = u.spawn
        assert (sp.trigger, sp.delay_ms, sp.join_round) == ("round_end", 0.0, sp.round_idx + 1)
        assert sp.round_idx < len(last_root.rounds) - 1
        assert u.unit_id.startswith(f"{last_root.unit_id}::sa:")
        assert u.arrival_ms == last_root.arrival_ms
        # a sub-agent's own conversation: it starts afresh and grows round by round
        assert u.rounds[0].prefix_len == 0
        for a, b in zip(u.rounds, u.rounds[1:], strict=False):
            assert b.prefix_len == a.prefix_len + a.input_len + a.output_len


def test_fan_out_replays_in_virtual_time_children_after_their_parent_round(
    tmp_path: Path,
) -> None:
    text = ("synthetic:agentic,sessions=6,rounds=fixed:4,first_input=fixed:64,input=fixed:32,"
            "output=fixed:8,tool_wait=fixed:50,subagents=0.5,fanout=uniform:1..3,"
            "subagent_rounds=fixed:2,subagent_tool_wait=fixed:5,seed=3,rate=50")
    workload = generate(text)
    kids = [u for u in workload.units if u.spawn is not None]
    assert kids and len({u.spawn.parent_id for u in kids if u.spawn}) > 1
    res = simulate({"trace": text, "out_dir": str(tmp_path)})
    assert len(res.records) == workload.n_rounds
    assert all(r.status == "ok" for r in res.records)
    recs = defaultdict(list)
    for r in sorted(res.records, key=lambda r: r.round_idx):
        recs[r.session_id].append(r)
    ends = {row["unit_id"]: row["end_ns"] for row in res.lifecycle}
    units = {u.unit_id: u for u in workload.units}
    for kid in kids:
        sp = kid.spawn
        assert sp is not None and sp.join_round is not None
        parent = recs[sp.parent_id]
        # the child starts when its parent's round ends; the next round waits for it
        assert recs[kid.unit_id][0].dispatch_ns == parent[sp.round_idx].end_ns
        wait_ns = units[sp.parent_id].rounds[sp.round_idx].tool_wait_after_ms * 1e6
        assert parent[sp.join_round].dispatch_ns >= max(
            ends[kid.unit_id], parent[sp.round_idx].end_ns + wait_ns)


def test_fan_out_is_held_and_streamed_sizes_are_refused() -> None:
    spec = parse_synthetic("synthetic:sessions=10,subagents=0.5")
    with pytest.raises(ConfigError, match="not streamed"):
        SessionStream(spec, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="never streamed"):
        generate("synthetic:agentic,preset=coding-agent,sessions=20000")
    # without sub-agents the same size streams
    assert generate("synthetic:agentic,preset=coding-agent,sessions=20000,subagents=0").streamed


def test_fan_out_is_drawn_after_the_sessions_which_stay_as_they_were() -> None:
    """The sessions' columns come first on the generator: adding sub-agents leaves every
    session as it was, and a spec without them draws nothing more."""
    base = "synthetic:sessions=40,rounds=uniform:2..9,input=lognormal:500,1"
    plain = synthetic_workload(parse_synthetic(base), np.random.default_rng(1))
    fanned = synthetic_workload(parse_synthetic(base + ",subagents=0.3,fanout=fixed:2"),
                                np.random.default_rng(1))
    roots = [u for u in fanned.units if u.spawn is None]
    assert tuple(roots) == plain.units
    assert fanned.meta["subagents"] == len(fanned.units) - len(roots) > 0
    assert "subagents" not in plain.meta
    # a child's keys default to the session's
    assert {len(u.rounds) for u in fanned.units if u.spawn is not None} <= set(range(2, 10))


def test_a_lognormal_maximum_censors_the_draws() -> None:
    dist = parse_distribution("input", "lognormal:1000,2,5000")
    assert str(dist) == "lognormal:1000,2,5000"
    values = dist.draw(np.random.default_rng(0), 20000, integer=True, low=1)
    assert values.max() == 5000 and (values == 5000).mean() == pytest.approx(0.21, abs=0.02)
    # P(X > 5000) = 1 - Φ(ln 5 / 2) = 0.21
    assert str(parse_distribution("tool_wait", "lognormal:11000,1.81,48547000")) == (
        "lognormal:11000,1.81,48547000")  # a large whole number written in full
    for bad in ("lognormal:1000,2,500", "lognormal:1000,2,x", "lognormal:1000,2,20000000"):
        with pytest.raises(ConfigError, match="synthetic input"):
            parse_distribution("input", bad)


def test_tracegen_writes_the_fan_out_as_a_graph_sidecar(tmp_path: Path) -> None:
    from workbench.workloads.materialize import tracegen

    text = "synthetic:sessions=10,rounds=fixed:4,subagents=0.5,fanout=fixed:2,subagent_rounds=2"
    drawn = synthetic_workload(parse_synthetic(text), np.random.default_rng(0))
    result = tracegen(text, tmp_path / "out.csv")
    assert (tmp_path / "out.graph.json").is_file()
    back = load_trace(result.csv_path)
    check_graph(result.csv_path, back)
    assert sum(u.spawn is not None for u in back.units) == drawn.meta["subagents"] > 0
