"""Canonical digests of a matrix of virtual runs, to compare two trees (issue 28).

Method: run ``workbench.simulate`` on the bundled traces under engine settings that
reach every path of the engine (prefix hits, chunked prefill, preemption, a cluster
behind each router, disaggregation, attention-DP ranks, the host KV tier, a preset, SGLang's
prefill and decode batches apart with its admission reserve, a
synthetic agentic workload, the idle wake) and print one line per case: its name, the canonical
report's sha256 and the CPU seconds it took. Run it in two trees (``PYTHONPATH`` at
the other one; its first line, on stderr, names the tree imported) and diff the outputs:
a representation change of the engine must leave every digest byte-identical
(docs/measurement-rules.md). From the repo root:

    .venv/bin/python bench/digest_matrix.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import workbench
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.report.canonical import run_digest

MOON = str(data_path("mooncake/conversation_trace_head600.jsonl"))
TRACELAB = str(data_path("tracelab/multi_session_example.csv"))
LARGE = str(data_path("tracelab/multi_session_large.csv"))

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "moon-default": ({"trace": {"path": MOON, "max_items": 300}}, {}),
    "moon-tight": ({"trace": {"path": MOON, "max_items": 300}},
                   {"num_blocks": 3000, "max_num_seqs": 64, "max_num_batched_tokens": 2048}),
    "moon-nocache": ({"trace": {"path": MOON, "max_items": 150}},
                     {"enable_prefix_caching": False, "num_blocks": 4000}),
    "moon-wake": ({"trace": {"path": MOON, "max_items": 200}},
                  {"idle_wake_ms": 3.0, "request_overhead_ms": 5.0, "intake_ms": 1.0,
                   "decode_seq_ms": 0.05}),
    "moon-cluster-pa": ({"trace": {"path": MOON, "max_items": 300}},
                        {"workers": 4, "router": "prefix-aware", "num_blocks": 6000}),
    "moon-cluster-rr": ({"trace": {"path": MOON, "max_items": 200}},
                        {"workers": 3, "router": "round-robin"}),
    "moon-disagg": ({"trace": {"path": MOON, "max_items": 200}},
                    {"workers": 4, "router": "prefix-aware",
                     "disagg": {"prefill": 2, "decode": 2}}),
    "moon-dp": ({"trace": {"path": MOON, "max_items": 200}},
                {"workers": 2, "router": "round-robin", "dp": 2, "num_blocks": 6000}),
    "moon-host": ({"trace": {"path": MOON, "max_items": 300}},
                  {"num_blocks": 4000, "host_kv_gb": 2.0, "host_kv_gbps": 20.0}),
    "moon-preset": ({"trace": {"path": MOON, "max_items": 200}},
                    {"preset": "llama-3.1-8b/h100/tp1"}),
    "moon-burst": ({"trace": {"path": MOON},
                    "arrival": {"mode": "saturated", "max_concurrency": 300}},
                   {"num_blocks": 20000, "max_num_seqs": 128}),
    "moon-sglang": ({"trace": {"path": MOON, "max_items": 300}},
                    {"scheduler": "sglang", "num_blocks": 3000, "max_num_batched_tokens": 4096}),
    "tracelab-pp": ({"trace": str(TRACELAB), "context": "prefix-preserving"},
                    {"num_blocks": 512}),
    "tracelab-large": ({"trace": str(LARGE), "context": "prefix-preserving",
                        "arrival": {"mode": "saturated", "max_concurrency": 32}},
                       {"num_blocks": 2000, "max_num_seqs": 16}),
}


def synthetic_case() -> tuple[dict[str, Any], dict[str, Any], Any]:
    """A small closed-loop agentic workload on a 4-worker cluster."""
    from workbench.workloads.synthetic import parse_synthetic, synthetic_workload

    spec = parse_synthetic("synthetic:sessions=30,rounds=uniform:2..8,input=lognormal:600,0.8,"
                           "output=fixed:40,tool_wait=uniform:100..2000")
    wl = synthetic_workload(spec, np.random.default_rng(0))
    cfg = {"trace": {"path": str(MOON)},
           "arrival": {"mode": "saturated", "max_concurrency": 12}}
    return cfg, {"workers": 4, "router": "prefix-aware", "num_blocks": 800}, wl


def run(name: str) -> str:
    wl = None
    if name == "synthetic":
        cfg, engine, wl = synthetic_case()
        wl = dataclasses.replace(wl, source=str(MOON))
    else:
        cfg, engine = CASES[name]
    cpu = time.process_time()
    result = simulate(cfg, engine=engine, workload=wl)
    digest = run_digest(result)
    return f"{name} {digest} {time.process_time() - cpu:.2f}s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    # which tree the digests are of: from a worktree without PYTHONPATH the installed
    # (editable) checkout is imported, not the files beside this script
    print(f"# workbench from {Path(workbench.__file__).resolve().parent}", file=sys.stderr)
    for name in args.only or [*CASES, "synthetic"]:
        print(run(name), flush=True)


if __name__ == "__main__":
    main()
