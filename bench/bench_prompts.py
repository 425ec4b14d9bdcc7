"""Prompt building from Mooncake hash ids: µs per prompt, before/after, interleaved.

Method: the first ``--requests`` rows of the Mooncake conversation trace; each becomes
``TokenPool.prompt_from_hash_ids(hash_ids, input_length, 512)`` (what the runner sends),
once with ``workbench/context/tokens.py`` at ``--before`` (loaded from git) and once with
the working tree's, alternately ``--rounds`` times, a fresh pool per pass (so every
hash id's first use pays for its key, as in a run); only the calls are timed, and
the prompts are checked equal (one running hash over all of them).
Run from the repo root:

    .venv/bin/python bench/bench_prompts.py [--before cc478ff] [--requests 3000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kvcache import DEFAULT, load_at

from workbench.context import tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--before", default="cc478ff")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with Path(args.trace).open() as fh:
        rows = [json.loads(line) for line, _ in zip(fh, range(args.requests), strict=False)]
    sides = {"before": load_at(args.before, "workbench/context/tokens.py").TokenPool,
             "after": tokens.TokenPool}
    us: dict[str, list[float]] = {k: [] for k in sides}
    digest: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, cls in sides.items():
            pool, spent, h = cls(), 0.0, 0
            gc.collect()
            for i, r in enumerate(rows):
                t0 = time.perf_counter()
                prompt = pool.prompt_from_hash_ids(r["hash_ids"], r["input_length"], 512,
                                                   fill_stream=str(i))
                spent += time.perf_counter() - t0
                h = hash((h, *prompt))
            us[name].append(round(spent / len(rows) * 1e6, 1))
            digest[name] = h
    if digest["before"] != digest["after"]:
        sys.exit("prompts differ")
    print(json.dumps({
        "requests": len(rows), "us_per_prompt": us, "best": {k: min(v) for k, v in us.items()},
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }))


if __name__ == "__main__":
    main()
