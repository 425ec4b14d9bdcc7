"""A canonical (``session-execution-v2``) file is never re-planned: a context policy given
with one is a ConfigError before any request is sent (docs/arrival.md)."""

from __future__ import annotations

import asyncio

import pytest

from workbench.cli import main as cli_main
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.sim.server import serve_sim
from workbench.workloads.materialize import tracegen

RAW = data_path("tracelab/multi_session_example.csv")


@pytest.fixture(scope="module")
def canonical(tmp_path_factory):
    out = tmp_path_factory.mktemp("canon") / "c.csv"
    return str(tracegen(RAW, out, policy="trace-reported").csv_path)


@pytest.mark.parametrize("policy", ["trace-reported", "prefix-preserving", "monotonic"])
async def test_a_policy_with_a_canonical_file_is_rejected_before_any_request(canonical, policy):
    async with serve_sim(zero_cost=True) as sim:
        cfg = RunConfig.from_dict({
            "trace": canonical, "context": policy, "backend": "vllm-tokens",
            "target": sim.base_url, "arrival": "saturated",
        })  # fmt: skip
        with pytest.raises(ConfigError) as err:
            async with asyncio.timeout(30):
                await run_async(cfg)
        assert sim.debug_requests() == []  # nothing reached the server
    msg = str(err.value)
    assert "session-execution-v2" in msg and canonical in msg
    assert "already planned by policy 'trace-reported'" in msg
    assert "unset context.policy" in msg and "tracegen" in msg
    with pytest.raises(ConfigError, match="already planned"):
        simulate(cfg.replace(**{"target.url": "sim"}))


def test_without_a_policy_it_replays_as_written(canonical):
    result = simulate(RunConfig.from_dict({"trace": canonical, "arrival": "saturated"}),
                      engine={"zero_cost": True})
    planned = [(r.planned_prefix_tokens, r.planned_input_tokens)
               for r in sorted(result.records, key=lambda r: r.request_id)]
    from workbench.traces.load import load_trace

    wl = load_trace(canonical)
    expected = sorted((r.request_id, r.prefix_len, r.input_len) for r in wl.rounds())
    assert planned == [(p, i) for _, p, i in expected]


def test_cli_says_what_to_change(canonical, capsys):
    code = cli_main(["replay", "--trace", canonical, "--policy", "prefix-preserving",
                     "--backend", "vllm-tokens", "--dry-run"])
    assert code != 0
    err = capsys.readouterr().err
    assert "already planned" in err and "drop --policy" in err


def test_effective_policy_is_the_one_rule_for_plan_and_statistics(canonical):
    """``effective_policy``: the policy given (None: trace-reported) plans a conversation;
    independent requests and hash-id rounds keep their own prefixes (None); a canonical
    file takes trace-reported only, as ``trace_stats`` and ``tracegen`` say too."""
    from workbench.context.policy import DEFAULT_POLICY, effective_policy, make_policy
    from workbench.records import Round, Unit, Workload
    from workbench.traces.load import load_trace

    raw, planned = load_trace(RAW), load_trace(canonical)
    assert effective_policy(raw).name == DEFAULT_POLICY
    assert effective_policy(raw, "monotonic").name == "prefix-preserving"
    configured = make_policy("prefix-preserving", {"major_compaction_min_drop_tokens": 9})
    assert effective_policy(raw, configured) is configured
    assert effective_policy(planned).name == DEFAULT_POLICY
    with pytest.raises(ConfigError, match="already planned by policy 'trace-reported'"):
        effective_policy(planned, "prefix-preserving")
    one = Round("a", "a", 0, 0.0, 0, 4, 2)
    independent = Workload((Unit("a", "independent", 0.0, (one,)),), "independent")
    assert effective_policy(independent, "prefix-preserving") is None
    hashed = Round("b", "s", 0, 0.0, 0, 4, 2, hash_ids=(1,))
    assert effective_policy(Workload((Unit("s", "session", 0.0, (hashed,)),), "x")) is None
