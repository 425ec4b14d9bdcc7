"""Where a virtual replay's time and memory go (issue 28): cProfile and peak RSS.

Method: load the trace once, then run ``workbench.simulate`` once (one engine, or
``--workers N`` prefix-aware) and print the CPU time (``time.process_time``: the
machine is shared, wall time is not this process's), the peak resident memory of
this process (``ru_maxrss``, which includes the loaded trace; taken before and after
``summarize``, which builds frames of its own), and with
``--profile`` the functions with the most own time (cProfile; its overhead inflates
the total ~1.5-2x, the shares are what count). Run from the repo root:

    .venv/bin/python bench/profile_virtual.py --trace PATH [--max-items N] [--workers 16]
        [--profile] [--top 25] [--sort tottime|cumulative] [--dump FILE] [--engine JSON]
        [--tracemalloc]

``--tracemalloc`` traces the run's allocations instead (slow: use a slice) and prints
the source lines holding the most memory at the run's peak of traced memory.

cProfile's per-call cost inflates many-small-call code; for shares, sample instead
(bench/README.md, "profile"): ``pip install py-spy`` into the venv, then
``py-spy record -f raw -r 200 -o prof.raw -- .venv/bin/python bench/profile_virtual.py …``
and sum the raw stacks by frame.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import time
import tracemalloc
from pathlib import Path

from workbench.executors.virtual import simulate
from workbench.metrics import summarize
from workbench.replay.prepare import coerce_config, load_workload

DEFAULT = Path(__file__).resolve().parents[1] / "../shared/data/mooncake/conversation_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--max-items", type=int, default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--engine", default="{}", help="further engine knobs as JSON")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sort", default="tottime", help="pstats order (tottime, cumulative)")
    ap.add_argument("--dump", default=None, help="also write the cProfile stats here")
    ap.add_argument("--tracemalloc", action="store_true")
    args = ap.parse_args()
    cfg = coerce_config({"trace": {"path": args.trace, "max_items": args.max_items}})
    workload = load_workload(cfg)
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    engine = json.loads(args.engine)
    if args.workers > 1:
        engine = {"workers": args.workers, "router": "prefix-aware", **engine}
    prof = cProfile.Profile() if args.profile else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if args.tracemalloc:
        tracemalloc.start(1)
    if prof is not None:
        prof.enable()
    result = simulate(cfg, engine=engine, workload=workload)
    if prof is not None:
        prof.disable()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    traced = _traced(args.top) if args.tracemalloc else ""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before summarizing
    s = summarize(result)
    print(json.dumps({
        "requests": s["requests"], "workers": args.workers, "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2), "peak_rss_mb": round(peak),
        "peak_rss_with_summary_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rss_after_load_mb": round(rss_loaded),
        "actual_prefix_hit_rate": round(s["actual_prefix_hit_rate"], 4),
        "ttft_ms_p50": round(s["ttft_ms"]["p50"], 1),
    }))  # fmt: skip
    if prof is not None:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        if args.dump:
            stats.dump_stats(args.dump)
        stats.sort_stats(args.sort).print_stats(args.top)
        print(out.getvalue())
    if traced:
        print(traced)


def _traced(top: int) -> str:
    """The lines holding the most traced memory now, and the traced peak."""
    snap = tracemalloc.take_snapshot()
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    lines = [f"tracemalloc: {cur / 2**20:.1f} MB traced at the end, peak {peak / 2**20:.1f} MB"]
    lines += [str(s) for s in snap.statistics("lineno")[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
