"""The KV block manager alone: ns per block, before/after, interleaved in one process.

Method: the first ``--requests`` requests of the Mooncake conversation trace become
chained block-hash lists (each 512-token hash id is 32 blocks of 16 tokens, so
requests share exactly the prefixes the trace says). A minimal admission loop drives a
``BlockManager`` of ``--blocks`` blocks the way the scheduler does: longest hit,
can_allocate, acquire, allocate, commit (the new blocks), and release (tail first)
of the oldest of ``--running`` requests; a request that does not fit frees the oldest
first. The same operation sequence is replayed on the manager at ``--before`` (the
file at that commit, loaded from git) and on the working tree's, alternately,
``--rounds`` times each; reported is the time per admitted block (best and all
rounds), with the results checked equal (evictions, hit blocks). Run from the repo root:

    .venv/bin/python bench/bench_kvcache.py [--before cc478ff] [--requests 3000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from workbench.sim import kvcache

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/mooncake/conversation_trace.jsonl"
TRACE_BLOCK = 512


def load_at(commit: str, source: str = "workbench/sim/kvcache.py") -> ModuleType:
    """The module at ``source`` as it was at ``commit`` (a module of its own)."""
    src = subprocess.run(
        ["git", "show", f"{commit}:{source}"], check=True, capture_output=True, text=True
    ).stdout
    name = Path(source).stem + "_before"
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def workload(trace: Path, n: int, block: int) -> list[list[int]]:
    """Per request the chained block hashes of its prompt's full blocks."""
    per_id = TRACE_BLOCK // block
    out = []
    with trace.open() as fh:
        for line, _ in zip(fh, range(n), strict=False):
            row = json.loads(line)
            full = row["input_length"] // block
            hs, h = [], kvcache.ROOT_HASH
            for hid in row["hash_ids"]:
                for k in range(per_id):
                    if len(hs) == full:
                        break
                    h = hash((h, hid, k))
                    hs.append(h)
            out.append(hs)
    return out


def drive(
    cls: type, reqs: list[list[int]], num_blocks: int, running: int
) -> tuple[float, int, tuple[int, int]]:
    """Seconds spent, blocks admitted, (hit blocks, evictions); ``cls`` a BlockManager."""
    bm = cls(16, num_blocks)
    held: list[list[int]] = []
    blocks = hits = 0
    t0 = time.perf_counter()
    for hs in reqs:
        if not hs:
            continue
        while True:
            hit = bm.longest_hit(hs, len(hs) - 1)
            need = len(hs) - len(hit)
            if bm.can_allocate(need, hit) or not held:
                break
            bm.release(held.pop(0))
        if not bm.can_allocate(need, hit):
            continue  # larger than the whole cache
        bm.acquire(hit)
        new = bm.allocate(need)
        mine = hit + new
        bm.commit(mine, hs, len(hit), len(hs))
        if hasattr(bm, "evicted_log"):  # the old manager's log, cleared as its scheduler did
            bm.evicted_log.clear()
        held.append(mine)
        blocks += len(hs)
        hits += len(hit)
        if len(held) > running:
            bm.release(held.pop(0))
    for b in held:
        bm.release(b)
    return time.perf_counter() - t0, blocks, (hits, bm.evictions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(DEFAULT))
    ap.add_argument("--before", default="cc478ff")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--blocks", type=int, default=65536)
    ap.add_argument("--running", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    reqs = workload(Path(args.trace), args.requests, 16)
    sides = {"before": load_at(args.before).BlockManager, "after": kvcache.BlockManager}
    ns: dict[str, list[float]] = {k: [] for k in sides}
    check: dict[str, tuple[int, int]] = {}
    for _ in range(args.rounds):
        for name, cls in sides.items():
            secs, blocks, sig = drive(cls, reqs, args.blocks, args.running)
            ns[name].append(round(secs / blocks * 1e9, 1))
            check.setdefault(name, sig)
            assert check[name] == sig
    if check["before"] != check["after"]:
        sys.exit(f"results differ: {check}")
    print(json.dumps({
        "requests": len(reqs), "blocks": blocks, "num_blocks": args.blocks,
        "hit_blocks": check["after"][0], "evictions": check["after"][1],
        "ns_per_block": ns, "best": {k: min(v) for k, v in ns.items()},
        "speedup": round(min(ns["before"]) / min(ns["after"]), 2),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }))


if __name__ == "__main__":
    main()
