"""Trace statistics on hand-built workloads with exact numbers, plus the real traces."""

import json
import math
import re
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from public_data import needs, public

import workbench
from workbench import data
from workbench.context.policy import effective_policy
from workbench.records import Round, Unit, Workload
from workbench.workloads.trace_stats import (
    _dense,
    _first_accesses,
    _stack_distances,
    ideal_prefix_hit_rate,
    trace_stats,
)

MOONCAKE = public("mooncake/conversation_trace.jsonl")  # the full trace: not bundled


def _independent(reqs, block_size=4):
    """Independent units with hash ids; prefix = leading seen blocks (as the reader does)."""
    seen: set[int] = set()
    units = []
    for n, (ids, length, out) in enumerate(reqs):
        lead = 0
        for h in ids:
            if h not in seen:
                break
            lead += 1
        prefix = min(lead * block_size, length)
        seen.update(ids)
        r = Round(f"r{n}", f"r{n}", 0, float(n), prefix, length - prefix, out, hash_ids=tuple(ids))
        units.append(Unit(f"r{n}", "independent", float(n), (r,)))
    return Workload(tuple(units), "mooncake", block_size=block_size)


def _sessions(spec):
    """``spec``: {session: (arrival, [(P, I, O, tool_wait), ...])}."""
    units = []
    for sid, (arrival, rounds) in spec.items():
        rs = tuple(
            Round(f"{sid}_{k}", sid, k, arrival, p, i, o, w)
            for k, (p, i, o, w) in enumerate(rounds)
        )
        units.append(Unit(sid, "session", arrival, rs))
    return Workload(tuple(units), "session")


HASH_REQS = [([1, 2, 3], 10, 5), ([1, 2, 4], 12, 6), ([1, 5, 3], 9, 7), ([1, 2, 3], 10, 8)]


def _brute_lru(workload, capacity, bs=4):
    """Reference LRU over hash-id blocks: hits stop at a request's first miss."""
    cache: OrderedDict[int, None] = OrderedDict()
    hit = total = 0
    for r in workload.rounds():
        total += r.prompt_len
        chain = True
        for j, h in enumerate(r.hash_ids):
            w = max(0, min(bs, r.prompt_len - j * bs))
            chain = chain and h in cache
            hit += w if chain else 0
            cache[h] = None
            cache.move_to_end(h)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hit / total


def test_ideal_hit_rate_from_hash_ids():
    s = trace_stats(_independent(HASH_REQS))
    # 0 + (4+4) + 4 (id 3 after a miss does not count) + (4+4+2), over 10+12+9+10
    assert s["ideal_prefix_hit_rate"] == pytest.approx(22 / 41)
    assert s.rounds["ideal_hit_tokens"].tolist() == [0, 8, 4, 10]
    assert s["planned_prefix_hit_rate"] == pytest.approx(22 / 41)
    assert s.policy is None and s.block_size == 4
    assert s["units"] == 4 and s["independent"] == 4 and s["sessions"] == 0
    assert s["mean_input_tokens"] == pytest.approx(41 / 4)
    assert s["mean_output_tokens"] == pytest.approx(6.5)
    assert s["total_prompt_tokens"] == 41
    assert s["total_prefix_tokens"] + s["total_input_tokens"] == 41
    assert s["working_set_blocks"] == 5


def test_lru_curve_from_hash_ids_exact():
    w = _independent(HASH_REQS)
    curve = trace_stats(w, cache_capacities=[0, 1, 2, 3, 4, 5, 100]).hit_vs_capacity
    rates = dict(zip(curve["capacity_blocks"], curve["hit_rate"], strict=True))
    assert rates[0] == 0 and rates[1] == 0
    assert rates[3] == pytest.approx(16 / 41)  # worked by hand in the docstring of _brute_lru
    assert rates[5] == pytest.approx(22 / 41) and rates[100] == pytest.approx(22 / 41)
    for c, r in rates.items():
        assert r == pytest.approx(_brute_lru(w, c)), c
    assert (curve["capacity_tokens"] == curve["capacity_blocks"] * 4).all()


def test_lru_curve_matches_brute_force_on_random_traces():
    rng = np.random.default_rng(7)
    reqs = []
    for _ in range(150):
        root = int(rng.integers(0, 6))
        n = int(rng.integers(1, 8))
        ids = [
            root * 1000 + k if rng.random() < 0.7 else int(rng.integers(10**6)) for k in range(n)
        ]
        reqs.append((ids, int(n * 4 - rng.integers(0, 4)), 1))
    w = _independent(reqs)
    caps = [1, 2, 3, 5, 8, 13, 21, 34, 55, 1000]
    curve = trace_stats(w, cache_capacities=caps).hit_vs_capacity
    for c, r in zip(curve["capacity_blocks"], curve["hit_rate"], strict=True):
        assert r == pytest.approx(_brute_lru(w, c)), c


