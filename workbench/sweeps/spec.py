"""What a sweep varies: ``over`` (a grid or a list of points) as dotted RunConfig paths.

The grammar (grid or list, full paths, short names, ``engine.KNOB``): docs/sweeps.md,
"Points". Every point is checked as a whole ``RunConfig`` before the first request.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.config import RunConfig
from workbench.errors import ConfigError

Point = dict[str, Any]
Over = Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]


def _sections() -> dict[str, set[str]]:
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    out: dict[str, set[str]] = {}
    for name, f in fields.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            out[name] = {g.name for g in dataclasses.fields(default)}
    return out


def resolve_path(path: str) -> str:
    """The full dotted path of ``path`` (``rate`` → ``arrival.rate``); errors list choices."""
    sections = _sections()
    top = {f.name for f in dataclasses.fields(RunConfig)} - set(sections)
    parts = path.split(".")
    if parts[0] == "engine" and len(parts) == 2:
        return f"target.engine.{parts[1]}"
    if len(parts) == 1:
        if path in top:
            return path
        owners = [s for s, names in sections.items() if path in names]
        if len(owners) == 1:
            return f"{owners[0]}.{path}"
        if len(owners) > 1:
            raise ConfigError(f"sweep axis {path!r} is ambiguous: say one of "
                              + ", ".join(f"{s}.{path}" for s in owners))
        raise ConfigError(f"sweep axis {path!r} is not a RunConfig field; use SECTION.FIELD "
                          f"(sections: {', '.join(sections)}) or engine.KNOB")
    section, name = parts[0], parts[1]
    if section not in sections or name not in sections[section]:
        valid = ", ".join(sorted(sections.get(section, ()))) or ", ".join(sections)
        raise ConfigError(f"sweep axis {path!r} is not a RunConfig field (valid here: {valid})")
    if len(parts) > 2 and not (section == "target" and name == "engine" and len(parts) == 3):
        raise ConfigError(f"sweep axis {path!r}: only target.engine.KNOB nests deeper")
    return path


#: the most points one sweep runs (server points included), and runs per point: checked
#: before any point is built (docs/config-bounds.md, "Plans")
MAX_POINTS = 10_000
MAX_REPEATS = 1_000


def check_points(count: int, how: str) -> None:
    """``count`` points (``how`` they came: ``"3 × 1000 × 1000"``) within ``MAX_POINTS``."""
    if count > MAX_POINTS:
        raise ConfigError(f"sweep: {how} = {count:,} points; at most {MAX_POINTS:,} in one "
                          "sweep (docs/config-bounds.md, 'Plans'): split it, or sample the "
                          "axes more coarsely")


def expand(over: Over) -> list[Point]:
    """The sweep's points, each ``{full.path: value}``, in run order (``MAX_POINTS``)."""
    if isinstance(over, Mapping):
        if not over:
            raise ConfigError("sweep 'over' is empty: give at least one axis and its values")
        paths = [resolve_path(p) for p in over]
        values = []
        for p, vals in over.items():
            if isinstance(vals, str | bytes) or not isinstance(vals, Sequence) or not vals:
                raise ConfigError(f"sweep axis {p!r}: give a non-empty list of values")
            values.append(list(vals))
        check_points(math.prod(len(v) for v in values), " × ".join(str(len(v)) for v in values))
        return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*values)]
    if not isinstance(over, Sequence) or isinstance(over, str | bytes):
        raise ConfigError(f"sweep 'over': expected a mapping of axis: values or a list of "
                          f"points, got {type(over).__name__}")
    check_points(len(over), "the list")
    points = []
    for i, point in enumerate(over):
        if not isinstance(point, Mapping) or not point:
            raise ConfigError(f"sweep point {i}: expected a non-empty mapping of axis: value")
        points.append({resolve_path(p): v for p, v in point.items()})
    if not points:
        raise ConfigError("sweep 'over' is empty: give at least one point")
    return points


def apply(cfg: RunConfig, point: Mapping[str, Any]) -> RunConfig:
    """``cfg`` with the point's values set (checked as a whole RunConfig)."""
    d = cfg.to_dict()
    for path, value in point.items():
        if path.startswith("serve."):  # the server's own parameter (sweeps/serve.py)
            continue
        parts = path.split(".")
        node = d
        for key in parts[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[parts[-1]] = value
    try:
        return RunConfig.from_dict(d)
    except ConfigError as exc:
        raise ConfigError(f"sweep point {dict(point)}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"sweep point {dict(point)}: {exc}") from None


def label(point: Mapping[str, Any]) -> str:
    """Short text of a point: ``rate=2.63, max_concurrency=8`` (4 significant figures)."""
    return ", ".join(f"{p.rsplit('.', 1)[-1]}={_short(v)}" for p, v in point.items())


def _short(v: Any) -> str:
    if isinstance(v, float) and math.isfinite(v):
        if v == int(v):
            return str(int(v))
        return f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return str(v)


RATE = "arrival.rate"


def swept_rate(points: Sequence[Mapping[str, Any]]) -> Any:
    """The first point's ``arrival.rate`` when every point sets one, else None: the base
    config's rate when it has none (sweeping the rate needs no base rate)."""
    if points and all(RATE in p for p in points):
        return points[0][RATE]
    return None


def with_rate(cfg: RunConfig | Mapping[str, Any], rate: Any) -> RunConfig | dict[str, Any]:
    """A config mapping with ``arrival.rate`` set to ``rate`` when it has none (a
    ``RunConfig``, or ``rate`` None: unchanged)."""
    if isinstance(cfg, RunConfig) or rate is None:
        return cfg if isinstance(cfg, RunConfig) else dict(cfg)
    out = dict(cfg)
    arrival = out.get("arrival")
    if arrival is None:
        out["arrival"] = {"rate": rate}
    elif isinstance(arrival, Mapping) and arrival.get("rate") is None:
        out["arrival"] = {**arrival, "rate": rate}
    return out
