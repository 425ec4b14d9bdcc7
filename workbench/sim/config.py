"""``EngineConfig``: every knob of the embedded engine in one frozen value.

One value configures the engine core, its cost model, the HTTP server and the
fault switches, so a run's manifest can record the whole engine by
``dataclasses.asdict`` and the virtual-time replay can rebuild it exactly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.sim.faults import Faults

Mode = Literal["vllm", "sglang"]

PREFILL_COEFFS = (4.209989e-7, 1.518344e-2, 16.50142)
DECODE_COEFFS = (-25.74, 54.01, 5.74)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Knobs of the simulated engine; defaults follow vLLM and Dynamo's mocker.

    ``block_size`` 16 is vLLM's default on GPUs (real-engines.md saw 32 on the
    CPU build); ``num_blocks`` 65 536 × 16 = 1 Mi tokens is Dynamo's default
    capacity (16 384 blocks of 64). ``mode`` picks the ``/metrics`` dialect
    (vLLM or SGLang names); all four wire protocols are served in both modes.
    ``zero_cost`` makes every step take no time (throughput tests);
    ``speedup`` divides every step time. ``decode_seq_ms`` is a decode step's
    cost per sequence in its batch, beside its KV term (``sim.cost.decode_ms``); 0
    by default. ``request_overhead_ms`` is a fixed
    latency every request pays before the engine sees it (a real server's API
    process, the first token's delivery), outside the engine's steps
    (``sim.cost.request_overhead_ns``, docs/calibration.md); 0 by default.
    ``intake_ms`` is the time each request holds the server's front end, one
    request after another, before that overhead; ``idle_wake_ms`` the extra time
    of a step that starts while the engine was idle (its core and workers wake
    from their idle wait). Both 0 by default (docs/calibration.md).
    ``preset`` (``MODEL/GPU/tpN[/fp8]``) replaces the polynomial step times with a
    model × accelerator's (``sim.presets``; ``from_knobs`` also derives ``num_blocks``
    from it); ``host_kv_gb`` per worker keeps evicted KV blocks in host memory, brought
    back at ``host_kv_gbps`` (0: the preset GPU's PCIe link) before a prefill
    (docs/hardware.md).
    """

    model: str = "workbench-sim"
    mode: Mode = "vllm"
    block_size: int = 16
    num_blocks: int = 65_536
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 131_072
    enable_prefix_caching: bool = True
    speedup: float = 1.0
    zero_cost: bool = False
    prefill_coeffs: tuple[float, float, float] = PREFILL_COEFFS
    decode_coeffs: tuple[float, float, float] = DECODE_COEFFS
    decode_floor_ms: float = 1.0
    decode_seq_ms: float = 0.0
    request_overhead_ms: float = 0.0
    intake_ms: float = 0.0
    idle_wake_ms: float = 0.0
    preset: str = ""
    host_kv_gb: float = 0.0
    host_kv_gbps: float = 0.0
    seed: int = 0
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        self._check_types()
        if self.mode not in ("vllm", "sglang"):
            raise ValueError(f"mode must be 'vllm' or 'sglang', got {self.mode!r}")
        for name in ("block_size", "num_blocks", "max_num_batched_tokens", "max_num_seqs",
                     "max_model_len"):
            if getattr(self, name) < 1:  # an integer by now (_check_types)
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("decode_seq_ms", "request_overhead_ms", "intake_ms", "idle_wake_ms",
                     "host_kv_gb", "host_kv_gbps"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {self.speedup}")
        if self.preset:
            from workbench.sim.presets import resolve

            resolve(self.preset)  # ValueError naming the bad part
        if self.host_kv_gb and not (self.preset or self.host_kv_gbps):
            raise ValueError("host_kv_gb needs host_kv_gbps (or a preset, whose GPU link "
                             "sets it)")

    def _check_types(self) -> None:
        """Every knob of its type, named when it is not: integers (an integral float is
        taken), finite numbers, booleans, and three finite coefficients per polynomial,
        so an engine config file or ``serve_sim(**knobs)`` fails here, not mid-run."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "int":
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"{f.name} must be an integer, got {v!r}")
            elif f.type == "float":
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ValueError(f"{f.name} must be a finite number, got {v!r}")
                v = float(v)
            elif f.type == "bool" and not isinstance(v, bool):
                raise ValueError(f"{f.name} must be true or false, got {v!r}")
            elif f.name in ("prefill_coeffs", "decode_coeffs"):
                ok = isinstance(v, list | tuple) and len(v) == 3 and all(
                    not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)
                    for x in v)  # fmt: skip
                if not ok:
                    raise ValueError(f"{f.name} must be three finite numbers [a, b, c], got {v!r}")
                v = tuple(float(x) for x in v)
            object.__setattr__(self, f.name, v)

    @property
    def capacity_tokens(self) -> int:
        return self.block_size * self.num_blocks

    @classmethod
    def from_knobs(cls, **knobs: Any) -> EngineConfig:
        """Build from flat keyword knobs; fault switch names go into ``faults``.

        Lets ``serve_sim(block_size=32, error_rate=0.1)`` and the CLI stay flat.
        Unknown names raise ``ValueError`` listing the valid ones.
        """
        own = {f.name for f in dataclasses.fields(cls)}
        fault_names = {f.name for f in dataclasses.fields(Faults)}
        unknown = set(knobs) - own - fault_names
        if unknown:
            valid = ", ".join(sorted((own | fault_names) - {"faults"}))
            raise ValueError(f"unknown engine knob(s) {sorted(unknown)}; valid: {valid}")
        if knobs.get("preset"):  # the preset's KV blocks and request overhead, unless given
            from workbench.sim.presets import engine_knobs

            knobs = engine_knobs(str(knobs["preset"]), knobs)
        fault_kw = {k: knobs.pop(k) for k in list(knobs) if k in fault_names}
        if fault_kw:
            base = knobs.pop("faults", None) or Faults()
            knobs["faults"] = dataclasses.replace(base, **fault_kw)
        return cls(**knobs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
