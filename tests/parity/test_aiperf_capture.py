"""A capture of our own loads in AIPerf's Weka loader: the scripted agent of
``tests/capture`` (three sessions, one sub-agent) recorded by ``workbench capture`` in
front of the embedded engine, then the capture folder replayed by AIPerf 0.13.0 against
a fresh engine: every captured request sent, per conversation, with the recorded output
and the recorded prompt plus AIPerf's chat template (docs/capture.md, docs/aiperf-parity.md).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))  # the script

from capture_process import capture_process
from scripted_agent import Script
from weka_parity import (
    BLOCK,
    check_counts,
    check_order,
    check_tokens,
    debug_rows,
    load_files,
    read_aiperf,
    run_aiperf,
)

from workbench.capture import read_capture
from workbench.sim.process import serve_sim_process


async def test_a_capture_replays_in_aiperf(aiperf_ready: None, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # AIPerf's flattened-agent detection (docs/aiperf-parity.md) split the captured
    # sub-agent's second request off as an auxiliary call in 2 of 7 runs here, though it
    # extends the first by a block and starts 26 ms after its recorded end; its escape
    # hatch replays each sub-agent entry as recorded, which is what this test checks
    monkeypatch.setenv("AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS", "false")
    out = tmp_path / "capture"
    async with serve_sim_process(speedup=50.0) as sim, \
            capture_process(sim.base_url, out) as proxy:  # fmt: skip
        # replies of 80 tokens: every round's prompt grows by a whole 64-token block at the
        # least, as a real agent's do; with 12 (the script's default) a sub-agent's second
        # prompt could keep its first one's 2 blocks exactly, which AIPerf's flattened-agent
        # detection may split off as an auxiliary call of its own (docs/aiperf-parity.md)
        sent = await Script(max_tokens=80).run(proxy.url)
    assert proxy.returncode == 0, proxy.console
    docs = read_capture(out)
    assert len(docs) == 3 and all(d["block_size"] == BLOCK for d in docs)
    async with asyncio.timeout(240), serve_sim_process(block_size=BLOCK, zero_cost=True) as fresh:
        await run_aiperf(fresh.base_url, out, tmp_path / "aiperf")
        rows = debug_rows(fresh.base_url)
    files = load_files(out, sorted(p.name for p in out.glob("*.json")))
    run = read_aiperf(tmp_path / "aiperf", rows)
    assert len(run.sent) == len(sent) == 14  # every captured request, sub-agent's included
    assert check_counts(files, run) == []
    assert check_tokens(files, run) == []
    assert check_order(files, run) == []
