"""Benchmark: analyse a synthetic 1,000,000-request run within 2 GB of memory.

Method:

1. ``generate`` (its own process) writes a run directory in streaming fashion:
   ``records.jsonl`` of ``--requests`` records shaped like a real replay —
   sessions of 1..20 rounds with a growing prefix (a new session every
   ~20 ms, so ~50 sessions overlap), lognormal output lengths
   (median ~60 tokens, capped at 512), one stream event per token (every 8th
   event carries 2 ids), TTFT lognormal around 150 ms growing with the prompt,
   ITL ~N(12 ms, 3 ms), server usage with cached tokens in 16-token blocks,
   0.5 % errors, 0.2 % requests without a cached count — plus a manifest. Rows
   are built 10,000 at a time and written with orjson; nothing accumulates.
2. ``analyse`` runs in a **fresh process** (so ``ru_maxrss`` is the analysis
   alone): ``columns.convert`` (JSONL → ``records.parquet`` in streaming
   batches), then ``scan.summarize`` (every ``summary.json`` number) and
   ``scan.by_round_index``, reading the needed columns with pyarrow. Reported:
   wall time of each step and the process's peak RSS
   (``resource.getrusage(RUSAGE_SELF).ru_maxrss``), which must stay under 2 GB.
   ``--token-times`` keeps the token lists in the Parquet file (pooled ITL
   percentiles) — more bytes, more time.

Run: ``.venv/bin/python bench/bench_large_run.py [--requests N] [--dir DIR] [--token-times]``.
Results go in ``bench/README.md`` (area "large runs", ``#large-runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

CHUNK = 10_000
BASE_NS = 5_000_000_000_000
LIMIT_BYTES = 2 * 1024**3


def _chunk_rows(rng: np.random.Generator, start: int, n: int, state: dict) -> list[bytes]:
    out_len = np.clip(rng.lognormal(4.1, 0.8, n), 1, 512).astype(int)
    fresh = rng.integers(50, 4000, n)
    ttft_ms = rng.lognormal(5.0, 0.4, n)
    status = rng.random(n)
    lines = []
    for j in range(n):
        if state["left"] == 0:  # a new session
            state["unit"] += 1
            state["left"] = int(rng.integers(1, 21))
            state["round"], state["prefix"] = 0, 0
            state["arrival"] += int(rng.exponential(20e6))  # ~50 sessions/s, overlapping
            state["t"] = state["arrival"]
        rnd, prefix, k = state["round"], state["prefix"], int(out_len[j])
        dispatch = state["t"] + int(rng.integers(0, 2_000_000))
        first = dispatch + int(ttft_ms[j] * 1e6 * (1 + prefix / 50_000))
        gaps = np.maximum(rng.normal(12e6, 3e6, max(k - 1, 0)), 1e5).astype(np.int64)
        times = np.concatenate(([first], first + np.cumsum(gaps))).astype(np.int64)
        counts = np.ones(k, dtype=np.int64)
        counts[7::8] = 2  # a few events carry two ids
        n_events = int(np.searchsorted(np.cumsum(counts), k) + 1)
        times, counts = times[:n_events], counts[:n_events]
        counts[-1] -= int(counts.sum()) - k
        end = int(times[-1]) + 300_000
        err = status[j] < 0.005
        prompt = prefix + int(fresh[j])
        rec = {
            "run_id": "large", "request_id": f"u{state['unit']}-r{rnd}",
            "unit_ordinal": state["unit"], "session_id": f"s{state['unit']}", "round_idx": rnd,
            "backend": "openai", "policy": "trace-reported", "planned_prefix_tokens": prefix,
            "planned_input_tokens": int(fresh[j]), "planned_output_tokens": k,
            "sent_prompt_tokens": prompt, "scheduled_ns": state["t"],
            "released_ns": state["t"] + 20_000, "admitted_ns": state["t"] + 40_000,
            "dispatch_ns": dispatch, "first_token_ns": None if err else int(times[0]),
            "last_token_ns": None if err else int(times[-1]), "end_ns": end,
            "token_times_ns": [] if err else times.tolist(),
            "token_counts": [] if err else counts.tolist(),
            "http_status": 500 if err else 200, "prompt_tokens": None if err else prompt,
            "completion_tokens": None if err else k,
            "cached_tokens": None if err or status[j] > 0.998 else prefix // 16 * 16,
            "cached_tokens_reported": not err, "finish_reason": None if err else "length",
            "routing_slot": state["unit"] % 256, "status": "error" if err else "ok",
            "error": "HTTP 500" if err else None, "schema": 1,
        }  # fmt: skip
        lines.append(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
        state["round"] += 1
        state["left"] -= 1
        state["prefix"] = prompt + k
        state["t"] = end + int(rng.exponential(200e6))  # next round after a tool wait
    return lines


def generate(run_dir: Path, n: int, seed: int = 0) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    state = {"unit": -1, "left": 0, "round": 0, "prefix": 0, "t": BASE_NS, "arrival": BASE_NS}
    t0 = time.perf_counter()
    with open(run_dir / "records.jsonl", "wb") as fh:
        for start in range(0, n, CHUNK):
            fh.write(b"".join(_chunk_rows(rng, start, min(CHUNK, n - start), state)))
    manifest = {"run_id": "large", "config": {"arrival": {"mode": "trace-timed"}},
                "ideal_prefix_hit_rate": None, "synthetic": True}  # fmt: skip
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return {
        "generate_s": time.perf_counter() - t0,
        "jsonl_bytes": (run_dir / "records.jsonl").stat().st_size,
        "units": state["unit"] + 1,
        "generate_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def analyse(run_dir: Path, token_times: bool) -> dict:
    from workbench.metrics import columns, scan

    t0 = time.perf_counter()
    pq_file = columns.convert(run_dir, token_times=token_times)
    t1 = time.perf_counter()
    summary = scan.summarize(run_dir)
    t2 = time.perf_counter()
    rounds = scan.by_round_index(run_dir)
    t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "convert_s": t1 - t0, "summarize_s": t2 - t1, "by_round_s": t3 - t2,
        "parquet_bytes": pq_file.stat().st_size, "peak_rss_bytes": peak,
        "within_2gb": peak < LIMIT_BYTES, "requests": summary["requests"],
        "ok": summary["ok"], "errors": summary["errors"],
        "ttft_ms": summary["ttft_ms"], "tpot_ms": summary["tpot_ms"],
        "itl_ms": summary["itl_ms"], "e2e_ms": summary["e2e_ms"],
        "output_token_throughput_tps": summary["output_token_throughput_tps"],
        "actual_prefix_hit_rate": summary["actual_prefix_hit_rate"],
        "round_groups": len(rounds),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="run directory (default: a temp dir)")
    ap.add_argument("--token-times", action="store_true", help="keep token lists in Parquet")
    ap.add_argument("--analyse-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analyse_only:  # the child process
        print(json.dumps(analyse(args.dir, args.token_times)))
        return
    run_dir = args.dir or Path(tempfile.mkdtemp(prefix="wb-large-")) / "run"
    gen = generate(run_dir, args.requests) if not (run_dir / "records.jsonl").exists() else {}
    print(json.dumps(gen))
    cmd = [sys.executable, __file__, "--analyse-only", "--dir", str(run_dir)]
    cmd += ["--token-times"] if args.token_times else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=3600,
                         env={**os.environ, "PYTHONHASHSEED": "0"})  # fmt: skip
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(res, indent=1))
    print(f"peak RSS {res['peak_rss_bytes'] / 2**20:.0f} MiB "
          f"({'<' if res['within_2gb'] else '>='} 2 GiB); convert {res['convert_s']:.1f} s, "
          f"summarize {res['summarize_s']:.2f} s, by round {res['by_round_s']:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
