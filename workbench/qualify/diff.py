"""Where two canonical reports first differ (docs/parity.md, "Runs, digests and differences")."""

from __future__ import annotations

from typing import Any

MAX_PATHS = 20  # differing paths listed per section


def first_path(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first (path, a's value, b's value) where ``a`` and ``b`` differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                return sub, a.get(k, "<absent>"), b.get(k, "<absent>")
            found = first_path(a[k], b[k], sub)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_path(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path}.length", len(a), len(b)
        return None
    if type(a) is not type(b) or a != b:
        return path, a, b
    return None


def paths(a: Any, b: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    """Up to ``MAX_PATHS`` leaf paths where ``a`` and ``b`` differ (lists: the first)."""
    out = [] if out is None else out
    if len(out) >= MAX_PATHS:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(sub)
            else:
                paths(a[k], b[k], sub, out)
            if len(out) >= MAX_PATHS:
                break
    elif first_path(a, b) is not None:
        found = first_path(a, b, path)
        out.append(found[0] if found else path)
    return out


def _short(value: Any, limit: int = 160) -> Any:
    text = repr(value)
    return value if len(text) <= limit else text[: limit - 1] + "…"


def first_difference(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any] | None:
    """None when equal; else the first differing request and field, and each section's
    differing paths."""
    out: dict[str, Any] = {}
    brecs = {r["request_id"]: r for r in base.get("records", [])}
    crecs = {r["request_id"]: r for r in cand.get("records", [])}
    order = sorted(brecs.values(), key=lambda r: (r.get("dispatch_ns") is None,
                                                  r.get("dispatch_ns") or 0, r["request_id"]))
    for i, rec in enumerate(order):
        other = crecs.get(rec["request_id"])
        if other is None:
            out["request"] = {"index": i, "request_id": rec["request_id"],
                              "field": "<missing in candidate>", "baseline": None,
                              "candidate": None}  # fmt: skip
            break
        found = first_path(rec, other)
        if found:
            out["request"] = {"index": i, "request_id": rec["request_id"], "field": found[0],
                              "baseline": _short(found[1]), "candidate": _short(found[2])}
            break
    else:
        extra = sorted(set(crecs) - set(brecs))
        if extra:
            out["request"] = {"index": len(order), "request_id": extra[0],
                              "field": "<missing in baseline>", "baseline": None,
                              "candidate": None}  # fmt: skip
    for section in ("manifest", "summary", "metrics_timeline", "lifecycle"):
        diff = paths(base.get(section), cand.get(section), section)
        if diff:
            out.setdefault("sections", {})[section] = diff
    return out or None
