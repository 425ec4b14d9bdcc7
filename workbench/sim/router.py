"""Routers of the simulated cluster: which worker serves a request (pure policy).

A router sees the request (its id, its session key, its prompt's chained block
hashes when it asks for them), every worker's load (``loads``: what each worker's
``load()`` returns now, which the cluster reads off its ``LoadBoard``) and every
worker's cache through public ``Engine`` methods, ``cached_prefix_blocks(hashes)`` and
``caches_block(hash)``. It returns a worker index. Routers are picked by name from ``ROUTERS`` (a
``workbench.registry.Registry``); adding one is a class here with one
``@ROUTERS.register(name)`` line (the CLI's ``--router`` help lists the registry):

- ``round-robin``: worker ``k mod N`` for the k-th request;
- ``least-loaded``: fewest running + waiting requests, then lowest KV usage;
- ``session-affinity``: a session's first request goes to the least-loaded
  worker, every later one to the same worker (sticky);
- ``prefix-aware``: the worker whose prefix cache holds the longest prefix of
  the prompt, unless that worker is overloaded (``overload_threshold``), the
  policy of Dynamo's KV router and SGLang's cache-aware router.

Ties always go to the lowest worker index, so a replay is deterministic. The
rules and their defaults are in ``docs/cluster.md``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.errors import ConfigError
from workbench.registry import Registry
from workbench.sim import kvindex

Load = tuple[int, int, float]  # (running, waiting, KV usage): ``Engine.load()``


class Worker(Protocol):
    """What a router reads of a worker's cache (``workbench.sim.engine.Engine`` has it)."""

    def cached_prefix_blocks(self, hashes: Sequence[int], limit: int | None = None) -> int: ...

    def caches_block(self, block_hash: int) -> bool: ...

    def found_prefix(self, hashes: Sequence[int], hit: list[int] | array[int]) -> None:
        """``hit``, the blocks holding the worker's longest cached prefix of ``hashes``,
        found by the compiled router (what ``cached_prefix_blocks`` would look up)."""
        ...

    def prefix_shard(self) -> tuple[Any, ...] | None:
        """The worker's compiled prefix index (``Shards`` holds it), None without one."""
        ...


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One routing decision's input. ``hashes`` is filled only for routers that
    set ``needs_hashes`` (hashing a long prompt is not free)."""

    request_id: str
    session: str
    hashes: Sequence[int] = ()


class Router(Protocol):
    name: str
    needs_hashes: bool

    def choose(self, req: RouteRequest, workers: Sequence[Worker], loads: Sequence[Load]) -> int:
        """The worker of ``req``; ``loads[i]`` is worker ``i``'s load now."""
        ...


ROUTERS: Registry[Callable[..., Router]] = Registry("router")


def _least_loaded(loads: Sequence[Load]) -> int:
    keys = [(running + waiting, usage) for running, waiting, usage in loads]
    return keys.index(min(keys))  # the first of the least


@ROUTERS.register("round-robin")
class RoundRobin:
    name = "round-robin"
    needs_hashes = False

    def __init__(self) -> None:
        self._next = 0

    def choose(self, req: RouteRequest, workers: Sequence[Worker], loads: Sequence[Load]) -> int:
        i = self._next % len(workers)
        self._next += 1
        return i


@ROUTERS.register("least-loaded")
class LeastLoaded:
    name = "least-loaded"
    needs_hashes = False

    def choose(self, req: RouteRequest, workers: Sequence[Worker], loads: Sequence[Load]) -> int:
        return _least_loaded(loads)


@ROUTERS.register("session-affinity")
class SessionAffinity:
    """Sticky by session key; remembers at most ``max_sessions`` sessions (LRU)."""

    name = "session-affinity"
    needs_hashes = False

    def __init__(self, max_sessions: int = 1_000_000) -> None:
        if int(max_sessions) < 1:
            raise ValueError(f"router_options.max_sessions must be >= 1, got {max_sessions}")
        self.max_sessions = int(max_sessions)
        self._home: OrderedDict[str, int] = OrderedDict()

    def choose(self, req: RouteRequest, workers: Sequence[Worker], loads: Sequence[Load]) -> int:
        home = self._home.get(req.session)
        if home is not None and home < len(workers):
            self._home.move_to_end(req.session)
            return home
        home = _least_loaded(loads)
        self._home[req.session] = home
        if len(self._home) > self.max_sessions:
            self._home.popitem(last=False)
        return home


