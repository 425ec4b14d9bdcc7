"""A parity campaign's report pieces, read from ``parity.json`` (docs/parity.md)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from workbench.plurals import counted
from workbench.report.headline import Headline
from workbench.report.tables import mapping_table, named


def parity_headline(result: dict[str, Any]) -> Headline:
    rows = result["rows"]
    good = sum(r["qualified"] for r in rows)
    b, c = result["sides"]["baseline"], result["sides"]["candidate"]
    what = (f"{b['commit'][:12]} → {c['commit'][:12]}" if b["side"]["kind"] == "revision"
            else f"{b['label']} → {c['label']} (engine configurations on {c['commit'][:12]})")
    spec = result["spec"]
    win = spec["window"]
    verdict = "QUALIFIED" if result["qualified"] else "NOT QUALIFIED (WARNING)"
    stopped = result.get("stopped")
    return Headline([
        f"{verdict}: {good} of {len(rows)} rows qualified · {what}",
        f"STOPPED (WARNING): {', '.join(stopped['unstable'])} unstable on {stopped['after']}; "
        f"not run: {', '.join(stopped['not_run']) or 'none'}" if stopped else "",
        f"{win['max_items']:,} requests from #{win['offset']:,} ({win['rule']}) of "
        f"{spec['trace']['path'].rsplit('/', 1)[-1]} · each side run twice in separate "
        f"processes · {result['wall_s']:.0f} s",
    ])


def describe(result: dict[str, Any]) -> dict[str, Any]:
    spec = result["spec"]
    out: dict[str, Any] = {
        "campaign": spec["name"],
        "trace": spec["trace"]["path"],
        "trace sha256 (verified)": spec["trace"]["sha256"],
        "window": f"offset {spec['window']['offset']}, {spec['window']['max_items']} units",
        "window rule": spec["window"]["rule_text"],
        "arrival": json.dumps(spec["arrival"], sort_keys=True),
    }
    for name in ("baseline", "candidate"):
        side = result["sides"][name]
        asked = side["side"]
        out[f"{name}"] = (f"revision {asked['revision']} = {side['commit']}"
                          if asked["kind"] == "revision"
                          else f"engine {json.dumps(asked['engine'], sort_keys=True)} on "
                               f"{side['commit']}")
        out[f"{name} tree"] = f"{side['checkout']}{' (dirty)' if side['dirty'] else ''}"
        out[f"{name} compiled modules"] = "; ".join(f"{k}: {v}" for k, v in
                                                     side["compiled"].items())
    out["cores"] = ", ".join(map(str, result.get("cores") or [])) or "unknown"
    out["limits"] = json.dumps(spec["limits"], sort_keys=True)
    return out


def describe_table(result: dict[str, Any]) -> pd.DataFrame:
    return mapping_table(describe(result), "campaign", key="field")


def _topology(knobs: dict[str, Any]) -> str:
    parts = [counted(knobs.get('workers', 1), 'worker')]
    if knobs.get("router"):
        parts.append(str(knobs["router"]))
    if knobs.get("disagg"):
        d = knobs["disagg"]
        parts.append(f"disagg {d['prefill']}P+{d['decode']}D")
    if knobs.get("dp", 1) > 1:
        parts.append(f"dp {knobs['dp']} ({knobs.get('dp_placement', 'least-loaded')})")
    return ", ".join(parts)


def rows_frame(result: dict[str, Any]) -> pd.DataFrame:
    """One row per configuration: topology, capacity, both digests, equal, qualified."""
    out = []
    for r in result["rows"]:
        knobs = r["knobs"]
        out.append({
            "row": r["name"], "topology": _topology(knobs),
            "num_blocks": knobs.get("num_blocks"), "block_size": knobs.get("block_size"),
            "baseline digest": _digest(r["baseline"]), "candidate digest": _digest(r["candidate"]),
            "equal": r["equal"], "evidence": "pass" if r["evidence_passed"] else "fail",
            "qualified": r["qualified"], "verdict": r["verdict"],
        })  # fmt: skip
    return named(pd.DataFrame(out).set_index("row"), "rows")


def _digest(side: dict[str, Any]) -> str:
    d = side.get("digest")
    if d is None:
        return f"did not run: {side.get('error', '')}"
    return d if d == "unstable: stop" else d[:16] + "…"


def _figure(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "" if value is None else str(value)


def evidence_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Every check of every row and side: status, the figure read, the rule."""
    out = []
    for r in result["rows"]:
        for name in ("baseline", "candidate"):
            ev = r[name].get("evidence")
            if not ev:
                continue
            for check, c in ev["checks"].items():
                out.append({"row": r["name"], "side": name, "check": check,
                            "status": c["status"], "figure": _figure(c["figure"]),
                            "rule": c["rule"]})  # fmt: skip
    df = pd.DataFrame(out, columns=["row", "side", "check", "status", "figure", "rule"])
    return named(df, "evidence")


def runs_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Each child process: its digest, core, CPU and wall seconds, peak memory."""
    out = []
    for r in result["rows"]:
        for name in ("baseline", "candidate"):
            for k, run in enumerate(r[name].get("runs", []), 1):
                out.append({"row": r["name"], "side": name, "run": k,
                            "digest": (run.get("digest") or "")[:16] + "…",
                            "cores": ",".join(map(str, run.get("affinity") or [])),
                            "cpu_s": run.get("cpu_s"), "wall_s": run.get("wall_s"),
                            "max_rss_mb": run.get("max_rss_mb")})  # fmt: skip
    return named(pd.DataFrame(out), "runs")


def differences_frame(result: dict[str, Any]) -> pd.DataFrame:
    """Where each unequal (or unstable) row first differs: the request and field."""
    out = []
    for r in result["rows"]:
        diffs = [("baseline vs candidate", r.get("first_difference"))]
        diffs += [(f"{n} run 1 vs run 2", r[n].get("run_difference"))
                  for n in ("baseline", "candidate")]
        for what, d in diffs:
            if not d:
                continue
            req = d.get("request") or {}
            out.append({"row": r["name"], "compared": what,
                        "first request": f"{req.get('request_id')} (#{req.get('index')})"
                        if req else "", "field": req.get("field", ""),
                        "values": f"{req.get('baseline')!r} → {req.get('candidate')!r}"
                        if req else "",
                        "other sections": "; ".join(
                            f"{k}: {', '.join(v[:4])}" for k, v in
                            (d.get("sections") or {}).items())})  # fmt: skip
    df = pd.DataFrame(out, columns=["row", "compared", "first request", "field", "values",
                                    "other sections"])
    return named(df, "differences")


def excluded_frame(result: dict[str, Any]) -> pd.DataFrame:
    """The closed list of fields the canonical digest leaves out, with each reason."""
    excluded = result.get("excluded") or {}
    return mapping_table(excluded, "excluded", key="field")
