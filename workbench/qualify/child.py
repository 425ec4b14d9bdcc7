"""One parity run, in a process of its own, on whichever tree ``PYTHONPATH`` names.

Run as a script (``python -P child.py JOB.json``), never imported: ``import workbench``
below is the side's revision, so only names every revision has are used. It pins itself
to its core, bounds its address space, replays, and writes the canonical report, its
digest and what it observed about itself (docs/parity.md, "Runs, digests and differences").
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time
from typing import Any

# where each name has lived (first found wins): a refactor that moves them keeps parity
# runs of older revisions working
CANONICAL_HOMES = ("workbench.report.canonical", "workbench.executors.virtual")
SIMULATE_HOMES = ("workbench.executors.virtual",)


def _find(name: str, homes: tuple[str, ...] = CANONICAL_HOMES) -> Any:
    for home in homes:
        try:
            mod = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(mod, name):
            return getattr(mod, name)
    raise ImportError(f"no {name} in {homes}")


def _create(path: str, mode: str) -> Any:
    """A new file, never through a link (what ``workbench.safe_write`` does; written out
    here because this script runs against revisions that may predate it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o644), mode)


def main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    if job.get("core") is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(job["core"])})
    limit = int(job["memory_mb"]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    wall, cpu = time.monotonic(), time.process_time()
    import workbench

    simulate = _find("simulate", SIMULATE_HOMES)
    canonical_report, report_digest = _find("canonical_report"), _find("report_digest")
    try:
        excluded = dict(_find("CANONICAL_EXCLUDED"))
    except ImportError:
        excluded = None
    result = simulate(job["config"])
    report = canonical_report(result)
    digest = report_digest(report)
    import orjson

    with _create(job["report"], "wb") as f:
        f.write(orjson.dumps(report, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY))
    meta = {
        "digest": digest,
        "workbench_file": workbench.__file__,
        "version": getattr(workbench, "__version__", None),
        "excluded": excluded,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "pid": os.getpid(),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - wall,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "requests": len(report.get("records", [])),
    }
    with _create(job["meta"], "w") as f:
        json.dump(meta, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
