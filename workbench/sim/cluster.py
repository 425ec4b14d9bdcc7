"""A simulated cluster: N embedded engines behind a router, optionally disaggregated.

Each worker is a whole ``Engine`` (its own KV cache, scheduler and step loop) on
one shared ``Clock``, so the same cluster runs behind one HTTP endpoint (wall
clock, ``sim.server``) and in virtual time (``workbench.executors.virtual``). A router from
``sim.router.ROUTERS`` picks the worker of every request.

Prefill/decode disaggregation (``disagg``): workers ``0..P-1`` only prefill,
workers ``P..P+D-1`` only decode. The router picks a prefill worker, which
computes the prompt and the first token; the request's KV (``kv_bytes_per_token``
× prompt tokens) then travels to the least-loaded decode worker at
``bandwidth_gbps``, and the decode worker admits it with that KV in place
(``Engine.submit_transferred``): its first step is a decode step. Transfers do not
contend for the link. Formulas and defaults: ``docs/cluster.md``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.clock import Clock, VirtualClock, VirtualTimeLoop
from workbench.kernels import native
from workbench.placement import (
    DECODE_WORKER_HEADER,
    DP_RANK_HEADER,
    WAITING_HEADER,
    WORKER_HEADER,
)
from workbench.plurals import noun
from workbench.segments import Segments
from workbench.sim.config import EngineConfig
from workbench.sim.dp import DPWorker, RankRequest, check_dp
from workbench.sim.engine import Engine, LoadBoard
from workbench.sim.handles import EngineRequest, RequestOutput
from workbench.sim.router import Router, RouteRequest, make_router

CLUSTER_KNOBS = ("workers", "router", "router_options", "disagg", "dp", "dp_placement")
# Llama-3-8B in fp16: 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
DEFAULT_KV_BYTES_PER_TOKEN = 131_072
DEFAULT_BANDWIDTH_GBPS = 50.0  # GB/s: one 400 Gb/s RDMA NIC


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    """``prefill`` + ``decode`` workers; KV moves at ``bandwidth_gbps`` (GB/s, 1e9 B/s)."""

    prefill: int = 1
    decode: int = 1
    bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN

    def __post_init__(self) -> None:
        for name in ("prefill", "decode", "kv_bytes_per_token"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"engine.disagg.{name} must be an integer >= 1, got {value!r}")
        if not float(self.bandwidth_gbps) > 0:
            raise ValueError(f"engine.disagg.bandwidth_gbps must be > 0, got {self.bandwidth_gbps}")

    def transfer_ns(self, tokens: int) -> int:
        """Nanoseconds to move ``tokens`` tokens of KV: bytes / bandwidth."""
        return round(tokens * self.kv_bytes_per_token / self.bandwidth_gbps)  # B / (GB/s) = ns


#: replicas one simulated cluster holds at most (docs/config-bounds.md, "Plans")
MAX_WORKERS = 4096


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """How many workers, which router, whether prefill and decode are split, and how many
    attention-DP ranks each worker has (``dp``, placed by ``dp_placement``: ``sim.dp``)."""

    workers: int = 1
    router: str = "round-robin"
    router_options: Mapping[str, Any] = field(default_factory=dict)
    disagg: DisaggConfig | None = None
    dp: int = 1
    dp_placement: str = "least-loaded"

    def __post_init__(self) -> None:
        check_dp(self.dp, self.dp_placement)
        if type(self.workers) is not int or not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"engine.workers must be an integer in [1, {MAX_WORKERS}], "
                             f"got {self.workers!r}")
        if not isinstance(self.router_options, Mapping):
            raise ValueError("engine.router_options must be a mapping of router keywords")
        make_router(self.router, dict(self.router_options))  # validates name and options
        if self.disagg is not None and self.workers not in (1, self.size):
            raise ValueError(
                f"engine.workers ({self.workers}) must equal disagg.prefill + disagg.decode "
                f"({self.size}) or be left out"
            )

    @property
    def size(self) -> int:
        """Total workers (prefill + decode when disaggregated)."""
        d = self.disagg
        return d.prefill + d.decode if d is not None else self.workers

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any]) -> ClusterConfig:
        disagg = knobs.get("disagg")
        if isinstance(disagg, Mapping):
            names = {f.name for f in dataclasses.fields(DisaggConfig)}
            unknown = set(disagg) - names
            if unknown:
                raise ValueError(
                    f"engine.disagg: unknown {noun(len(unknown), 'key')} {sorted(unknown)}; "
                    f"valid: {sorted(names)}"
                )
            disagg = DisaggConfig(**disagg)
        elif disagg is not None and not isinstance(disagg, DisaggConfig):
            raise ValueError(
                "engine.disagg must be a mapping (prefill, decode, bandwidth_gbps, "
                "kv_bytes_per_token) or null"
            )
        return cls(
            workers=knobs.get("workers", 1),
            router=str(knobs.get("router", "round-robin")),
            router_options=dict(knobs.get("router_options") or {}),
            disagg=disagg,
            dp=knobs.get("dp", 1),
            dp_placement=knobs.get("dp_placement", "least-loaded"),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "workers": self.size,
            "router": self.router,
            "router_options": dict(self.router_options),
            "disagg": None if self.disagg is None else dataclasses.asdict(self.disagg),
        }
        if self.dp > 1:  # one rank per worker is the cluster as before (same manifest)
            out.update(dp=self.dp, dp_placement=self.dp_placement)
        return out


def split_knobs(knobs: Mapping[str, Any]) -> tuple[dict[str, Any], ClusterConfig | None]:
    """Engine knobs and the cluster they ask for (None: one engine, no cluster key given)."""
    engine = {k: v for k, v in knobs.items() if k not in CLUSTER_KNOBS}
    asked = [k for k in CLUSTER_KNOBS if k in knobs]
    if not asked or (set(asked) <= {"dp", "dp_placement"} and knobs.get("dp", 1) == 1):
        check_dp(knobs.get("dp", 1), knobs.get("dp_placement", "least-loaded"))
        return engine, None  # one engine of one rank: no cluster, as without the keys
    return engine, ClusterConfig.from_knobs(knobs)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request went: its worker (the prefill worker when disaggregated), the
    decode worker, that worker's waiting queue when it arrived, and its attention-DP
    rank in that worker (None: workers of one rank)."""

    worker: int
    decode_worker: int | None
    waiting: int
    rank: int | None = None

    def extra(self) -> dict[str, int]:
        """The record's fields of this placement: ``placement_extra(self.headers())``
        (the same keys in the same order) without the headers' strings."""
        out = {"worker": self.worker}
        if self.decode_worker is not None:
            out["decode_worker"] = self.decode_worker
        out["worker_waiting"] = self.waiting
        if self.rank is not None:
            out["dp_rank"] = self.rank
        return out

    def headers(self) -> dict[str, str]:
        out = {WORKER_HEADER: str(self.worker), WAITING_HEADER: str(self.waiting)}
        if self.decode_worker is not None:
            out[DECODE_WORKER_HEADER] = str(self.decode_worker)
        if self.rank is not None:
            out[DP_RANK_HEADER] = str(self.rank)
        return out


