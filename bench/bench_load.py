"""Benchmark: loading the public Mooncake conversation trace (target well under 1 s).

Method: ``load_trace`` on ``shared/data/mooncake/conversation_trace.jsonl``
(12,031 requests, 3.0 MB, ~290k hash ids), in one process after one warm-up
load (imports, page cache), ``--repeat`` times each for:

1. ``fmt="auto"`` (sniffing + the full reader: validation, hash-count check,
   ideal-prefix computation, Round/Unit construction);
2. ``fmt="mooncake"`` (the reader alone);
3. the floor any reader pays: read the file and ``orjson.loads`` every line.

Reports median, min and max wall time (``time.perf_counter``). GC stays on, as
in real use.

Run: ``.venv/bin/python bench/bench_load.py [--trace PATH] [--repeat K]``.
Results go in ``bench/README.md`` (area "trace loading", ``#trace-loading``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from workbench.traces.load import load_trace

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_TRACE = SHARED_DATA / "mooncake" / "conversation_trace.jsonl"


def _times(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _parse_only(path: Path) -> int:
    lines = path.read_bytes().decode("utf-8").splitlines()
    return len([orjson.loads(line) for line in lines if line.strip()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()
    w = load_trace(args.trace)
    print(
        f"{args.trace.name}: {w.n_rounds} requests, {args.trace.stat().st_size / 1e6:.2f} MB; "
        f"Python {platform.python_version()} on {platform.machine()}, repeat {args.repeat}"
    )
    cases: dict[str, Callable[[], object]] = {
        "load_trace(auto)": lambda: load_trace(args.trace),
        "load_trace(fmt=mooncake)": lambda: load_trace(args.trace, fmt="mooncake"),
        "read + orjson only": lambda: _parse_only(args.trace),
    }
    for name, fn in cases.items():
        t = _times(fn, args.repeat)
        print(
            f"{name:26s} median {statistics.median(t) * 1e3:7.1f} ms  "
            f"min {min(t) * 1e3:7.1f} ms  max {max(t) * 1e3:7.1f} ms"
        )


if __name__ == "__main__":
    main()
