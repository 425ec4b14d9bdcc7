"""The host-memory KV tier: blocks evicted from the device wait in a host LRU by their
chained hash, and a prefix continued there is brought back, not recomputed
(docs/hardware.md, "Host KV tier"). Only hashes are kept: the engine holds no KV.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from workbench.sim.config import EngineConfig
from workbench.sim.presets import resolve
from workbench.sim.presets.catalog import MODELS

# without a preset, one token's KV is Llama-3.1-8B's in BF16 (131,072 bytes)
DEFAULT_KV_BYTES_PER_TOKEN = MODELS["llama-3.1-8b"].kv_bytes_per_token(2)


class HostTier:
    """An LRU of block hashes, ``capacity`` blocks."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.stored = 0  # blocks ever offloaded

    def __len__(self) -> int:
        return len(self._lru)

    def put(self, hashes: Iterable[int]) -> None:
        """Offload evicted blocks (in eviction order), dropping the oldest beyond capacity."""
        lru = self._lru
        for h in hashes:
            lru[h] = None
            lru.move_to_end(h)
            self.stored += 1
        while len(lru) > self.capacity:
            lru.popitem(last=False)

    def extend(self, hashes: Sequence[int], start: int, stop: int) -> int:
        """How many of ``hashes[start:stop]`` host memory holds, in a row from ``start``."""
        lru, n = self._lru, 0
        for h in hashes[start:stop]:
            if h not in lru:
                break
            n += 1
        return n

    def touch(self, hashes: Iterable[int]) -> None:
        """Blocks just brought back are the most recently used."""
        for h in hashes:
            if h in self._lru:
                self._lru.move_to_end(h)

    def clear(self) -> None:
        self._lru.clear()


def kv_bytes_per_token(config: EngineConfig) -> int:
    """One token's KV, whole model: the preset's, else ``DEFAULT_KV_BYTES_PER_TOKEN``."""
    if config.preset:
        return resolve(config.preset).kv_bytes_per_token
    return DEFAULT_KV_BYTES_PER_TOKEN


def host_tier(config: EngineConfig) -> HostTier | None:
    """The tier ``config`` asks for (None when ``host_kv_gb`` is 0)."""
    if config.host_kv_gb <= 0:
        return None
    per_block = kv_bytes_per_token(config) * config.block_size
    return HostTier(max(1, int(config.host_kv_gb * 1e9 // per_block)))


def load_ms(config: EngineConfig, tokens: int) -> float:
    """Milliseconds to bring ``tokens`` tokens of KV back from host memory."""
    if tokens <= 0:
        return 0.0
    if config.preset:
        return resolve(config.preset).load_ms(tokens, config.host_kv_gbps)
    return tokens * DEFAULT_KV_BYTES_PER_TOKEN / (config.host_kv_gbps * 1e9) * 1e3