def test_stack_distances_match_definition():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 12, 400)
    got = _stack_distances(keys)
    for t, k in enumerate(keys.tolist()):
        prev = [s for s in range(t) if keys[s] == k]
        expect = len(set(keys[prev[-1] + 1 : t].tolist())) if prev else len(keys)
        assert got[t] == expect, t


def test_ideal_and_planned_from_session_prefixes():
    # trace-reported: round 2 claims 20 but only 16 exist -> p=16, 4 folded
    w = _sessions({"a": (0.0, [(0, 10, 2, 5.0), (12, 3, 1, 5.0), (20, 5, 1, 0.0)])})
    s = trace_stats(w, block_size=4)
    assert s.rounds["prefix_len"].tolist() == [0, 12, 16]
    assert s.rounds["input_len"].tolist() == [10, 3, 9]
    assert s["planned_prefix_hit_rate"] == pytest.approx(28 / 50)
    assert s["ideal_prefix_hit_rate"] == pytest.approx(28 / 50)
    assert s["folded_prefix_tokens"] == 4 and s.policy == "trace-reported"
    assert s["sessions"] == 1 and s["rounds"] == 3
    assert s["p50_tool_wait_ms"] == 5.0  # the last round's wait is not a tool wait
    row = s.sessions.iloc[0]
    assert row["rounds"] == 3 and row["prompt_tokens"] == 50 and row["folded_prefix_tokens"] == 4


def test_session_lru_curve_exact():
    # r0 writes blocks 0..2 (8 prompt + 4 output); r1 reads all three (12 tokens)
    w = _sessions({"a": (0.0, [(0, 8, 4, 0.0), (12, 4, 4, 0.0)])})
    s = trace_stats(w, block_size=4, cache_capacities=[1, 2, 3, 4])
    assert s.hit_vs_capacity["hit_rate"].tolist() == pytest.approx([0, 0, 0.5, 0.5])
    assert s["ideal_prefix_hit_rate"] == pytest.approx(0.5)


def test_partial_block_prefix_counts_real_length():
    w = _sessions({"a": (0.0, [(0, 5, 1, 0.0), (6, 2, 1, 0.0)])})
    s = trace_stats(w, block_size=4, cache_capacities=[1, 2])
    assert s.rounds["ideal_hit_tokens"].tolist() == [0, 6]  # 4 + partial 2
    assert s.hit_vs_capacity["hit_rate"].tolist() == pytest.approx([0, 6 / 13])


def test_prefix_preserving_policy_and_compaction():
    w = _sessions({"a": (0.0, [(0, 140000, 0, 0.0), (60000, 10000, 1, 0.0)])})
    s = trace_stats(w, block_size=512, policy="monotonic")
    assert s.policy == "prefix-preserving"
    assert s["major_compaction_rounds"] == 1 and s["total_prefix_tokens"] == 0
    assert s["ideal_prefix_hit_rate"] == 0


def test_interleaving_and_curve_reaches_ideal():
    w = _sessions(
        {
            "a": (0.0, [(0, 40, 8, 100.0), (48, 16, 8, 100.0), (72, 8, 8, 0.0)]),
            "b": (10.0, [(0, 30, 6, 5.0), (36, 12, 6, 0.0)]),
            "c": (20.0, [(500, 10, 2, 0.0)]),  # a claimed first-round prefix is folded
        }
    )
    s = trace_stats(w, block_size=8)
    order = s.rounds.sort_values("request_order")["request_id"].tolist()
    assert order == ["a_0", "b_0", "b_1", "c_0", "a_1", "a_2"]
    curve = s.hit_vs_capacity
    assert np.all(np.diff(curve["hit_rate"]) >= 0)
    assert curve["capacity_blocks"].iloc[-1] == s["working_set_blocks"]
    assert curve["hit_rate"].iloc[-1] == pytest.approx(s["ideal_prefix_hit_rate"])
    assert s["ideal_prefix_hit_rate"] == pytest.approx(s["planned_prefix_hit_rate"])
    assert s.sessions["unit_id"].tolist() == ["a", "b", "c"]


