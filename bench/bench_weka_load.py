"""How long a folder of captured coding-agent conversations takes to load, and its peak
memory: ``load_trace(FOLDER)`` (format ``weka``, docs/weka-traces.md) in a fresh process,
wall time and ``ru_maxrss``. The upstream set (callanjfox/kv-cache-tester ``traces/``) is
not bundled: fetch it and pass its folder. Run: ``.venv/bin/python bench/bench_weka_load.py
FOLDER [--reps 3]``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
t = time.perf_counter()
from workbench.traces.load import load_trace
w = load_trace(sys.argv[1])
print(json.dumps({"s": time.perf_counter() - t, "units": len(w.units), "rounds": w.n_rounds,
                  "conversations": w.meta["conversations"], "subagents": w.meta["subagents"],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for _ in range(args.reps):  # bounded: one fresh process a repeat
        out = subprocess.run([sys.executable, "-c", CHILD, args.folder], capture_output=True,
                             text=True, check=True, timeout=600).stdout
        runs.append(json.loads(out))
    first = runs[0]
    times = sorted(r["s"] for r in runs)
    print(f"{first['conversations']} conversations, {first['subagents']} sub-agents, "
          f"{first['rounds']:,} requests: load {times[len(times) // 2]:.1f} s median "
          f"(min {times[0]:.1f}, max {times[-1]:.1f}), peak "
          f"{max(r['peak_mb'] for r in runs):,.0f} MB")


if __name__ == "__main__":
    main()
