"""The runner against the embedded engine over loopback (real HTTP, real engine code)."""

import asyncio
import itertools
from pathlib import Path

import orjson
import pytest
from transport_wrap import Wrapped

from workbench.backends.transport import Transport, TransportOptions
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
BACKENDS = ["openai", "openai-chat", "vllm-tokens", "sglang-tokens"]


def _cfg(target, **over):
    d = {
        "trace": {"path": SESSIONS},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0.01},
        "backend": "openai",
        "target": target,
    }
    for k, v in over.items():
        base = d.get(k)
        d[k] = {**base, **v} if isinstance(v, dict) and isinstance(base, dict) else v
    return RunConfig.from_dict(d)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_backend_sends_the_planned_lengths(sim, backend):
    if backend == "openai-chat":
        # the embedded engine's chat template: 3 tokens around the first message, 4 per turn
        backend = {"name": backend,
                   "options": {"initial_overhead_tokens": 3, "turn_overhead_tokens": 4}}
    cfg = _cfg(sim.base_url, backend=backend)
    async with asyncio.timeout(60):
        result = await run_async(cfg)
    recs = [r for r in result.records if not r.warmup]
    assert len(recs) == len(Path(SESSIONS).read_text().splitlines()) - 1
    block = sim.config.block_size
    for r in recs:
        assert r.status == "ok", r.error
        assert r.prompt_tokens == r.planned_prefix_tokens + r.planned_input_tokens
        assert r.completion_tokens == r.planned_output_tokens
        if cfg.backend.name != "openai-chat":  # chat re-encodes text: not exact ids
            assert r.cached_tokens >= r.planned_prefix_tokens - block, r.request_id
        assert r.first_token_ns >= r.dispatch_ns and r.end_ns >= r.last_token_ns


class Recording(Wrapped):
    """Wraps the real transport to keep what was sent and what came back."""

    def __init__(self, inner):
        super().__init__(inner)
        self.sent = {}

    async def send(self, codec, req, rec):
        out = await self.inner.send(codec, req, rec)
        self.sent[req.request_id] = (list(req.prompt_ids), out)
        return out


@pytest.mark.parametrize("backend", ["openai", "vllm-tokens", "sglang-tokens"])
async def test_prefix_preserving_carries_exact_prompt_plus_output_ids(sim, backend):
    from workbench.backends import BACKENDS as REG
    from workbench.clock import WallClock
    from workbench.context.tokens import TokenPool
    from workbench.replay.plan import build_plan
    from workbench.replay.prepare import load_workload
    from workbench.replay.runner import Runner

    cfg = _cfg(sim.base_url, backend=backend, context="prefix-preserving")
    plan = build_plan(cfg, load_workload(cfg))
    records = []
    async with Transport(TransportOptions(sim.base_url)) as transport:
        rec = Recording(transport)
        runner = Runner(cfg, plan, run_id="t", codec=REG.get(backend), sender=rec,
                        clock=WallClock(), pool=TokenPool(), sink=records.append)
        async with asyncio.timeout(60):
            await runner.execute()
    by_session = {}
    for r in sorted(records, key=lambda r: (r.session_id, r.round_idx)):
        by_session.setdefault(r.session_id, []).append(r)
    checked = 0
    for rounds in by_session.values():
        for prev, nxt in itertools.pairwise(rounds):
            prompt, out = rec.sent[prev.request_id]
            next_prompt, _ = rec.sent[nxt.request_id]
            p = nxt.planned_prefix_tokens
            assert len(out) == prev.planned_output_tokens
            assert next_prompt[:p] == (prompt + out)[:p]
            checked += 1
    assert checked > 0


def test_ordered_admission_20_runs_and_slots_held_through_tool_waits():
    cfg = _cfg("sim", arrival={"max_concurrency": 2, "tool_wait_scale": 1.0})
    orders = []
    for _ in range(20):
        result = simulate(cfg, engine={"speedup": 10.0})
        life = sorted(result.lifecycle, key=lambda d: (d["admitted_ns"], d["unit_ordinal"]))
        orders.append([d["unit_ordinal"] for d in life])
        # a session holds its slot across rounds and tool waits: no two units that share a
        # routing slot overlap in time, and at most 2 are ever active
        by_slot = {}
        for d in result.lifecycle:
            by_slot.setdefault(d["routing_slot"], []).append((d["admitted_ns"], d["end_ns"]))
        for spans in by_slot.values():
            spans.sort()
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert start >= end
        assert set(by_slot) <= {0, 1}
        for rec in result.records:
            owner = next(d for d in result.lifecycle if d["unit_ordinal"] == rec.unit_ordinal)
            assert owner["admitted_ns"] <= rec.dispatch_ns <= rec.end_ns <= owner["end_ns"]
    assert all(o == sorted(o) for o in orders)
    assert len({tuple(o) for o in orders}) == 1


async def test_cancel_midway_keeps_finished_records(sim, tmp_path):
    cfg = _cfg(sim.base_url, out_dir=str(tmp_path), run_id="cancelled",
               arrival={"tool_wait_scale": 1.0})
    first = asyncio.Event()  # set when the first finished record has been written
    task = asyncio.ensure_future(run_async(cfg, progress=lambda done, total: first.set()))
    records = tmp_path / "cancelled" / "records.jsonl"
    async with asyncio.timeout(30):
        await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lines = records.read_text().splitlines()
    parsed = [orjson.loads(line) for line in lines]
    assert any(p["status"] == "ok" for p in parsed)
    manifest = orjson.loads((tmp_path / "cancelled" / "manifest.json").read_bytes())
    assert manifest["status"] == "cancelled"


async def test_stop_event_ends_run_cleanly(sim, tmp_path):
    cfg = _cfg(sim.base_url, out_dir=str(tmp_path), run_id="stopped",
               arrival={"tool_wait_scale": 1.0})
    stop = asyncio.Event()
    seen: list[tuple[int, int]] = []

    def on_progress(done: int, total: int) -> None:  # stop once the first record is in
        seen.append((done, total))
        stop.set()

    async with asyncio.timeout(30):
        result = await run_async(cfg, stop=stop, progress=on_progress)
    assert seen[0][0] < seen[0][1]  # stopped with requests still to go
    assert result.cancelled
    assert Path(result.run_dir, "summary.json").exists()


async def test_server_down_at_start_is_one_clear_error():
    from workbench.errors import WorkbenchError

    cfg = _cfg("http://127.0.0.1:9", arrival={"max_concurrency": 1})
    with pytest.raises(WorkbenchError, match="cannot reach"):
        async with asyncio.timeout(30):
            await run_async(cfg)
