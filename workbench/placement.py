"""Where a simulated cluster served a response: its worker headers and the record fields.

The embedded engine's cluster (``sim.cluster``) names the serving worker of every
response in these headers; the client (``backends.transport``) and the virtual
replay (``executors.virtual``) copy them into a record's ``extra``
(docs/cluster.md). Both sides read the names here, below both, so the client
never imports the simulator.
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
