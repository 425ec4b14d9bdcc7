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
