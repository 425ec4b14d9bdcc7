"""llama.cpp's ``llama-server`` stopped with SIGTERM in the middle of a replay.

What this build does on SIGTERM (seen here, 2026-12-07, llama.cpp b1-0c1e570): it closes its
listening socket at once (``/health``, ``/v1/models`` and completions are refused), lets
the request on its slot stream on, answers a request waiting for the slot nothing at all
(not even a status line) and exits some 30 s later, cutting what still streams. The
replay must end by itself: the queued request on the stream idle timeout, the refused
ones as ``connect_failed`` records, and the run stopped by ``arrival.stop_after_refused``
(docs/measurement-rules.md, "A server that dies"); its own server instance, never the
module fixture's of ``test_llama_cpp.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.executors.dispatch import run_async

from .test_llama_cpp import HOME, INSTANCE, LlamaServer, _serve

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(300)]

NAME = INSTANCE + "-sigterm"
IDLE_S = 5.0  # the stream idle timeout that ends the request the server never answers


@pytest.fixture
def doomed() -> Iterator[tuple[LlamaServer, int]]:
    for server in _serve(NAME, "0"):
        yield server, int(json.loads((HOME / f"{NAME}.json").read_text())["pid"])


def _trace(tmp: Path) -> str:
    rows = ["session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
            "tool_wait_after_ms"]
    rows += [f"{s},0,{k},0,32,400,0" for s in range(8) for k in range(3)]
    (tmp / "t.csv").write_text("\n".join(rows) + "\n")
    return str(tmp / "t.csv")


async def test_a_replay_against_a_sigtermed_llama_server_ends_by_itself(
        tmp_path: Path, doomed: tuple[LlamaServer, int]) -> None:
    server, pid = doomed
    termed: list[int] = []

    def progress(done: int, _total: int) -> None:  # the event: the first request ended
        if not termed:
            termed.append(done)
            os.kill(pid, signal.SIGTERM)

    cfg = {
        "trace": _trace(tmp_path),
        "arrival": {"mode": "saturated", "max_concurrency": 2, "stop_session_on_error": False,
                    "stop_after_refused": 3, "stream_idle_timeout_s": IDLE_S},
        "backend": {"name": "openai", "options": {"model": server.model}},
        "target": server.url,
        "out_dir": str(tmp_path / "runs"), "run_id": "sigterm",
    }
    async with asyncio.timeout(120):  # a guard against a hang, never a timed assertion
        result = await run_async(cfg, progress=progress)
    recs = result.records
    assert termed and recs[0].status == "ok"
    assert all(r.status == "ok" or r.error for r in recs)
    refused = [r for r in recs if r.extra.get("connect_failed")]
    assert len(refused) >= 3 and all(r.dispatch_ns is None for r in refused)
    m = result.manifest
    assert (m.status, m.stop_reason) == ("partial", "server_refused")
    assert m.completion["not_sent_rounds"] == 24 - len(recs) > 0
    assert m.client["not_connected"] == len(refused)
    assert m.client["release_lag_ms"]["count"] == len(recs) - len(refused)
