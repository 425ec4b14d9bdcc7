"""How numbers and a capacity are worded, the same in the CLI, reports, the index and plans.

The capacity's definition: docs/sweeps.md, "Capacity".
"""

from __future__ import annotations

import math
from typing import Any

#: below this share of the offered request rate, a capacity's sentence warns
DELIVERED_WARN_SHARE = 0.8


def sig(v: Any, digits: int = 3) -> str:
    """``v`` with ``digits`` significant figures; whole numbers (and anything ≥ 10^digits
    / 10) as integers, no exponent; missing or NaN as a dash."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return "–"
    x = float(v)
    if not math.isfinite(x):
        return "–"
    if x == int(x) or abs(x) >= 10 ** (digits - 1):
        return str(round(x))
    return f"{x:.{digits}g}"


def capacity_phrase(sustained_rps: Any, offered: str, *, at_least: bool = False) -> str:
    """``"capacity 1.81 req/s sustained, at 2.63 requests/s offered"`` (``offered``: that
    load in words); ``at_least``: the SLO held at every load tried."""
    return (f"capacity {'at least ' if at_least else ''}{sig(sustained_rps)} req/s sustained, "
            f"at {offered}")


def delivery_warning(sustained_rps: Any, offered_rps: float | None) -> str:
    """`` WARNING: ...`` when the engine delivered under ``DELIVERED_WARN_SHARE`` of the
    offered request rate, else ``""``."""
    if not isinstance(sustained_rps, int | float) or not offered_rps:
        return ""
    share = sustained_rps / offered_rps
    if share >= DELIVERED_WARN_SHARE:
        return ""
    return (f" WARNING: the engine delivered {sig(sustained_rps)} of the {sig(offered_rps)} "
            f"req/s offered ({share * 100:.0f} %): it fell behind, or the run was too short "
            "for its ramp-up and drain to be negligible.")
