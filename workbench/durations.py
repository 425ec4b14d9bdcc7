"""A span of time in words, one unit rule for every message that states one (how long a
run takes, how long its releases span): ``7.5 s``, ``42 s``, ``51 min 3 s``, ``2 h 5 min``,
``1.2 days`` (docs/arrival.md, "How long a run takes" and "Arrival span")."""

from __future__ import annotations

DAY_MS = 86_400_000.0


def duration_text(ms: float) -> str:
    """``7.5 s`` (tenths under 10 s), ``42 s``, ``51 min 3 s``, ``2 h 5 min``; from a day
    on, days to a tenth: ``1.2 days``."""
    if ms < 9_950:
        return f"{ms / 1000:.1f}".removesuffix(".0") + " s"
    if ms >= DAY_MS:
        return f"{ms / DAY_MS:,.1f} days"
    s = round(ms / 1000)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h} h {m} min"
    return f"{m} min {sec} s" if m else f"{sec} s"
