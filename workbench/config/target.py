"""Where a run's requests go: the embedded engine (``sim``, with its knobs) or a URL."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ConfigError


@dataclass(frozen=True)
class TargetSpec:
    """Where requests go: ``"sim"`` (the embedded engine, started for the run) or a URL."""

    url: str = "sim"
    engine: dict[str, Any] = field(default_factory=dict)
    # "sim" only: the engine on the client's event loop (its steps count as client lag)
    in_process: bool = False

    @property
    def is_sim(self) -> bool:
        return self.url == "sim"

    def check_engine(self) -> None:
        """``target.engine`` knobs, checked as the engine checks them."""
        if not self.engine:
            return
        # imported here, not at every CLI start (bench/README.md, "CLI start-up")
        from workbench.sim.cluster import CLUSTER_KNOBS, split_knobs
        from workbench.sim.config import EngineConfig, Faults

        try:  # a simulated cluster's knobs (workers, router, ...) are checked by the cluster
            engine_knobs, _cluster = split_knobs(self.engine)
            EngineConfig.from_knobs(**engine_knobs)
        except (ValueError, TypeError) as exc:  # an unknown knob name, a cluster knob
            # the field: an unknown knob's own (its flag names it), else the section's
            known = {f.name for cls in (EngineConfig, Faults) for f in dataclasses.fields(cls)}
            unknown = [k for k in self.engine
                       if k not in known and k not in CLUSTER_KNOBS and k != "scheduler"]
            raise ConfigError(f"target.engine: {exc}", field="target.engine" + "".join(
                f".{k}" for k in unknown[:1])) from None
