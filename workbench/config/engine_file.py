"""An engine config file (``--engine-config``, ``plan --preset FILE.json``, a calibration
file's ``engine`` block), read and checked (docs/config-bounds.md, "Size and depth").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.config.validation import in_file, read_config_file
from workbench.errors import ConfigError
from workbench.ranges import show
from workbench.sim.config import EngineConfig

__all__ = ["read_engine_file"]


def read_engine_file(path: str | Path, *, check: bool = False) -> dict[str, Any]:
    """Engine knobs from the file; ``check``: checked as the engine checks them too."""
    data, text = read_config_file(path, "engine config", always_yaml=True)
    nested = isinstance(data, dict) and "engine" in data  # knobs under ``engine:``
    if nested:
        if not isinstance(data["engine"], dict):
            raise ConfigError(f"{path}: engine: expected a mapping of engine knobs, got "
                              f"{show(data['engine'])}")
        data = data["engine"]
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an engine config is a mapping of engine knobs, got "
                          f"{show(data)}")
    if check:  # imported here, not for every read (bench/README.md, "CLI start-up")
        from workbench.sim.cluster import split_knobs

        try:
            engine_knobs, _cluster = split_knobs(dict(data))
            EngineConfig.from_knobs(**engine_knobs)
        except (ValueError, TypeError, ConfigError) as exc:  # a knob's name, type, range
            at = "engine." if nested else ""  # the line of the knob named, in the file
            field = exc.field if isinstance(exc, ConfigError) else None
            raise ConfigError(in_file(path, text, str(exc), {"target.engine.": at,
                                                              "engine.": at}, field)) from None
    return data
