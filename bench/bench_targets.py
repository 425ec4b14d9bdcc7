"""Issue 28's target table in one sitting: trees side by side, each case as a user runs it.

Method: for every ``--tree NAME=PATH`` (a checkout: this one, or a ``git worktree`` of an
earlier commit, run with this venv's interpreter and ``PYTHONPATH`` at the tree), run
each case as a child process and read its wall time (``perf_counter`` around it), its
CPU (user + system) and its peak resident memory (``ru_maxrss``), both from
``os.wait4``, so the figures are the whole command's, summary and files included:

- ``one``: ``workbench simulate --trace T -o DIR`` (the default engine);
- ``digest``: ``one`` with ``--digest`` (the canonical report's sha256 too, recorded);
- ``sixteen``: the same with ``--engine workers=16 --engine router=prefix-aware``;
- ``sweep``: the tree's own ``bench/bench_sweep.py --trace T --parallel P`` (10 points
  over ``arrival.rate``, the whole trace each; its wall time, the sweep's processes'
  CPU summed).

Cases run one tree after the other, the trees alternating, ``--repeat`` times; with
``--cores C`` every child is pinned (``taskset -c C``), e.g. ``--cores 1`` for the
one-process cases on a quiet 2-core machine (the sweep uses the cores it is given).

``--together 0,1`` runs the one-process cases of the trees *at the same time*, one
per core (``taskset``), the cores swapped at every repeat: on a host whose speed drifts
(a shared machine), both trees see the same drift, and their ratio is the figure to
read (the brief's "ratios measured in one run"); each one's wall time is slower than
alone by what the two share (caches, memory bandwidth).
Run from the repository root:

    .venv/bin/python bench/bench_targets.py --tree after=. --tree before=../before \\
        [--trace PATH] [--cases one,sixteen,sweep] [--repeat 1] [--cores 1] [--parallel 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "../shared/data/mooncake/conversation_trace.jsonl"
SIXTEEN = ["--engine", "workers=16", "--engine", "router=prefix-aware"]
EXTRA = {"one": [], "digest": ["--digest"], "sixteen": SIXTEEN}  # the one-process cases


def _child(argv: list[str], tree: Path, cores: str | None) -> dict[str, object]:
    """Wall, CPU and peak RSS of one command, read from ``os.wait4`` on its process."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    if cores:
        argv = ["taskset", "-c", cores, *argv]
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode(errors="replace")
    if proc.returncode:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{text[-2000:]}")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    digest = [ln.split()[1] for ln in lines if ln.startswith("digest: ")]
    return {"wall_s": round(wall, 1), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "peak_rss_mb": round(ru.ru_maxrss / 1024),
            "outcome": next((ln for ln in reversed(lines) if "TTFT" in ln), "")[:200],
            **({"digest": digest[-1]} if digest else {})}


def _together(trees: list[tuple[str, Path]], case: str, rep: int, trace: str, py: str,
              out: Path, cores: list[str]) -> None:  # fmt: skip
    """The trees' runs of one case at once, tree i on core ``cores[(i + rep) % len]``."""
    if len(cores) < len(trees):
        sys.exit(f"--together needs a core per tree ({len(trees)}), got {cores}")
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
        for i, (name, tree) in enumerate(trees):
            argv = [py, "-m", "workbench", "simulate", "--trace", trace,
                    "-o", str(out / f"{name}-{case}-{rep}"), *EXTRA[case]]  # fmt: skip
            core = cores[(i + rep) % len(cores)]
            jobs.append((name, core, pool.submit(_child, argv, tree, core)))
    for name, core, fut in jobs:
        print(json.dumps({"tree": name, "case": case, "repeat": rep, "core": core,
                          **fut.result(), "together": True,
                          "load_average": [round(x, 2) for x in os.getloadavg()]}),
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH (repeatable)")
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--cases", default="one,sixteen,sweep")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cores", default=None, help="taskset -c for the one-process cases")
    ap.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--together", default=None,
                    help="cores, one per tree: the one-process cases of the trees at once")
    args = ap.parse_args()
    trees = [(name, Path(path)) for name, _, path in (t.partition("=") for t in args.tree)]
    trace = str(Path(args.trace).resolve())
    py = sys.executable
    out = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    try:
        for rep in range(args.repeat):
            for case in args.cases.split(","):
                if args.together and case in EXTRA:
                    _together(trees, case, rep, trace, py, out, args.together.split(","))
                    continue
                for name, tree in trees:
                    d = out / f"{name}-{case}-{rep}"
                    if case in EXTRA:
                        argv = [py, "-m", "workbench", "simulate", "--trace", trace, "-o", str(d)]
                        got = _child(argv + EXTRA[case], tree, args.cores)
                    elif case == "sweep":
                        argv = [py, "bench/bench_sweep.py", "--trace", trace,
                                "--parallel", str(args.parallel), "--out", str(d)]  # fmt: skip
                        got = _child(argv, tree, None)
                    else:
                        sys.exit(f"unknown case {case!r}: one, digest, sixteen, sweep")
                    print(json.dumps({"tree": name, "case": case, "repeat": rep, **got,
                                      "load_average": [round(x, 2) for x in os.getloadavg()]}),
                          flush=True)  # fmt: skip
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
