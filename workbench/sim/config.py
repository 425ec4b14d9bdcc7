"""``EngineConfig``: every knob of the embedded engine (core, cost model, server, fault
switches) in one frozen value, so a manifest records the whole engine by ``asdict``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.plurals import noun
from workbench.ranges import check_dataclass
from workbench.sim.faults import KNOBS, Faults

Mode = Literal["vllm", "sglang"]

#: knobs a run's manifest records only away from their default (``to_dict``): added
#: after earlier runs' canonical digests were fixed, so a run that leaves them alone
#: records, and digests, what it did before (docs/measurement-rules.md)
RECORDED_WHEN_SET: dict[str, Any] = {"mixed_batches": True, "admission_reserve": 0.0,
                                      "guaranteed_no_evict": False}

PREFILL_COEFFS = (4.209989e-7, 1.518344e-2, 16.50142)
DECODE_COEFFS = (-25.74, 54.01, 5.74)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Knobs of the simulated engine; defaults follow vLLM and Dynamo's mocker.

    Each knob is type- and range-checked on construction (``workbench.ranges``: a
    ``ConfigError`` naming ``target.engine.<knob>`` and its rule). What each knob means:
    docs/embedded-engine.md, the cost terms docs/calibration.md, ``preset`` and the host
    KV tier docs/hardware.md.
    """

    model: str = "workbench-sim"
    mode: Mode = "vllm"
    block_size: int = 16
    num_blocks: int = 65_536
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    mixed_batches: bool = True
    admission_reserve: float = 0.0
    guaranteed_no_evict: bool = False
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
        self._coerce()
        check_dataclass(self, KNOBS)  # types and ranges: the run config's own table
        if self.preset:
            from workbench.sim.presets import resolve

            resolve(self.preset)  # ValueError naming the bad part
        if self.host_kv_gb and not (self.preset or self.host_kv_gbps):
            raise ValueError("host_kv_gb needs host_kv_gbps (or a preset, whose GPU link "
                             "sets it)")

    def _coerce(self) -> None:
        """What a config file spells loosely, in the knob's own type: an integral float
        for an integer (``16.0``), a list for a coefficient triple. Anything else is
        left as given for ``check_dataclass`` to name."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "int" and isinstance(v, float) and v.is_integer():
                object.__setattr__(self, f.name, int(v))
            elif f.type == "float" and type(v) is int:
                object.__setattr__(self, f.name, float(v))
            elif f.name.endswith("_coeffs") and isinstance(v, list | tuple) and all(
                    type(x) in (int, float) for x in v):
                object.__setattr__(self, f.name, tuple(float(x) for x in v))

    @property
    def capacity_tokens(self) -> int:
        return self.block_size * self.num_blocks

    @classmethod
    def from_knobs(cls, **knobs: Any) -> EngineConfig:
        """Build from flat keyword knobs (fault switch names go into ``faults``);
        ``scheduler=NAME`` lays an engine's scheduling knobs (``sim.presets.schedulers``)
        under the given ones. Unknown names raise ``ValueError`` listing the valid ones."""
        own = {f.name for f in dataclasses.fields(cls)}
        fault_names = {f.name for f in dataclasses.fields(Faults)}
        if "scheduler" in knobs:  # an engine's scheduling: knobs under the caller's own
            from workbench.sim.presets.schedulers import engine_knobs as scheduler_knobs

            knobs = scheduler_knobs(str(knobs["scheduler"]),
                                    {k: v for k, v in knobs.items() if k != "scheduler"})
        unknown = set(knobs) - own - fault_names
        if unknown:
            valid = ", ".join(sorted((own | fault_names) - {"faults"}))
            raise ValueError(f"unknown engine {noun(len(unknown), 'knob')} {sorted(unknown)}; "
                             f"valid: {valid}")
        if knobs.get("preset"):  # the preset's KV blocks and request overhead, unless given
            from workbench.sim.presets import engine_knobs

            knobs = engine_knobs(str(knobs["preset"]), knobs)
        fault_kw = {k: knobs.pop(k) for k in list(knobs) if k in fault_names}
        if fault_kw:
            base = knobs.pop("faults", None) or Faults()
            knobs["faults"] = dataclasses.replace(base, **fault_kw)
        return cls(**knobs)

    def to_dict(self) -> dict[str, Any]:
        """Every knob, less those of ``RECORDED_WHEN_SET`` at their default (what a
        manifest records; ``EngineConfig(**d)`` gives the same config back)."""
        d = dataclasses.asdict(self)
        for knob, default in RECORDED_WHEN_SET.items():
            if d[knob] == default:
                del d[knob]
        return d


#: the knobs that set the engine's step times and per-request costs (docs/calibration.md)
COST_KNOBS: tuple[str, ...] = ("prefill_coeffs", "decode_coeffs", "decode_floor_ms",
                               "decode_seq_ms", "request_overhead_ms", "intake_ms",
                               "idle_wake_ms")
#: the headline's words for an engine with none of them set and no preset
DEFAULT_STEP_TIMES = "default step times, not a GPU's"


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Which cost model timed a simulated run: ``brief`` in a headline's few words,
    ``detail`` for the report's run table (docs/embedded-engine.md, "Which step times")."""

    brief: str
    detail: str


def step_times(engine: Any) -> StepTimes:
    """The cost model of ``engine`` (a manifest's engine knobs; a knob left out is at its
    default): a preset's name and the error it states (docs/hardware.md), the default
    coefficients, which are no GPU's, or coefficients an engine config set."""
    knobs = engine if isinstance(engine, Mapping) else {}
    preset = knobs.get("preset")
    if preset:
        from workbench.sim.presets.stated import stated_error_brief

        said = stated_error_brief(str(preset))
        return StepTimes(f"preset {preset}: {said}", f"preset {preset} ({said})")
    if knobs.get("zero_cost"):
        return StepTimes("zero-cost steps", "zero_cost: every step takes no time")
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    changed = [k for k in COST_KNOBS if _plain(knobs.get(k, defaults[k])) != _plain(defaults[k])]
    if not changed:
        return StepTimes(DEFAULT_STEP_TIMES,
                         "default: the embedded engine's own coefficients, calibrated to no "
                         "GPU (its TTFT and TPOT are not a GPU's; a preset names one)")
    return StepTimes("step times from its engine config, no stated error",
                     "from the engine config: " + ", ".join(
                         f"{k} {_plain(knobs[k])}" for k in changed) + " (no preset, so no "
                     "stated error)")


def _plain(v: Any) -> Any:
    """A knob as compared and printed: a coefficient triple as a list of floats."""
    return [float(x) for x in v] if isinstance(v, list | tuple) else v
