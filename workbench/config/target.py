"""Where a run's requests go: the embedded engine (``sim``, with its knobs) or a URL."""

from __future__ import annotations

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
        from workbench.sim.cluster import split_knobs
        from workbench.sim.config import EngineConfig

        try:  # a simulated cluster's knobs (workers, router, ...) are checked by the cluster
            engine_knobs, _cluster = split_knobs(self.engine)
            EngineConfig.from_knobs(**engine_knobs)
        except (ValueError, TypeError) as exc:  # an unknown knob name, a cluster knob
            raise ConfigError(f"target.engine: {exc}") from None
