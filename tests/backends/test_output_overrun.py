"""Output overrun (docs/output-overrun.md): a server that sends more tokens than
``max_tokens`` is flagged on the request; one that never stops is cut at a margin, so
the run ends with default settings. Against the embedded engine's overrun faults, over
real HTTP, for every backend that streams tokens."""

from __future__ import annotations

import asyncio

import pytest

from workbench.backends.overrun import ERROR_CLASS, OutputOverrun, OverrunGuard, cut_limit
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.records import RequestRecord
from workbench.sim.faults import Faults
from workbench.sim.server import serve_sim

BACKENDS = ["openai", "openai-chat", "vllm-tokens", "sglang-tokens"]
OUTPUT = 8


def _rec() -> RequestRecord:
    return RequestRecord("r", "q", 0, "s", 0, "openai", None, 0, 4, OUTPUT)


def test_cut_limit_is_max_tokens_plus_a_margin():
    assert cut_limit(8) == 8 + 64
    assert cut_limit(1000) == 1250
    assert cut_limit(0) == 64


def test_guard_counts_ids_or_events_and_cuts_past_the_limit():
    rec = _rec()
    ids = OverrunGuard(rec, OUTPUT, by_events=False)
    counts = [4] * 18  # 72 ids = the limit: not yet cut
    ids.check(counts)
    assert ids.total == 72 and "output_overrun" not in rec.extra
    counts.append(1)
    with pytest.raises(OutputOverrun, match=ERROR_CLASS):
        ids.check(counts)
    assert rec.extra["output_overrun"] == {"max_tokens": 8, "received": 73, "limit": 72,
                                           "cut": True}
    events = OverrunGuard(_rec(), OUTPUT, by_events=True)
    events.check([3] * 72)  # a text stream: 72 events, at least 72 tokens
    with pytest.raises(OutputOverrun):
        events.check([3] * 73)


def test_guard_flags_a_finished_stream_over_max_tokens():
    rec = _rec()
    g = OverrunGuard(rec, OUTPUT, by_events=False)
    g.check([1] * OUTPUT)
    g.flag(OUTPUT)
    assert "output_overrun" not in rec.extra
    g.flag(OUTPUT + 2)  # usage says more than was pinned
    assert rec.extra["output_overrun"]["received"] == 10
    assert rec.extra["output_overrun"]["cut"] is False


def test_fault_switches_validate():
    assert Faults(never_stop=True).extra_tokens > 10**6
    assert Faults(overrun_tokens=3).extra_tokens == 3 and Faults().extra_tokens == 0
    # the engine's knobs are checked by the run config's range table (docs/config-bounds.md)
    with pytest.raises(ConfigError, match=r"target\.engine\.overrun_tokens: expected an integer"):
        Faults(overrun_tokens=-1)


def _cfg(tmp_path, target, backend):
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n"
                     + "".join(f"r{i},0,64,{OUTPUT}\n" for i in range(3)))  # fmt: skip
    return RunConfig.from_dict({
        "trace": {"path": str(trace), "format": "independent"},
        "arrival": "saturated", "target": target,
        # preflight off: the replay's own requests meet the fault (the preflight's are
        # cut the same way, test_preflight_against_a_server_that_never_stops)
        "backend": {"name": backend, "preflight": False},
    })  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_small_overrun_is_flagged_and_the_request_kept(tmp_path, backend):
    async with serve_sim(zero_cost=True, overrun_tokens=5) as sim:
        async with asyncio.timeout(60):
            result = await run_async(_cfg(tmp_path, sim.base_url, backend))
    assert len(result.records) == 3
    for r in result.records:
        assert r.status == "ok", r.error
        assert r.extra["output_overrun"] == {
            "max_tokens": OUTPUT, "received": OUTPUT + 5, "limit": cut_limit(OUTPUT),
            "cut": False}  # fmt: skip
        assert sum(r.token_counts) >= OUTPUT + 5 or backend == "openai-chat"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_server_that_never_stops_is_cut_and_the_run_ends(tmp_path, backend):
    cfg = _cfg(tmp_path, "sim", backend)  # default timeouts, no fuse
    assert cfg.arrival.fuse_s is None  # the defaults: no fuse; the 600 s request timeout is far
    async with serve_sim(zero_cost=True, never_stop=True) as sim:
        async with asyncio.timeout(60):  # a bound on the test, not a timed assertion
            result = await run_async(cfg.replace(**{"target.url": sim.base_url}))
        rows = sim.debug_requests()
    assert len(result.records) == 3 and not result.cancelled
    for r in result.records:
        assert r.status == "error" and r.error.startswith(ERROR_CLASS), r.error
        over = r.extra["output_overrun"]
        assert over["cut"] and over["max_tokens"] == OUTPUT
        assert cut_limit(OUTPUT) < over["received"] < 10 * cut_limit(OUTPUT)
    # the server saw the client go away: its streams ended long before the fault's bound
    assert len(rows) == 3 and all(len(row["sent_ns"]) < 10_000 for row in rows)


async def test_preflight_against_a_server_that_never_stops(tmp_path):
    from workbench.errors import WorkbenchError

    async with serve_sim(zero_cost=True, never_stop=True) as sim:
        cfg = _cfg(tmp_path, sim.base_url, "vllm-tokens").replace(**{"backend.preflight": True})
        with pytest.raises(WorkbenchError, match=ERROR_CLASS):
            async with asyncio.timeout(60):
                await run_async(cfg)
