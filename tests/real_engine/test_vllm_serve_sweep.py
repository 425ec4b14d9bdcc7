"""``sweep --serve`` and ``--profile`` against the real vLLM (CPU, tiny random-weight Llama).

The sweep: two server points (``--max-num-seqs 2`` and ``8``, each its own ``vllm serve``
started by ``scripts/vllm_cpu.sh serve`` in its own process group) × two client rates on
a tiny synthetic trace: each server's log kept in the sweep directory, every point done
with every request ok, the Pareto plot rendered, no vLLM process left afterwards.

The profile: one server started by ``scripts/vllm_cpu.sh serve`` with
``VLLM_CPU_PROFILE_DIR`` (a torch profiler *without Python stacks*: with vLLM's default,
stacks on, the CPU worker's trace of 4 requests grew to 18 GB of memory and a 72 MB file,
and ``/stop_profile`` had not answered after 20 minutes; docs/real-engines.md,
"Profiling"), 4 requests in the window. Counts and bookkeeping, never timings.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

import workbench as wb
from tests.proctree import descendants, kill_left, living
from workbench.report.pareto import best_sentence, pareto_frame
from workbench.storage.rundir import load
from workbench.sweeps.serve import ManagedServer, ServeSpec

from .conftest import SCRIPT, _set_up

pytestmark = pytest.mark.real_engine

TRACE = "synthetic:random,requests=4,input=fixed:48,output=fixed:4,rate=4,seed=3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(1200)  # two vLLM start-ups (~70 s each on this machine) and 4 points
async def test_server_sweep_on_vllm(tmp_path: Path) -> None:
    env = {**os.environ, "VLLM_CPU_DEV_MODE": "1"}
    _set_up(env, os.environ.get("WORKBENCH_REAL_ENGINE") == "1")
    port = free_port()
    command = f"bash {SCRIPT} serve -- --port {port} --max-num-seqs {{seqs}}"
    cfg = {"trace": TRACE, "target": f"http://127.0.0.1:{port}",
           "arrival": {"output_len": "fixed:4"},
           "backend": {"name": "vllm-tokens", "options": {"model": "tiny-llama"}}}
    me = os.getpid()
    seen: dict[int, int] = {}
    said: list[str] = []

    def progress(text: str) -> None:
        said.append(text)
        print(text, file=sys.stderr)
        if "ready after" in text:
            seen.update(descendants(me, b"vllm"))

    try:
        s = await wb.sweep_async(cfg, {"arrival.rate": [2, 8]}, slo="e2e_ms:p90<=600000",
                                 serve=ServeSpec(command, {"seqs": [2, 8]},
                                                 ready_timeout_s=400, grace_s=30),
                                 out_dir=tmp_path, sweep_id="serve", gpus=1,
                                 progress=progress)
        assert len(seen) >= 2
        assert living(seen) == []  # every vLLM process of both servers is gone
        assert living(descendants(me, b"vllm")) == []
    finally:
        kill_left(seen)
    m = s.manifest
    failures = [p.get("failure") for p in m.points if p["status"] != "done"]
    assert m.status == "completed", failures
    assert [p["params"]["serve.seqs"] for p in m.points] == [2, 2, 8, 8]
    for name, seqs in (("s000", "2"), ("s001", "8")):
        rec = m.servers[name]
        assert "--max-num-seqs" in rec["argv"] and seqs in rec["argv"]
        assert rec["stopped"] in ("SIGTERM", "SIGKILL after 30 s")
        log_text = (s.sweep_dir / rec["stdout"]).read_text() + \
            (s.sweep_dir / rec["stderr"]).read_text()
        # vLLM logs its non-default arguments: this server's own max_num_seqs
        assert re.search(rf"max_num_seqs['\"]?\s*[:=]\s*{seqs}\b", log_text), log_text[-2000:]
    for point, run_dir in zip(m.points, s.run_dirs, strict=True):
        run = load(run_dir)
        assert [r.status for r in run.records] == ["ok"] * 4
        assert point["runs"][0]["flush"]["ok"] is True
    df = pareto_frame(s)
    assert len(df) == 4 and df["on_frontier"].any()
    fig = wb.sweep_plot(s, "pareto")
    fig.savefig(tmp_path / "pareto.png")
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    text = best_sentence(s)
    print(text, file=sys.stderr)
    assert text.startswith("Highest throughput under E2E p90 ≤ ")


@pytest.mark.timeout(600)  # one vLLM start-up (~20-70 s here) and 4 short requests
async def test_profile_on_vllm(tmp_path: Path) -> None:
    env = {**os.environ, "VLLM_CPU_DEV_MODE": "1"}
    _set_up(env, os.environ.get("WORKBENCH_REAL_ENGINE") == "1")
    port = free_port()
    traces = tmp_path / "torch-traces"
    argv = ["env", f"VLLM_CPU_PROFILE_DIR={traces}", "bash", str(SCRIPT), "serve", "--",
            "--port", str(port)]
    server = ManagedServer(argv, f"http://127.0.0.1:{port}", tmp_path / "servers", "prof",
                           ready_timeout_s=400, grace_s=30)
    try:
        server.start()
        await server.wait_ready()
        result = await wb.run_async({
            "trace": TRACE, "target": server.url, "arrival": {"output_len": "fixed:4"},
            "out_dir": str(tmp_path / "runs"),
            "backend": {"name": "vllm-tokens", "options": {"model": "tiny-llama"},
                        "profile": True, "profile_dir": str(traces)}})
    finally:
        stopped = server.stop()
    profile = result.manifest.profile
    print(f"profile: {profile}; server {stopped}", file=sys.stderr)
    assert stopped["stopped"] in ("SIGTERM", "SIGKILL after 30 s")
    assert [r.status for r in result.records] == ["ok"] * 4
    assert profile["start"]["status"] == 200 and profile["stop"]["status"] == 200
    files = [Path(f) for f in profile["files"]]
    assert files and all(f.parent == traces for f in files)
    from workbench.plurals import counted

    assert profile["where"] == f"{counted(len(files), 'trace file')} in {traces}"
    # the worker's torch trace (rank0.*) and the API server's (*.async_llm.*), both gzipped
    # Chrome traces; the worker's summary table counts the model's forward passes
    names = sorted(f.name for f in files)
    assert any(n.startswith("rank0.") and n.endswith(".pt.trace.json.gz") for n in names), names
    assert any(".async_llm." in n and n.endswith(".pt.trace.json.gz") for n in names), names
    worker = json.loads(gzip.decompress(
        next(f for f in files if f.name.startswith("rank0.") and f.suffix == ".gz")
        .read_bytes()))
    assert any(e.get("name", "").startswith("execute_context") for e in worker["traceEvents"])
