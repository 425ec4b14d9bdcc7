"""Axis-3 modes and runner options, exercised in virtual time (same runner as live)."""

import pytest

from workbench.data import path as data_path
from workbench.executors.dispatch import run
from workbench.executors.virtual import simulate

SMALL = str(data_path("tracelab/multi_session_example.csv"))
LARGE = str(data_path("tracelab/multi_session_large.csv"))
MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))
MS = 1_000_000


def test_dry_run_sends_nothing_and_reports_the_plan():
    result = run({"trace": LARGE, "dry_run": True, "target": "http://127.0.0.1:9"})
    assert result.records == []
    plan = result.manifest.plan
    assert plan["units"] == 48 and plan["rounds"] == 303
    assert 0 < plan["planned_prefix_hit_rate"] < 1
    assert result.manifest.status == "dry_run"


def test_max_items_keeps_first_units_in_file_order():
    result = simulate({"trace": {"path": LARGE, "max_items": 5}})
    assert sorted({r.unit_ordinal for r in result.records}) == [0, 1, 2, 3, 4]
    first_ids = [u["unit_id"] for u in sorted(result.lifecycle, key=lambda d: d["unit_ordinal"])]
    assert first_ids == ["0", "1", "2", "3", "4"]


def test_trace_timed_releases_at_rescaled_arrivals():
    result = simulate({"trace": {"path": MOONCAKE, "max_items": 20}, "arrival": {"rate": 4.0}})
    firsts = sorted(result.records, key=lambda r: r.unit_ordinal)
    t0 = firsts[0].scheduled_ns
    offsets = [(r.scheduled_ns - t0) / 1e9 for r in firsts]
    assert (len(offsets) - 1) / (offsets[-1] - offsets[0]) == pytest.approx(4.0)
    # in virtual time a release happens exactly when scheduled
    assert all(r.dispatch_ns == r.scheduled_ns for r in firsts)


def test_saturated_releases_everything_at_once():
    result = simulate({"trace": SMALL, "arrival": "saturated"})
    starts = {r.scheduled_ns for r in result.records if r.round_idx == 0}
    assert len(starts) == 1


def test_tool_waits_are_honoured_and_scaled():
    for scale in (1.0, 0.5):
        result = simulate({"trace": SMALL, "arrival": {"tool_wait_scale": scale}})
        by = {(r.session_id, r.round_idx): r for r in result.records}
        gap = by[("0", 1)].dispatch_ns - by[("0", 0)].end_ns
        assert gap == round(100 * scale * MS)  # tool_wait_after_ms of session 0 round 0


def test_warmup_runs_first_and_is_flagged():
    result = simulate({"trace": LARGE, "arrival": {"warmup": 2}})
    warm = [r for r in result.records if r.warmup]
    measured = [r for r in result.records if not r.warmup]
    assert warm and len({r.session_id for r in warm}) == 2
    assert max(r.round_idx for r in warm) <= 2  # at most 3 rounds each
    assert max(r.end_ns for r in warm) <= min(r.dispatch_ns for r in measured)
    assert len(measured) == 303
    assert all(r.request_id.startswith("warmup:") for r in warm)


def test_closed_loop_keeps_c_sessions_and_loops_the_pool_until_the_deadline():
    result = simulate({
        "trace": {"path": SMALL},
        "arrival": {"mode": "closed-loop", "max_concurrency": 2, "duration_s": 3.0,
                    "tool_wait_scale": 0.1},
    })
    life = result.lifecycle
    assert max(d["loop"] for d in life) >= 1  # the pool of 2 sessions looped
    t0 = min(d["admitted_ns"] for d in life)
    assert all(d["admitted_ns"] - t0 < 3.0e9 for d in life)  # no new session after the deadline
    # never more than 2 active at once
    events = sorted([(d["admitted_ns"], 1) for d in life] + [(d["end_ns"], -1) for d in life],
                    key=lambda e: (e[0], e[1]))
    active = peak = 0
    for _, step in events:
        active += step
        peak = max(peak, active)
    assert peak == 2
    ids = [r.request_id for r in result.records]
    assert len(ids) == len(set(ids))  # looped units get distinct request ids


def test_context_guard_skips_and_ends_the_session():
    result = simulate({"trace": SMALL, "context": {"max_model_len": 800}})
    skipped = [r for r in result.records if r.status == "skipped"]
    assert skipped and all("max_model_len" in r.error for r in skipped)
    assert all(r.sent_prompt_tokens + r.planned_output_tokens >= 800 for r in skipped)
    reasons = {d["reason"] for d in result.lifecycle}
    assert "context_guard" in reasons


def test_fixed_output_length_is_pinned():
    result = simulate({"trace": SMALL, "arrival": {"output_len": "fixed:7"}})
    assert all(r.completion_tokens == 7 for r in result.records)


def test_shared_prefix_pool_makes_first_rounds_share_tokens(tmp_path):
    trace = tmp_path / "two.csv"
    trace.write_text("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
                     "a,0,1000,50,5,0\nb,0,1000,50,5,0\n")
    cfg = {"trace": str(trace), "arrival": {"max_concurrency": 1}}
    plain = simulate(cfg)
    shared = simulate({**cfg, "context": {"shared_prefix": True}})
    assert [r.cached_tokens for r in plain.records] == [0, 0]
    second = shared.records[1]
    assert second.folded_prefix_tokens == 1000
    assert second.cached_tokens == 1000 - 1000 % 16  # the shared head, in whole blocks


@pytest.mark.parametrize("policy", ["trace-reported", "prefix-preserving"])
def test_ideal_hit_rate_follows_the_runs_policy(policy):
    """Infinite cache: every planned prefix hits, so ideal = planned under either policy."""
    result = simulate({"trace": str(data_path("tracelab/session_workload_example.csv")),
                       "context": policy})
    manifest = result.manifest
    assert manifest.ideal_prefix_hit_rate == pytest.approx(
        manifest.plan["planned_prefix_hit_rate"])
