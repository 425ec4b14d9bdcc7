"""agentic-bench 0.2.0 against ``workbench sim serve --workers N``: one endpoint, N workers.

A client nobody here wrote (agentic-bench, installed as in ``run_peers.py``: a venv
outside the repo with ``agentic-bench==0.2.0`` from PyPI) runs its multi-turn
``random`` workload against the simulated cluster, once per router. It sees one
endpoint and reports the prefix-cache ratio from the usage the server returns
(``server_cached_tokens`` per turn). The server's own per-worker counters
(``/metrics``, one series per ``engine`` label) are read after each run, so the
table shows how the router spread the sessions and where the hits happened.

    .venv/bin/python bench/peers/run_abench_cluster.py [--workers 4] [--sessions 16]
        [--concurrency 8] [--turns 6] [--routers round-robin prefix-aware ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_peers import DEFAULT_VENV, ensure_venv

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 600
READY_TIMEOUT_S = 60


def start_server(workers: int, router: str, log: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "workbench", "sim", "serve", "--port", "0",
           "--workers", str(workers), "--router", router, "--speedup", "20"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fh = log.open("w")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        m = re.search(r"embedded engine on (http://\S+)", log.read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"sim serve did not start: {log.read_text()[-2000:]}")


def per_worker(url: str) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"):
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out.setdefault(s.labels["engine"], {})[fam.name.split(":")[1]] = s.value
    return out


def run_abench(py: Path, url: str, args: argparse.Namespace, out: Path) -> dict:
    cmd = [str(py), "-m", "abench", "run", "--base-url", url, "--model", "workbench-sim",
           "--dataset-name", "random", "--turns", str(args.turns), "--input-increment", "512",
           "--output-len", "32", "--num-sessions", str(args.sessions),
           "--max-concurrency", str(args.concurrency), "--no-gaps", "--warmup-requests", "0",
           "--metrics-interval", "0", "--progress-interval", "0", "--disable-tqdm",
           "--system-prompt-len", str(args.system_prompt_len),
           "--ready-check-timeout-sec", "10", "--output-file", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=RUN_TIMEOUT_S, cwd=out.parent)
    run = json.loads(out.read_text().splitlines()[-1])
    turns = [t for s in run["sessions"] for t in s["turns"]]
    ok = [t for t in turns if t["success"]]
    ttft = sorted(t["ttft"] * 1e3 for t in ok)
    return {
        "turns": len(turns), "ok": len(ok),
        "abench_prefix_cache_ratio": run["metrics"]["prefix_cache_ratio"],
        "ttft_ms_p50": ttft[len(ttft) // 2],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--system-prompt-len", type=int, default=0,
                    help="agentic-bench's shared system prompt (0: only a session's own "
                         "history can hit the cache, so routing shows)")
    ap.add_argument("--routers", nargs="*",
                    default=["round-robin", "least-loaded", "session-affinity", "prefix-aware"])
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = ap.parse_args()
    py = ensure_venv(args.venv)
    with tempfile.TemporaryDirectory(prefix="abench-cluster-") as tmp:
        for router in args.routers:
            proc, url = start_server(args.workers, router, Path(tmp) / f"{router}.log")
            try:
                row = run_abench(py, url, args, Path(tmp) / f"{router}.jsonl")
                workers = per_worker(url)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            row["router"] = router
            row["server_hit_rate_by_worker"] = {
                w: round(v["prefix_cache_hits"] / v["prefix_cache_queries"], 3)
                if v.get("prefix_cache_queries") else None
                for w, v in sorted(workers.items())
            }
            row["queries_by_worker"] = {w: int(v.get("prefix_cache_queries", 0))
                                        for w, v in sorted(workers.items())}  # fmt: skip
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