class Cluster:
    """Engines behind a router, with ``Engine``'s face: start/stop/submit/stats."""

    def __init__(self, config: EngineConfig, cluster: ClusterConfig, clock: Clock) -> None:
        self.config = config
        self.cluster = cluster
        self.clock = clock
        # every worker keeps its load (and its span's next event) in its slot here
        self._board = board = LoadBoard(cluster.size)
        self.workers: list[Engine | DPWorker] = [
            Engine(config, clock, board, i) if cluster.dp == 1
            else DPWorker(config, clock, cluster.dp, cluster.dp_placement, board, i)
            for i in range(cluster.size)]  # fmt: skip
        self.router: Router = make_router(cluster.router, dict(cluster.router_options))
        d = cluster.disagg
        self._front = self.workers[: d.prefill] if d is not None else self.workers
        self._decode = self.workers[d.prefill :] if d is not None else []
        self._pending: set[DisaggRequest] = set()  # between prefill and decode admission
        self._loop: VirtualTimeLoop | None = None  # virtual time, once started

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(self.clock, VirtualClock) and isinstance(loop, VirtualTimeLoop):
            self._loop = loop  # the loop the workers' spans run on (``Engine.start``)
        for w in self.workers:
            await w.start()

    async def stop(self) -> None:
        for dreq in list(self._pending):
            dreq.abort()
            dreq.cancel()
        for w in self.workers:
            await w.stop()
        self._loop = None

    def submit(
        self, request_id: str, prompt_ids: Sequence[int] | Segments, max_tokens: int,
        session: str = "",
    ) -> tuple[Placement, AnyRequest]:  # fmt: skip
        """Check, route and queue one request; ``ValueError`` as ``Engine.submit`` raises
        it, before the router is asked (a rejected request is routed nowhere).

        The sequence is built once (``Engine.prepare``) and the router reads its block
        hashes: the prompt is hashed once, not once for routing and again on admission.
        When disaggregated, the prefill worker's sequence is the prompt's first token and
        the decode worker is the least loaded decode worker.
        """
        front = self.workers[0]  # any worker: they share one config
        prompt = prompt_ids if isinstance(prompt_ids, Segments) else list(prompt_ids)
        split = bool(self._decode)
        if split:
            max_tokens = front.validate(prompt, max_tokens)  # the limits, before anything runs
        seq = front.prepare(request_id, prompt, 1 if split else max_tokens)
        hashes = None
        if self.router.needs_hashes:
            bs = self.config.block_size
            seq.ensure_hashes(bs)
            hashes = seq.hashes[: (seq.prompt_len - 1) // bs]  # as admission looks up
        req = RouteRequest(request_id, session or request_id, () if hashes is None else hashes)
        loads, nf = self.loads(), len(self._front)
        i = self.router.choose(req, self._front, loads[:nf] if split else loads)
        if not 0 <= i < nf:
            raise RuntimeError(f"router {self.router.name} chose worker {i} of {nf}")
        dec = None
        if split:
            keys = [(r + q, u) for r, q, u in loads[nf:]]
            dec = nf + keys.index(min(keys))
        placement = Placement(i, dec, loads[i][1])
        first = self.workers[i].submit_prepared(seq, routed=hashes)
        if isinstance(first, RankRequest):
            placement = dataclasses.replace(placement, rank=first.rank)
        if placement.decode_worker is None:
            return placement, first
        decode = self.workers[placement.decode_worker]
        dreq = DisaggRequest(self, first, decode, prompt, max_tokens)
        self._pending.add(dreq)
        return placement, dreq

    def loads(self) -> list[tuple[int, int, float]]:
        """Every worker's ``load()`` now: its board slot, once the workers whose span has
        an event due by now are caught up (``load()`` does it: a span's event-free steps
        change no load and no cache). The board itself, read at once (the workers
        rewrite it as they change)."""
        board = self._board
        loop = self._loop
        if loop is not None:  # spans: the workers step on this virtual-time loop
            workers = self.workers
            for i in _due(board.events, loop.time()):
                workers[i].catch_up()  # (only an ``Engine`` posts span events)
        return board.loads

    def stats(self) -> dict[str, Any]:
        """Counters and gauges summed over the workers (KV usage: the mean)."""
        per = [w.stats() for w in self.workers]  # the same keys in the same order
        columns = zip(*(s.values() for s in per), strict=True)  # one a stat
        out: dict[str, Any] = dict(zip(per[0], map(sum, columns), strict=True))
        out["kv_usage"] = out["kv_usage"] / len(per)
        return out

    def reset_prefix_cache(self) -> bool:
        """Reset every worker's cache; False if any worker still holds blocks (none reset)."""
        if any(running or waiting for running, waiting, _ in self.loads()):
            return False
        return all([w.reset_prefix_cache() for w in self.workers])


class DisaggRequest:
    """A request served in two phases: prefill (+ first token) on one worker, the KV
    transfer, then decode on another; ``EngineRequest``'s face over both."""

    def __init__(
        self, cluster: Cluster, first: Phase, decode: Engine | DPWorker,
        prompt: list[int] | Segments, max_tokens: int,
    ) -> None:  # fmt: skip
        self._cluster, self._first, self._decode_engine = cluster, first, decode
        self._prompt, self.max_tokens = prompt, max_tokens
        self.decode: Phase | None = None
        self.transfer_start_ns: int | None = None
        self.transfer_end_ns: int | None = None
        self._phase_ready = asyncio.Event()  # the decode phase exists, or never will
        self._abort_ns: int | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    request_id = property(lambda self: self._first.request_id)
    prompt_tokens = property(lambda self: self._first.prompt_tokens)
    arrival_ns = property(lambda self: self._first.arrival_ns)
    cached_tokens = property(lambda self: self._first.cached_tokens)
    host_cached_tokens = property(lambda self: self._first.host_cached_tokens)
    first_token_ns = property(lambda self: self._first.first_token_ns)

    def _prefill_only(self) -> bool:
        """True when the first phase is the whole request (one token, or it failed)."""
        first = self._first
        return self.max_tokens == 1 or (first.finished and first.finish_reason != "length")

    @property
    def finished(self) -> bool:
        if self.decode is not None:
            return bool(self.decode.finished)
        return self._abort_ns is not None or (self._first.finished and self._prefill_only())

    @property
    def finish_reason(self) -> str | None:
        if self.decode is not None:
            return self.decode.finish_reason
        if self._first.finished and self._prefill_only():
            return self._first.finish_reason
        return "abort" if self._abort_ns is not None else None

    @property
    def finish_ns(self) -> int | None:
        if self.decode is not None:
            return self.decode.finish_ns
        if self._first.finished and self._prefill_only():
            return self._first.finish_ns
        return self._abort_ns

    @property
    def token_ns(self) -> list[int]:
        return self._first.token_ns + (self.decode.token_ns if self.decode is not None else [])

    @property
    def output_ids(self) -> list[int]:
        rest = self.decode.output_ids if self.decode is not None else []
        return self._first.output_ids + rest

    def output_segments(self) -> Segments:
        rest = self.decode.output_segments() if self.decode is not None else Segments()
        return self._first.output_segments() + rest

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ns)

    @property
    def preemptions(self) -> int:
        """Times either phase was preempted (recomputed from scratch on its worker)."""
        return self._first.preemptions + (self.decode.preemptions if self.decode else 0)

    async def _run(self) -> None:
        try:
            await self._first.wait()
            if self._prefill_only() or self._abort_ns is not None:
                return
            disagg = self._cluster.cluster.disagg
            assert disagg is not None
            clock = self._cluster.clock
            self.transfer_start_ns = start = clock.now_ns()
            await clock.sleep_until(start + disagg.transfer_ns(len(self._prompt)))
            self.transfer_end_ns = clock.now_ns()
            if self._abort_ns is not None:
                return
            ids: list[int] | Segments
            if isinstance(self._prompt, Segments):  # virtual time: parts, no ids drawn
                ids = self._prompt + self._first.output_segments()
            else:
                ids = [*self._prompt, *self._first.output_ids]
            self.decode = self._decode_engine.submit_transferred(
                self._first.request_id + "/decode", ids, self.max_tokens - 1, len(self._prompt)
            )
        finally:
            self._phase_ready.set()
            self._cluster._pending.discard(self)

    def abort(self) -> None:
        if self.finished:
            return
        self._abort_ns = self._cluster.clock.now_ns()
        self._first.abort()
        if self.decode is not None:
            self.decode.abort()
        self._phase_ready.set()

    async def wait(self) -> DisaggRequest:
        await self._first.wait()
        await self._phase_ready.wait()
        if self.decode is not None:
            await self.decode.wait()
        return self

    async def batches(self) -> AsyncIterator[list[RequestOutput]]:
        """The first token (final only when ``max_tokens`` is 1), then the decode's."""
        whole = self.max_tokens == 1
        async for batch in self._first.batches():
            if whole or not batch[-1].token_ids:
                yield batch  # the request's end (or the prefill's abort item)
                if not whole:
                    return
                continue
            yield [RequestOutput(o.token_ids, o.t_ns, False, None) for o in batch]
        if whole:
            return
        await self._phase_ready.wait()
        if self.decode is None:
            yield [RequestOutput([], self.finish_ns or 0, True, self.finish_reason or "abort")]
            return
        async for batch in self.decode.batches():
            yield batch

    def cancel(self) -> None:
        """Stop the phase task (the cluster is stopping)."""
        self._task.cancel()


def _twin_due(times: list[float], now: float) -> list[int]:
    """The workers whose board slot has an event due by ``now`` (``kernels.due``'s twin)."""
    return [i for i, t in enumerate(times) if t <= now]


_due: Callable[[list[float], float], list[int]] = _twin_due if native is None else native.due

Phase = EngineRequest | RankRequest  # one phase on one worker (of one rank, or of dp)
AnyRequest = EngineRequest | RankRequest | DisaggRequest
