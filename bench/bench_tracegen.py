"""Benchmark: tracegen over a raw session CSV of 357,161 rounds (target < 15 s).

Method: draw a raw session CSV shaped like a real coding-agent export (rounds
per session uniform 2..200, prefix growing by input+output with a 2 % chance of
a compaction that drops the prefix, a reported first-round prefix of ~12k tokens
so the policy has tokens to fold, arrivals 1 session/s), then time, each the
best of ``--repeat`` runs in this process:

1. reading the raw CSV (``load_trace``, format auto-detected);
2. ``tracegen`` with each policy (read raw, select, plan, write CSV + manifest +
   plan sidecars, read the output back with the canonical reader);
3. reading the canonical output alone, with its sidecars (the plan sidecar is
   one JSON object per round) and without;
4. for reference, both CSV readers with the column-wise fast path switched off
   (the strict row-by-row path that owns every error message).

Run: ``.venv/bin/python bench/bench_tracegen.py [--rounds N] [--repeat K]``.
Results go in ``bench/README.md`` (area "tracegen", ``#tracegen``).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from workbench import load_trace, tracegen
from workbench.traces import canonical

ROUNDS = 357_161


def write_raw_csv(path: Path, total_rounds: int, seed: int = 0) -> int:
    """A raw ``session`` CSV with exactly ``total_rounds`` rows; returns the session count."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(2, 200, size=total_rounds // 2 + 1, endpoint=True)
    cum = np.cumsum(counts)
    n = int(np.searchsorted(cum, total_rounds)) + 1
    counts = counts[:n]
    counts[-1] -= int(cum[n - 1]) - total_rounds
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sid = np.repeat(np.arange(n), counts)
    idx = np.arange(total_rounds) - np.repeat(starts, counts)
    inputs = np.maximum(np.rint(rng.lognormal(np.log(1500), 1.0, total_rounds)), 1).astype(int)
    outputs = np.maximum(np.rint(rng.lognormal(np.log(300), 0.8, total_rounds)), 1).astype(int)
    fresh = rng.random(total_rounds) < 0.02
    fresh[starts] = True
    seg = np.maximum.accumulate(np.where(fresh, np.arange(total_rounds), 0))
    before = np.cumsum(inputs + outputs) - (inputs + outputs)
    prefix = before - before[seg]
    prefix[starts] = rng.integers(8000, 16000, size=n)  # reported system prompt
    waits = rng.uniform(0, 5000, total_rounds)
    arrivals = np.repeat(np.cumsum(rng.exponential(1000.0, n)), counts)
    with open(path, "w") as fh:
        fh.write("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                 "tool_wait_after_ms\n")
        fh.writelines(
            f"{s},{a:.6f},{i},{p},{x},{o},{w:.6f}\n"
            for s, a, i, p, x, o, w in zip(
                sid.tolist(), arrivals.tolist(), idx.tolist(), prefix.tolist(),
                inputs.tolist(), outputs.tolist(), waits.tolist(), strict=True,
            )
        )
    return n


def best_of(repeat: int, fn: Callable[[], object]) -> str:
    """Best wall time and best CPU time of this process (robust to a shared machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return f"{min(wall):6.2f} s wall {min(cpu):6.2f} s CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.csv"
        sessions = write_raw_csv(raw, args.rounds)
        size_mb = raw.stat().st_size / 1e6
        print(f"python {platform.python_version()} on {platform.machine()}, "
              f"{platform.processor() or platform.platform()}")
        print(f"raw CSV: {args.rounds} rounds, {sessions} sessions, {size_mb:.1f} MB")
        t = best_of(args.repeat, lambda: load_trace(raw))
        print(f"read raw session CSV          {t}")
        out = Path(tmp) / "out.csv"
        for policy in ("trace-reported", "prefix-preserving"):
            t = best_of(args.repeat, lambda p=policy: tracegen(raw, out, policy=p))  # type: ignore[misc]
            print(f"tracegen {policy:<20} {t}")
        t = best_of(args.repeat, lambda: load_trace(out))
        print(f"read canonical + sidecars     {t}")
        t = best_of(args.repeat, lambda: load_trace(out, sidecars=False))
        print(f"read canonical CSV only       {t}")
        canonical.FAST_PATH_MIN_ROWS = 10**12
        t = best_of(args.repeat, lambda: load_trace(raw))
        print(f"read raw, strict path only    {t}")
        t = best_of(args.repeat, lambda: load_trace(out, sidecars=False))
        print(f"read canonical, strict only   {t}")


if __name__ == "__main__":
    main()
