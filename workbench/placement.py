"""The worker headers of a simulated cluster's responses and their record fields, read by
the engine (``sim.cluster``), the client and the virtual replay alike (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Mapping

WORKER_HEADER = "x-workbench-worker"
DECODE_WORKER_HEADER = "x-workbench-decode-worker"
WAITING_HEADER = "x-workbench-worker-waiting"
DP_RANK_HEADER = "x-workbench-dp-rank"  # the attention-DP rank in the worker (sim.dp)
PLACEMENT_FIELDS = (
    (WORKER_HEADER, "worker"),
    (DECODE_WORKER_HEADER, "decode_worker"),
    (WAITING_HEADER, "worker_waiting"),
    (DP_RANK_HEADER, "dp_rank"),
)


def placement_extra(headers: Mapping[str, str]) -> dict[str, int]:
    """Record ``extra`` fields from a response's worker headers (none: not a cluster)."""
    out: dict[str, int] = {}
    for header, key in PLACEMENT_FIELDS:
        value = headers.get(header)
        if value is not None and value.isdigit():
            out[key] = int(value)
    return out