def test_mapping_access_and_json():
    s = trace_stats(_independent(HASH_REQS))
    assert s["ideal_prefix_hit_rate"] == s.summary["ideal_prefix_hit_rate"]
    assert set(s) == set(s.summary) and len(s) == len(s.summary)
    json.dumps(dict(s))  # plain numbers only
    for key in ("units", "rounds", "planned_prefix_hit_rate", "p99_prompt_tokens"):
        assert key in s
    assert workbench.trace_stats is trace_stats


def test_empty_and_bad_inputs():
    s = trace_stats(Workload((), "session"))
    assert s["rounds"] == 0 and s["ideal_prefix_hit_rate"] == 0.0
    with pytest.raises(ValueError):
        trace_stats(_independent(HASH_REQS), cache_capacities=[-1])


def test_hashes_wider_than_64_bits():
    big = 2**80
    s = trace_stats(_independent([([big, big + 1], 8, 1), ([big, big + 2], 8, 1)]))
    assert s["ideal_prefix_hit_rate"] == pytest.approx(4 / 16)


@pytest.mark.parametrize("name", data.files())
def test_bundled_traces(name):
    w = workbench.load_trace(data.path(name))
    s = trace_stats(w)
    assert s["rounds"] == w.n_rounds > 0
    assert s["total_prompt_tokens"] == s["total_prefix_tokens"] + s["total_input_tokens"]
    assert 0 <= s["planned_prefix_hit_rate"] <= 1 and 0 <= s["ideal_prefix_hit_rate"] <= 1
    curve = s.hit_vs_capacity["hit_rate"].to_numpy()
    assert np.all(np.diff(curve) >= -1e-12)
    assert curve[-1] == pytest.approx(s["ideal_prefix_hit_rate"])


@needs(MOONCAKE)
def test_mooncake_full_trace():
    pytest.importorskip("workbench.traces.mooncake")
    s = trace_stats(workbench.load_trace(MOONCAKE))
    assert s["rounds"] == 12031
    assert round(s["mean_input_tokens"]) == 12035
    assert round(s["mean_output_tokens"]) == 343
    assert 0 < s["ideal_prefix_hit_rate"] < 1
    assert not math.isnan(s["p99_prompt_tokens"])


def test_cli_table_names_detected_format(capsys):
    from workbench.cli import main

    assert main(["stats", str(data.path("mooncake/conversation_trace_head600.jsonl"))]) == 0
    out = capsys.readouterr().out
    assert "format  mooncake (detected)" in out
    assert "ideal hit rate" in out and "LRU prefix cache" in out
    # words with units, as the report's tables: no summary key (``p90_tool_wait_ms``)
    assert "tool wait p90 (ms)" in out and "prompt p99 (tokens)" in out, out
    table = out[out.index("\nshape"):out.index("LRU prefix cache")]
    assert not re.search(r"\b[a-z]+_[a-z0-9_]+\b", table), table


def test_cli_takes_the_trace_as_the_replaying_commands_do(capsys):
    """``stats --trace T`` as ``simulate --trace T``: the same summary as ``stats T``."""
    from workbench.cli import main

    path = str(data.path("tracelab/multi_session_example.csv"))
    outs = []
    for argv in (["stats", path, "--json"], ["stats", "--trace", path, "--json"]):
        assert main(argv) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[0]["rounds"] > 0


