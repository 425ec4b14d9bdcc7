"""Parity with AIPerf on the same Weka files, both against the embedded engine.

AIPerf 0.13.0 (``scripts/aiperf.sh``) and workbench each replay the four files of
``tests/fixtures/weka-parity`` against a fresh ``workbench sim serve`` (block size 64,
as the files; zero-cost steps: seconds per run). What each sent is read on the server's
side (``weka_parity``), and held to rules that name every difference
(docs/aiperf-parity.md):

- requests per conversation: every request of every file, sub-agents as their own
  conversations;
- output tokens: ``out`` for both (``max_tokens``);
- prompt tokens: ``in`` for workbench (token ids); for AIPerf ``in`` plus the engine's
  chat template, 2 tokens per message + 1 (AIPerf's content is ``in`` tokens exactly);
- sub-agents: started after the parent request before the marker ended; joined by the
  parent request right after the marker (workbench) or by the first parent request
  recorded after the sub-agent's recorded end, none if no such request (AIPerf);
- prefix-cache hits: per request the ideal from the hash ids (workbench exactly, AIPerf
  within one block), a sub-agent racing a sibling at most the ideal; in total within 1 %.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from weka_parity import (
    FILES,
    FIXTURES,
    check_cached,
    check_counts,
    check_order,
    check_tokens,
    debug_rows,
    ideal_cached,
    load_files,
    read_aiperf,
    run_aiperf,
)

from workbench.sim.process import serve_sim_process

ENGINE = {"block_size": 64, "zero_cost": True}


def _inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "weka"
    folder.mkdir()
    for name in FILES:
        shutil.copy(FIXTURES / name, folder / name)
    return folder


async def test_aiperf_replays_weka_files_by_the_stated_rules(aiperf_ready, tmp_path):
    files = load_files(FIXTURES)
    inputs = _inputs(tmp_path)
    async with serve_sim_process(**ENGINE) as sim:
        await run_aiperf(sim.base_url, inputs, tmp_path / "aiperf")
        rows = debug_rows(sim.base_url)
    run = read_aiperf(tmp_path / "aiperf", rows)
    assert len(run.sent) == len(rows) == 91  # 9 + 44 + 20 + 12 + 3 + 3: nothing else sent
    assert check_counts(files, run) == []
    assert check_tokens(files, run) == []
    assert check_order(files, run) == []
    assert check_cached(files, run) == []
    ideal = sum(ideal_cached(files, run).values())
    got = sum(s.cached_tokens for s in run.sent)
    assert abs(got - ideal) <= 0.01 * ideal, (got, ideal)
