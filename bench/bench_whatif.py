"""The trace explorer's what-if on the bundled Mooncake slice (issue 28, item 4).

Method: build ``workbench.ui.widgets.what_if`` over the bundled Mooncake slice
(``mooncake/conversation_trace_head600.jsonl``, 600 requests, trace-timed) with the
embedded engine's default cache (``--num-blocks``, block 16), then time what the
notebook's button does: ``await whatif.run()`` (``simulate`` in a worker thread, then
the summary tables). Printed: wall and CPU seconds per run (``--repeat`` runs, one
process). Run from the repo root:

    .venv/bin/python bench/bench_whatif.py [--max-items N] [--num-blocks N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from workbench.data import path as data_path
from workbench.ui.widgets import what_if


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-items", type=int, default=None)
    ap.add_argument("--num-blocks", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg = {"trace": {"path": str(data_path("mooncake/conversation_trace_head600.jsonl")),
                     "max_items": args.max_items},
           "target": {"url": "sim", "engine": {"num_blocks": args.num_blocks}}}
    runs = []
    for _ in range(args.repeat):
        w = what_if(cfg)
        wall, cpu = time.perf_counter(), time.process_time()
        result = asyncio.run(w.run())
        runs.append({"wall_s": round(time.perf_counter() - wall, 2),
                     "cpu_s": round(time.process_time() - cpu, 2),
                     "requests": len(result.records)})
    print(json.dumps({"runs": runs, "status": w.status.value}))


if __name__ == "__main__":
    main()