def test_cli_json_summary(capsys):
    from workbench.cli import main

    path = data.path("tracelab/multi_session_example.csv")
    assert main(["stats", str(path), "--json", "--format", "session", "--block-size", "16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "session" and doc["policy"] == "trace-reported"
    assert doc["block_size"] == 16
    assert doc["rounds"] == trace_stats(workbench.load_trace(path))["rounds"]


def test_cli_unknown_format_is_a_clean_error(capsys):
    from workbench.cli import main

    path = data.path("tracelab/multi_session_example.csv")
    assert main(["stats", str(path), "--format", "nope"]) == 2
    assert "valid:" in capsys.readouterr().err


def test_bundled_data_helper():
    names = data.files()
    assert "mooncake/conversation_trace_head600.jsonl" in names
    assert data.path("trajectories_v1.jsonl") == data.path("batchbench/trajectories_v1.jsonl")
    assert (data.path("multi_session_example.csv").parent / "../PROVENANCE.md").resolve().is_file()
    with pytest.raises(FileNotFoundError, match="bundled:"):
        data.path("nope.csv")
    head = data.path("mooncake/conversation_trace_head600.jsonl").read_text().splitlines()
    assert len(head) == 600


_SHORTCUT_CASES = {
    "hash ids": lambda: _independent(HASH_REQS),
    "hash ids wider than 64 bits": lambda: _independent(
        [([2**80, 2**80 + 1], 8, 1), ([2**80, 2**80 + 2], 8, 1)]),
    "interleaved sessions": lambda: _sessions({
        "a": (0.0, [(0, 40, 8, 100.0), (48, 16, 8, 100.0), (72, 8, 8, 0.0)]),
        "b": (10.0, [(0, 30, 6, 5.0), (36, 12, 6, 0.0)]),
        "c": (20.0, [(500, 10, 2, 0.0)])}),
    "compaction": lambda: _sessions({"a": (0.0, [(0, 140000, 0, 0.0), (60000, 10000, 1, 0.0)])}),
    "empty": lambda: Workload((), "session"),
}  # fmt: skip


@pytest.mark.parametrize("name", [*data.files(), "one-shot", *_SHORTCUT_CASES])
def test_ideal_hit_rate_shortcut_equals_the_full_statistics(name):
    """A replay's manifest takes ``ideal_prefix_hit_rate`` without the statistics' frames
    or LRU distances (one-shot units without hash ids: without any table): the same
    number, exactly, for every policy."""
    if name == "one-shot":  # claimed prefixes, but every unit has a single round
        rounds = [Round(f"r{n}", f"r{n}", 0, float(n), 8 * n, 16, 4) for n in range(6)]
        w = Workload(tuple(Unit(r.request_id, "independent", r.arrival_ms, (r,)) for r in rounds),
                     "independent")  # fmt: skip
    elif name in _SHORTCUT_CASES:
        w = _SHORTCUT_CASES[name]()
    else:
        w = workbench.load_trace(data.path(name))
    for policy in ("trace-reported", "prefix-preserving", "monotonic"):
        full = trace_stats(w, policy=policy)["ideal_prefix_hit_rate"]
        assert ideal_prefix_hit_rate(w, effective_policy(w, policy)) == full


@needs(MOONCAKE)
def test_ideal_hit_rate_shortcut_on_the_whole_mooncake_trace():
    w = workbench.load_trace(MOONCAKE)
    assert ideal_prefix_hit_rate(w, effective_policy(w)) == trace_stats(w)["ideal_prefix_hit_rate"]


def test_a_replay_plan_does_not_import_pandas():
    """The plan (and so a virtual run) needs the ideal hit rate, not pandas' ~75 MB of
    resident memory: pandas comes in with the first frame (a summary, a report)."""
    code = ("import sys, workbench; from workbench.replay.prepare import coerce_config, "
            "prepare; from workbench.executors.virtual import simulate; "
            f"cfg = coerce_config({{'trace': {{'path': {str(data.path(data.files()[0]))!r}}}}}); "
            "prepare(cfg); print('pandas' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.strip() == "False"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(0, 300), max_size=200),
                 st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50),
                 st.lists(st.integers(0, 10**6), max_size=50)))
def test_dense_keys_and_first_accesses_are_numpys_unique(values: list[int]) -> None:
    """``_dense`` ranks hash ids as ``np.unique``'s inverse does (by a table over a small
    range, else by the sort), and ``_first_accesses`` marks the accesses ``np.unique``'s
    first indices do (by a table, no sort)."""
    a = np.asarray(values, np.int64)
    inverse = np.unique(a, return_inverse=True)[1]
    keys = _dense(a)
    assert keys.tolist() == inverse.ravel().tolist()
    want = np.zeros(len(a), np.int64)
    want[np.unique(keys, return_index=True)[1]] = len(a)
    assert _first_accesses(keys).tolist() == want.tolist()


def test_cli_says_when_the_trace_records_no_prefix_sharing(tmp_path, capsys):
    # no block ids, no prefix lengths: every hit rate is 0 by construction of the replay,
    # not a property measured of the traffic; the table says so, the JSON carries it
    from workbench.cli import main

    p = tmp_path / "reqs.csv"
    p.write_text("id,arrival_time,input_len,output_len\na,0,100,5\nb,1,100,5\n")
    assert main(["stats", str(p)]) == 0
    out = capsys.readouterr().out
    assert "records no prefix sharing" in out
    assert main(["stats", str(p), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefix_sharing_recorded"] is False and doc["ideal_prefix_hit_rate"] == 0.0
    assert main(["stats", str(data.path("mooncake/conversation_trace_head600.jsonl")),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefix_sharing_recorded"] is True and doc["block_size"] == 512
