"""One shard played the same way by every executor (``play_shard``: warm-up, connections,
start barrier, measured run; docs/executors.md, "Playing one shard"), and what it reports
(``ShardOutcome``); ``RunOutcome.write`` is where the manifest gets ``stop_reason``,
``peak_active_units``, ``warmup`` and ``client``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from workbench.records import RunManifest
from workbench.replay.runner import Runner, merge_warmup

#: stop reasons of a run that ended for its server, not stopped from outside: ``partial``
ENDED_BY_SERVER = frozenset({"server_refused"})


@dataclass(frozen=True)
class ShardOutcome:
    """What one shard's runner reports when it ends (``to_dict``: over a pipe, from Ray)."""

    client: dict[str, Any]  # the self-measurement's raw data (Runner.client_raw)
    stop_reason: str | None  # why the shard stopped early, None if it ran to its end
    peak_active: int  # most units active at once
    warmup: dict[str, Any] | None  # what the warm-up did (Runner.warmup_report)
    stop_detail: str | None = None  # the stop in words (Runner.stop_detail)

    @classmethod
    def of(cls, runner: Runner) -> ShardOutcome:
        return cls(runner.client_raw(), runner.stop_reason, runner.gate.peak_active,
                   runner.warmup_report, runner.stop_detail)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardOutcome:
        return cls(d["client"], d.get("stop_reason"), int(d["peak_active"]), d.get("warmup"),
                   d.get("stop_detail"))


@dataclass(frozen=True)
class RunOutcome:
    """A run's shards pooled: the first stop reason in sorted order (``"stopped"``: from
    outside, before a shard said why), peak active units summed, one warm-up report, the
    client self-measurements. A run a dead server stopped (``server_refused``) is not
    cancelled: it is ``partial``, its unsent rounds counted as never sent."""

    stop_reason: str | None
    peak_active_units: int
    warmup: dict[str, Any] | None
    clients: list[dict[str, Any]]
    stop_detail: str | None = None

    @classmethod
    def of(cls, shards: list[ShardOutcome], *, stopped: bool = False) -> RunOutcome:
        reasons = sorted({s.stop_reason for s in shards if s.stop_reason})
        reason = reasons[0] if reasons else ("stopped" if stopped else None)
        detail = next((s.stop_detail for s in shards if s.stop_reason == reason), None)
        return cls(reason, sum(s.peak_active for s in shards),
                   merge_warmup([s.warmup for s in shards]), [s.client for s in shards],
                   detail)

    @property
    def cancelled(self) -> bool:
        return self.stop_reason is not None and self.stop_reason not in ENDED_BY_SERVER

    def write(self, manifest: RunManifest, client: dict[str, Any] | None) -> None:
        """The one writer of these manifest keys; ``client``: the pooled self-measurement
        (``metrics.summary.client_stats``), None in virtual time."""
        manifest.stop_reason = self.stop_reason
        manifest.stop_detail = self.stop_detail
        manifest.peak_active_units = self.peak_active_units
        manifest.warmup = self.warmup
        manifest.client = client


async def play_shard(
    runner: Runner,
    *,
    warm: Callable[[], Awaitable[Any]] | None = None,
    ready: Callable[[], Awaitable[int | None]] | None = None,
) -> ShardOutcome | None:
    """Warm-up → ``warm()`` (keep-alive connections) → ``ready()`` (the barrier: the run's
    epoch, or None when the run was called off before it started, then no outcome) →
    the measured run from that epoch (``ready`` absent: from now)."""
    await runner.warmup()
    if warm is not None:
        await warm()
    t0 = None
    if ready is not None:
        t0 = await ready()
        if t0 is None:
            return None
    await runner.execute(t0)
    return ShardOutcome.of(runner)


async def play_shards(runners: list[Runner], clock_now: Callable[[], int]) -> list[ShardOutcome]:
    """Shards on one loop (virtual time): every warm-up first, then one epoch for all."""
    await asyncio.gather(*(r.warmup() for r in runners))
    epoch = clock_now()

    async def at_epoch() -> int:
        return epoch

    got = await asyncio.gather(*(play_shard(r, ready=at_epoch) for r in runners))
    return [o for o in got if o is not None]
