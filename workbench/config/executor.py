"""How the client executes a run (not what it sends): processes, record batching, hashes,
the HTTP client, pacing."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from workbench.errors import ConfigError


@dataclass(frozen=True)
class ExecutorSpec:
    """How the client executes (not what it sends): processes, record batching, hashes.

    ``workers``: shard units over this many processes on this host (a unit is
    never split; ``max_concurrency`` is divided between shards; records merge
    into one run directory). ``record_flush_ms``: ``None`` (default) writes each
    record the moment its request ends, so even a hard crash loses nothing
    finished (docs/run-directory.md); a number batches writes, records then reach the OS at most
    this long after their request ends (faster at high request rates; a SIGKILL
    can lose that window, a cancel or Ctrl-C still loses nothing).
    ``block_hashes``: compute each prompt's chained block hashes (kept in records
    for the Dynamo export; incremental per session, but off saves O(prompt) work
    per request). ``uvloop``: use uvloop for ``run``/the CLI when installed.
    ``kind``: ``local`` (one process, or ``workers`` processes when > 1),
    ``processes`` (``workers`` processes on this host) or ``ray`` (``workers``
    Ray actors, see ``workbench.executors.ray``); ``address``: the Ray cluster
    to join (``ray://host:10001``, ``host:6379`` or ``auto``; None = a
    ``ray.init`` already made in this process, else a local one).
    ``gc_freeze``: ``gc.freeze()`` what exists when the measured run starts (and
    the finished records as they pile up), so no full garbage collection over
    them pauses the loop mid-run (restored after). ``keep_records``: ``True``,
    ``False`` or ``"auto"`` (default). False (with an ``out_dir``): records and
    lifecycle rows stay on disk only, the summary is scanned from there, and
    ``RunResult.records`` is empty (``to_frame``, ``summarize``, ``plot`` and
    ``load(run_dir)`` read them back from disk): memory stays flat in the number
    of requests. ``"auto"``: keep them when the plan has at most
    ``KEEP_RECORDS_AUTO_MAX`` requests, else as False (``RunConfig.keeps_records``;
    the manifest's ``records_kept`` and ``records_kept_reason`` say what a run did).
    Without an ``out_dir`` records are always kept: they have nowhere else to live.
    ``warm_connections``: open ``max_concurrency`` keep-alive connections (at
    most ``WARM_MAX``) before the run, so the first wave does not pay TCP setup
    inside its TTFT. ``http``: the HTTP client on the measured path: ``httptools``
    (default; ``workbench.backends.http1``) or ``aiohttp`` (the portable fallback,
    public API only, coarser stamps; ``workbench.backends.http_aiohttp``).
    ``pace_ms``: when streams end in lockstep, at most about this
    much loop time per iteration goes to finishing streams and sending the next
    requests; the rest wait their turn (FIFO) so the loop keeps reading sockets and
    token stamps stay exact. Deferred sends show as release lag. ``"auto"``
    (default): 1 ms while responses stream (several reads each), off while they
    arrive whole (nothing to protect, and holding sends would only keep requests
    waiting in the client); 0: off; a number: always, with that budget
    (``workbench.backends.pace``).
    """

    workers: int = 1
    record_flush_ms: float | None = None
    block_hashes: bool = True
    uvloop: bool = True
    kind: str = "local"
    address: str | None = None
    gc_freeze: bool = True
    keep_records: bool | Literal["auto"] = "auto"
    warm_connections: bool = True
    http: str = "httptools"
    pace_ms: float | Literal["auto"] = "auto"

    def check(self) -> None:
        """The rules of this section alone, on values already of their type and range."""
        if self.kind not in EXECUTOR_KINDS:
            raise ConfigError(
                f"executor.kind {self.kind!r} unknown; valid: {', '.join(EXECUTOR_KINDS)}"
            )
        if not (isinstance(self.keep_records, bool) or self.keep_records == "auto"):
            raise ConfigError(
                f"executor.keep_records {self.keep_records!r} is invalid; valid: true, false, "
                f"'auto' (keep in memory up to {KEEP_RECORDS_AUTO_MAX} requests)"
            )
        # imported here, not at every CLI start (bench/README.md, "CLI start-up")
        from workbench.backends.transport import HTTP_CLIENTS

        if self.http not in HTTP_CLIENTS:
            raise ConfigError(
                f"executor.http {self.http!r} is unknown; valid: {', '.join(HTTP_CLIENTS)}"
            )
        pace = self.pace_ms
        if pace != "auto" and (
            not isinstance(pace, int | float) or isinstance(pace, bool) or pace < 0
        ):
            raise ConfigError(
                f"executor.pace_ms must be 'auto' or a number >= 0 (0 = off), got {pace!r}"
            )
        if self.address is not None and self.kind != "ray":
            raise ConfigError("executor.address is a Ray cluster address: set executor.kind 'ray'")
        if self.kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "executor.kind 'ray' needs Ray: pip install 'workbench[ray]' (or 'ray>=2.9')"
            )


EXECUTOR_KINDS: tuple[str, ...] = ("local", "processes", "ray")
# executor.keep_records "auto": the largest plan (requests) whose records stay in memory.
# A kept request costs 2.6 KB with short independent requests (bench/README.md#memory:
# 530 vs 268 MB RSS at 100k) and ~10 KB on agentic traces (the Mooncake slice, ~360 output
# tokens: one token time per stream event, plus the prompt's hashes; tracemalloc, kept vs
# not). 10k requests is then ~100 MB at most on top of the run, and still far above every
# bundled trace (<= 600 rounds) and a notebook's interactive runs.
KEEP_RECORDS_AUTO_MAX = 10_000