@ROUTERS.register("prefix-aware")
class PrefixAware:
    """Longest cached prefix among the workers that are not overloaded.

    A worker is overloaded when its running + waiting requests exceed the
    least-loaded worker's by more than ``overload_threshold`` (default 4), or
    its KV usage is above ``max_kv_usage`` (default 0.95). Among the others the
    longest cached prefix wins (ties: lower load, then lower index); when no
    worker holds any of the prompt, the least-loaded worker gets it.
    """

    name = "prefix-aware"
    needs_hashes = True

    _HOMES_MAX = 1 << 16  # sessions whose last worker is remembered (an order hint only)
    _KNOWN_MAX = 1 << 12  # sessions whose last hit is kept (a few KB each; a speed hint)

    def __init__(self, overload_threshold: int = 4, max_kv_usage: float = 0.95) -> None:
        self._home: dict[str, int] = {}  # session -> the worker it went to last
        # session -> its last hit there (int64 bytes; taken by its next request: about
        # the sessions between two requests; none for a request that is its own session)
        self._known: dict[str, bytes] = {}
        if int(overload_threshold) < 0:
            raise ValueError(
                f"router_options.overload_threshold must be >= 0, got {overload_threshold}"
            )
        if not 0 < float(max_kv_usage) <= 1:
            raise ValueError(f"router_options.max_kv_usage must be in (0, 1], got {max_kv_usage}")
        self.overload_threshold = int(overload_threshold)
        self.max_kv_usage = float(max_kv_usage)
        self._for: Sequence[Worker] | None = None  # the workers ``_shards`` holds
        self._shards: Any = None

    def choose(self, req: RouteRequest, workers: Sequence[Worker], loads: Sequence[Load]) -> int:
        home = self._home.get(req.session)
        if workers is not self._for:  # the workers' compiled indexes, taken once (None: a
            # worker has none: the dict twin, no prefix caching, attention-DP ranks)
            views = [w.prefix_shard() for w in workers]
            native = None if None in views else kvindex.native
            self._for, self._shards = workers, native and native.Shards(views)
        if self._shards is not None:  # the rule below in one compiled call (kvcache.c)
            # the session's last hit on its home worker: checked there before any lookup
            known = self._known.pop(req.session, b"")
            best, raw = self._shards.choose(req.hashes, loads, -1 if home is None else home,
                                            self.overload_threshold, self.max_kv_usage,
                                            known)  # fmt: skip
            if best >= 0 and req.hashes:  # the winner's hit, which admission starts from
                hit = array("q")  # (int64s: admission acquires and copies them as they are)
                hit.frombytes(raw)
                workers[best].found_prefix(req.hashes, hit)
                if raw and req.session != req.request_id:  # (a session: more may come)
                    if len(self._known) >= self._KNOWN_MAX:
                        self._known.clear()
                    self._known[req.session] = raw
        else:
            best = self._best(req.hashes, home, workers, loads)
        if best < 0:  # every worker overloaded
            return _least_loaded(loads)
        if len(self._home) >= self._HOMES_MAX:
            self._home.clear()
        self._home[req.session] = best
        return best

    def _best(self, hashes: Sequence[int], home: int | None, workers: Sequence[Worker],
              loads: Sequence[Load]) -> int:
        """The rule in Python (``Shards.choose``'s twin), -1 when every worker is
        overloaded: the open worker of least ``(-hit, queued, usage, index)``, the longest
        hit, ties to lower load then lower index (the same one in any order).

        A worker's hit is looked up in full only when it can win: once a best hit
        ``h`` is known, a worker not holding block ``h`` has at most ``h`` blocks
        (the hashes are chained: a longer hit holds block ``h``), so it can only tie,
        and is looked up (up to ``h`` blocks) only when it would win a tie.
        """
        queued = [r + q for r, q, _ in loads]
        floor = min(queued)
        order = [
            i for i, (n, (_, _, usage)) in enumerate(zip(queued, loads, strict=True))
            if n - floor <= self.overload_threshold and usage <= self.max_kv_usage
        ]  # fmt: skip
        if not order:
            return -1
        if home in order:  # likely the longest hit: asked first, it bounds the others
            order.remove(home)
            order.insert(0, home)
        best, best_key, best_hit = order[0], None, 0
        for i in order:
            rest = (queued[i], loads[i][2], i)
            w = workers[i]
            if not hashes:
                hit = 0
            elif best_key is None or (best_hit < len(hashes)
                                      and w.caches_block(hashes[best_hit])):
                hit = w.cached_prefix_blocks(hashes)
            elif rest >= best_key[1:]:
                continue  # at most a tie, and it would lose it
            elif best_hit and w.caches_block(hashes[best_hit - 1]):
                hit = w.cached_prefix_blocks(hashes, best_hit)
            elif best_hit:
                continue  # fewer than best_hit blocks
            else:
                hit = 0
            key = (-hit, *rest)
            if best_key is None or key < best_key:
                best, best_key, best_hit = i, key, hit
        return best


def make_router(name: str, options: dict[str, Any] | None = None) -> Router:
    """The router registered as ``name``; ``options`` are its keyword arguments."""
    try:
        factory = ROUTERS.get(name)
    except ConfigError:
        valid = ROUTERS.names()
        raise ValueError(f"engine.router: unknown router {name!r}; one of {valid}") from None
    try:
        return factory(**(options or {}))
    except TypeError as exc:
        raise ValueError(f"engine.router_options for {name!r}: {exc}") from None
