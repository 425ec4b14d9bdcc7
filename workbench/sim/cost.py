"""Step-time model of the embedded engine (pure arithmetic).

Dynamo mocker / aisimulate polynomial model. One engine step runs a batch that
may mix prefill chunks and decode tokens; its duration is the **sum** of a
prefill part (driven by T, the new uncached prompt tokens computed in the step)
and a decode part (driven by u, the share of the KV capacity the batch
attends to), as Dynamo's mocker does. Summing keeps the two effects separable:
a lone request's TTFT is its prefill time (plus the knobs below), and a prefill chunk slows
every decode in the same step, as chunked prefill does on a real GPU.

Beside the steps, ``request_overhead_ms`` is a fixed latency per request that is
not engine time: a real server's API process handles a request (and delivers its
first token) while the engine steps other requests. The senders (the virtual
replay's and the HTTP server's) wait it before the engine sees the request
(``sim.front_end``), so it adds to that request's TTFT and delays no one else.
Before it, ``intake_ms`` is the time a request holds the server's front end, one
request after another (a single API process): requests that come together reach
the engine spread out. ``idle_wake_ms`` is added to a step that starts while the
engine was idle: a real engine's core and workers block when they have no work and
take time to wake, which a request joining a running batch does not pay
(docs/calibration.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

import numpy as np

from workbench.kernels import native as _kernels
from workbench.sim import hosttier, presets
from workbench.sim.config import EngineConfig


def prefill_ms(config: EngineConfig, new_tokens: int) -> float:
    """``a·T² + b·T + c`` milliseconds for T new tokens; 0 when nothing is new."""
    if new_tokens <= 0:
        return 0.0
    a, b, c = config.prefill_coeffs
    t = float(new_tokens)
    return a * t * t + b * t + c


def decode_ms(config: EngineConfig, kv_tokens: int, seqs: int = 0) -> float:
    """``max(floor, a·u² + b·u + c + s·n)`` with u = attended KV tokens / capacity
    (≤ 1), n = decoding sequences and s = ``decode_seq_ms`` (0 by default)."""
    a, b, c = config.decode_coeffs
    u = min(1.0, kv_tokens / config.capacity_tokens)
    return max(config.decode_floor_ms, a * u * u + b * u + c + config.decode_seq_ms * seqs)


def step_ns(config: EngineConfig, prefill_tokens: int, decode_seqs: int, kv_tokens: int,
            prefill_attn: int = 0, host_load_tokens: int = 0) -> int:
    """Integer nanoseconds of one step: (prefill + decode-if-any) / speed-up, or a
    preset's step time (``sim.presets``: it also takes the prefill chunks' attention
    pairs); plus the transfer of KV brought back from host memory (``sim.hosttier``)."""
    if config.zero_cost:
        return 0
    if config.preset:
        ms = presets.resolve(config.preset).step_ms(
            prefill_tokens, decode_seqs, kv_tokens, prefill_attn)
    else:
        ms = prefill_ms(config, prefill_tokens)
        if decode_seqs > 0:
            ms += decode_ms(config, kv_tokens, decode_seqs)
    if host_load_tokens:
        ms += hosttier.load_ms(config, host_load_tokens)
    return round(ms * 1e6 / config.speedup)


_VECTOR_MIN = 24  # fewer steps are cheaper one by one than through numpy's calls


def decode_steps_ns(config: EngineConfig, seqs: int, kv_tokens: np.ndarray | range) -> list[int]:
    """``step_ns`` of decode-only steps (``seqs`` sequences, no prefill, nothing from the
    host tier), one per entry of ``kv_tokens``: the same float operations in the same
    order, element-wise (IEEE doubles, round half to even), so every value equals
    ``step_ns``'s. A preset's step time is taken step by step."""
    if config.zero_cost or config.preset:
        return [step_ns(config, 0, seqs, kv) for kv in _ints(kv_tokens)]
    a, b, c = config.decode_coeffs
    cap, floor, sp = config.capacity_tokens, config.decode_floor_ms, config.speedup
    s = config.decode_seq_ms * seqs
    if len(kv_tokens) < _VECTOR_MIN:  # ``decode_ms`` then ``step_ns``'s rounding, inlined
        out = []
        for kv in _ints(kv_tokens):
            u = min(1.0, kv / cap)
            out.append(round(max(floor, a * u * u + b * u + c + s) * 1e6 / sp))
        return out
    kv_arr = np.asarray(kv_tokens, dtype=np.int64)
    u_arr = np.minimum(1.0, kv_arr / cap)
    ms = np.maximum(floor, a * u_arr * u_arr + b * u_arr + c + s)
    vec: list[int] = np.rint(ms * 1e6 / sp).astype(np.int64).tolist()
    return vec


def decode_span_ends(config: EngineConfig, seqs: int, kv0: int, k: int, end: int) -> list[int]:
    """The ends of a span's ``k`` decode-only steps (``Engine._span_ends``), the first at
    ``end``; step ``i`` holds ``kv0 + i·seqs`` KV tokens. ``decode_steps_ns`` summed, or
    its compiled twin (``workbench.kernels``: the same values)."""
    if _kernels is not None and not (config.zero_cost or config.preset) and k >= 1:
        a, b, c = config.decode_coeffs
        return _kernels.decode_ends(end, k, kv0, seqs, a, b, c, config.decode_seq_ms * seqs,
                                    config.capacity_tokens, config.decode_floor_ms,
                                    config.speedup)  # fmt: skip
    # the KV tokens of steps 1 .. k-1 after the first (a range: no array for a short span)
    kv = range(kv0 + seqs, kv0 + k * seqs, seqs) if seqs else np.full(k - 1, kv0, dtype=np.int64)
    return list(itertools.accumulate(decode_steps_ns(config, seqs, kv), initial=end))


def decode_step(config: EngineConfig) -> Callable[[int, int], int]:
    """``step_ns(config, 0, seqs, kv_tokens)`` as a function of ``(seqs, kv_tokens)`` with
    the config's constants bound once (an engine's decode-only steps, ``Engine._next_plan``):
    the same float operations in the same order, so the same ns."""
    if config.zero_cost or config.preset:
        return partial(step_ns, config, 0)
    a, b, c = config.decode_coeffs
    cap, floor, sp, per_seq = (config.capacity_tokens, config.decode_floor_ms,
                               config.speedup, config.decode_seq_ms)  # fmt: skip

    def ns(seqs: int, kv_tokens: int) -> int:
        if seqs <= 0:
            return 0
        u = min(1.0, kv_tokens / cap)
        return round(max(floor, a * u * u + b * u + c + per_seq * seqs) * 1e6 / sp)

    return ns


def span_ends(config: EngineConfig) -> Callable[[int, int, int, int], list[int]]:
    """``decode_span_ends(config, seqs, kv0, k, end)`` as a function of ``(seqs, kv0, k,
    end)`` with the config's constants bound once (``Engine._span_ends``)."""
    if _kernels is None or config.zero_cost or config.preset:
        return partial(decode_span_ends, config)
    a, b, c = config.decode_coeffs
    cap, floor, sp, per_seq = (config.capacity_tokens, config.decode_floor_ms,
                               config.speedup, config.decode_seq_ms)  # fmt: skip
    kernel = _kernels.decode_ends

    def ends(seqs: int, kv0: int, k: int, end: int) -> list[int]:
        if k < 1:
            return decode_span_ends(config, seqs, kv0, k, end)
        got: list[int] = kernel(end, k, kv0, seqs, a, b, c, per_seq * seqs, cap, floor, sp)
        return got

    return ends


def _ints(values: np.ndarray | range) -> list[int] | range:
    return values if isinstance(values, range) else values.tolist()


def _ns(config: EngineConfig, ms: float) -> int:
    """``ms`` as integer nanoseconds / speed-up; 0 for a zero-cost engine."""
    if config.zero_cost or ms <= 0:
        return 0
    return round(ms * 1e6 / config.speedup)


def request_overhead_ns(config: EngineConfig) -> int:
    """Integer nanoseconds a request waits before the engine sees it (/ speed-up)."""
    return _ns(config, config.request_overhead_ms)


def intake_ns(config: EngineConfig) -> int:
    """Integer nanoseconds a request holds the front end, one after another."""
    return _ns(config, config.intake_ms)


def idle_wake_ns(config: EngineConfig) -> int:
    """Integer nanoseconds added to a step that starts while the engine was idle."""
    return _ns(config, config.idle_wake_ms)

