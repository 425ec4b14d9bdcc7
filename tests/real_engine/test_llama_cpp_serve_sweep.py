"""``sweep --serve`` with ``scripts/llama_cpp.sh serve``: a llama-server per server point.

Two server points (``--parallel 1`` and ``2``: llama-server's slots, a later flag than
the script's ``-np 1``, so the point's own wins) × one client point, on a tiny synthetic
trace (4 requests of 48 prompt tokens, 4 output tokens): each server started in a
process group of its own, its log kept in the sweep directory and naming its own slot
count, every request answered, and no llama-server left afterwards. Counts and
bookkeeping, never timings. The set-up rules are ``test_llama_cpp.py``'s (skipped
unless built, or built first with ``WORKBENCH_REAL_ENGINE=1 WORKBENCH_LLAMA_CPP=1``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import workbench as wb
from tests.proctree import descendants, kill_left, living
from workbench.storage.rundir import load
from workbench.sweeps.serve import ServeSpec

from .test_llama_cpp import SCRIPT, _ensure_set_up
from .test_vllm_serve_sweep import free_port

pytestmark = pytest.mark.real_engine

TRACE = "synthetic:random,requests=4,input=fixed:48,output=fixed:4,rate=8,seed=5"


@pytest.mark.timeout(300)  # two llama-server start-ups (~1 s each) and 2 short points
async def test_server_sweep_on_llama_cpp(tmp_path: Path) -> None:
    _ensure_set_up(dict(os.environ))
    port = free_port()
    command = f"bash {SCRIPT} serve -- --port {port} --parallel {{slots}}"
    cfg = {"trace": TRACE, "target": f"http://127.0.0.1:{port}",
           "arrival": {"output_len": "fixed:4"},
           # no preflight: its second probe races llama-server's close after a stream
           # (test_llama_cpp.py, KeepAliveRace); the points' own requests are retried
           "backend": {"name": "openai", "preflight": False,
                       "options": {"model": "tiny-llama"}}}
    me = os.getpid()
    seen: dict[int, int] = {}

    def progress(text: str) -> None:
        print(text, file=sys.stderr)
        if "ready after" in text:
            seen.update(descendants(me, b"llama-server"))

    try:
        s = await wb.sweep_async(cfg, {"arrival.max_concurrency": [2]},
                                 serve=ServeSpec(command, {"slots": [1, 2]},
                                                 ready_timeout_s=120, grace_s=10),
                                 out_dir=tmp_path, sweep_id="llama", progress=progress)
        assert len(seen) >= 2  # both servers were seen running
        assert living(seen) == []
        assert living(descendants(me, b"llama-server")) == []
    finally:
        kill_left(seen)
    m = s.manifest
    failures = [p.get("failure") for p in m.points if p["status"] != "done"]
    assert m.status == "completed", failures
    assert [p["params"]["serve.slots"] for p in m.points] == [1, 2]
    for name, slots in (("s000", 1), ("s001", 2)):
        rec = m.servers[name]
        assert rec["argv"][-2:] == ["--parallel", str(slots)]
        assert rec["stopped"] in ("SIGTERM", "SIGKILL after 10 s")
        log_text = (s.sweep_dir / rec["stdout"]).read_text() + \
            (s.sweep_dir / rec["stderr"]).read_text()
        # llama-server logs the slots it made: this server's own --parallel
        assert re.search(rf"n_slots = {slots}\b", log_text), log_text[-2000:]
    for point, run_dir in zip(m.points, s.run_dirs, strict=True):
        run = load(run_dir)
        assert [r.status for r in run.records] == ["ok"] * 4, point
        assert all(r.prompt_tokens == 48 for r in run.records)
