"""Pressure evidence of one row: was every path of its configuration exercised?

Read from a run's canonical report, independently of the digest; each check is ``pass``,
``fail`` or ``n/a`` with the figure it read (the rules: docs/parity.md, "Evidence").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from workbench.records import RunManifest

PASS, FAIL, NA = "pass", "fail", "n/a"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"


def _check(status: str, figure: Any, rule: str) -> dict[str, Any]:
    return {"status": status, "figure": figure, "rule": rule}


def preemption_check(records: list[dict[str, Any]], bounds: tuple[int, int]) -> dict[str, Any]:
    lo, hi = bounds
    per = [int((r.get("extra") or {}).get("preemptions", 0)) for r in records]
    total, most = sum(per), max(per, default=0)
    rule = f"{lo} to {hi} preemptions, no request preempted twice"
    if most > 1:
        return _check(FAIL, total, f"{rule}: re-admit cycling (a request preempted {most} times)")
    if total > hi:
        return _check(FAIL, total, f"{rule}: a flood ({total})")
    if total < lo:
        what = "not exercised: the capacity edge was never reached" if total == 0 else "too few"
        return _check(FAIL, total, f"{rule}: {what}")
    return _check(PASS, total, rule)


def spread_check(records: list[dict[str, Any]], cluster: dict[str, Any] | None) -> dict[str, Any]:
    if not cluster:
        return _check(NA, None, "one engine: no workers to spread over")
    workers = int(cluster.get("workers", 1))
    dp = int(cluster.get("dp", 1))
    routed = [r for r in records if "worker" in (r.get("extra") or {})]
    per_worker = Counter(int(r["extra"]["worker"]) for r in routed)
    per_rank = Counter((int(r["extra"]["worker"]), int(r["extra"].get("dp_rank", 0)))
                       for r in routed)  # fmt: skip
    front = workers
    if cluster.get("disagg"):
        front = int(cluster["disagg"]["prefill"])
    logical = {(w, k) for w in range(front) for k in range(dp)}
    figure = {f"{w}.{k}" if dp > 1 else str(w): per_rank.get((w, k), 0)
              for w, k in sorted(logical)}  # fmt: skip
    idle = sorted(k for k in logical if not per_rank.get(k))
    rule = "every logical worker serves requests"
    if len(logical) == 1:
        return _check(NA, figure, "one logical worker")
    if idle:
        return _check(FAIL, figure, f"{rule}: {len(idle)} served none")
    if cluster.get("router") == "round-robin" and front > 1:
        counts = [per_worker.get(w, 0) for w in range(front)]
        if max(counts) - min(counts) > 1:
            return _check(FAIL, figure, f"round-robin: worker counts differ by more than 1 "
                          f"({min(counts)}..{max(counts)})")
        rule += "; round-robin workers within 1 of each other"
    if dp > 1 and cluster.get("dp_placement") == "round-robin":
        for w in range(front):
            counts = [per_rank.get((w, k), 0) for k in range(dp)]
            if max(counts) - min(counts) > 1:
                return _check(FAIL, figure, f"round-robin ranks of worker {w} differ by more "
                              f"than 1 ({min(counts)}..{max(counts)})")
        rule += "; round-robin ranks within 1 of each other"
    return _check(PASS, figure, rule)


def handoff_check(records: list[dict[str, Any]], cluster: dict[str, Any] | None) -> dict[str, Any]:
    if not cluster or not cluster.get("disagg"):
        return _check(NA, None, "not disaggregated")
    n = sum(1 for r in records if "decode_worker" in (r.get("extra") or {})
            and (r.get("completion_tokens") or 0) > 1 and r.get("status") == "ok")
    rule = "prefill→decode handoffs happened (requests of more than one token)"
    return _check(PASS if n else FAIL, n, rule)


def reuse_check(records: list[dict[str, Any]], engine: dict[str, Any]) -> dict[str, Any]:
    if not engine.get("enable_prefix_caching", True):
        return _check(NA, None, "prefix caching off")
    cached = sum(int(r.get("cached_tokens") or 0) for r in records)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in records)
    figure = {"cached_tokens": cached, "prompt_tokens": prompt,
              "hit_rate": round(cached / prompt, 6) if prompt else None}  # fmt: skip
    return _check(PASS if cached else FAIL, figure, "some prompt tokens reused from the cache")


def cleanup_check(records: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> dict[str, Any]:
    last = timeline[-1] if timeline else {}
    left = {"running": last.get(RUNNING), "waiting": last.get(WAITING),
            "kv_usage": last.get(KV_USAGE),
            "not_ok": sum(1 for r in records if r.get("status") != "ok")}  # fmt: skip
    ok = bool(timeline) and not any(left.values())
    return _check(PASS if ok else FAIL, left,
                  "at the end nothing runs or waits, no KV block is held, every request ok")


def time_check(records: list[dict[str, Any]], manifest: RunManifest) -> dict[str, Any]:
    span = float(manifest.virtual_duration_s or 0.0)
    bad = 0
    for r in records:
        d, f, e = r.get("dispatch_ns"), r.get("first_token_ns"), r.get("end_ns")
        if d is None or e is None or (f is not None and not d <= f <= e) or e < d:
            bad += 1
    rule = "virtual time advanced; dispatch ≤ first token ≤ end for every request"
    return _check(PASS if span > 0 and not bad else FAIL,
                  {"virtual_s": round(span, 6), "disordered": bad}, rule)


def evidence(report: dict[str, Any], bounds: tuple[int, int] = (1, 3)) -> dict[str, Any]:
    """Every check of one canonical report, and whether the row passes them all."""
    records = [r for r in report.get("records", []) if not r.get("warmup")]
    manifest = RunManifest.from_dict(report.get("manifest", {}))  # the report's JSON section
    cluster = manifest.cluster
    checks = {
        "preemptions": preemption_check(records, bounds),
        "spread": spread_check(records, cluster),
        "handoffs": handoff_check(records, cluster),
        "prefix_reuse": reuse_check(records, manifest.engine or {}),
        "cleanup": cleanup_check(records, report.get("metrics_timeline", [])),
        "virtual_time": time_check(records, manifest),
    }
    failed = [k for k, c in checks.items() if c["status"] == FAIL]
    return {"checks": checks, "passed": not failed, "failed": failed,
            "requests": len(records)}  # fmt: skip
