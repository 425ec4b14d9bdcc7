"""Known Prometheus series of GPU exporters (DCGM): a label, a unit, averaged or summed
over label sets (docs/measurement-rules.md, "Further Prometheus endpoints").
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GPU_SERIES", "SIMULATED_LABEL", "SeriesInfo", "averaged", "describe"]


class SeriesInfo(NamedTuple):
    """What a report shows for a series: a human label, its unit, mean over label sets."""

    label: str
    unit: str
    averaged: bool


GPU_SERIES: dict[str, SeriesInfo] = {
    "DCGM_FI_DEV_GPU_UTIL": SeriesInfo("GPU utilisation", "%", True),
    "DCGM_FI_DEV_MEM_COPY_UTIL": SeriesInfo("GPU memory-copy utilisation", "%", True),
    "DCGM_FI_DEV_FB_USED": SeriesInfo("GPU framebuffer memory used", "MiB", False),
    "DCGM_FI_DEV_FB_FREE": SeriesInfo("GPU framebuffer memory free", "MiB", False),
    "DCGM_FI_DEV_POWER_USAGE": SeriesInfo("GPU power draw", "W", False),
    "DCGM_FI_DEV_GPU_TEMP": SeriesInfo("GPU temperature", "°C", True),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": SeriesInfo("GPU graphics engine active", "ratio", True),
}

#: a sample carrying this label (value "true") comes from a simulated exporter
#: (the embedded engine's ``/simulated-gpu/metrics``), never from hardware
SIMULATED_LABEL = "simulated"


def averaged(name: str) -> bool:
    """True when ``name`` is averaged over its label sets (a known utilisation or ratio)."""
    info = GPU_SERIES.get(name)
    return info is not None and info.averaged


def describe(name: str) -> dict[str, str | None]:
    """``{"label", "unit"}`` of a series: the table's for a known one, else its name."""
    info = GPU_SERIES.get(name)
    return {"label": info.label if info else name, "unit": info.unit if info else None}
