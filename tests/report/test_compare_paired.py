"""Compare pairs two runs that replay the same sessions (docs/metrics.md, "Compare"): each
resample draws the shared sessions once, the same draw for both runs, so a change every
session shares is not lost in the spread between sessions; and it counts evidence in
sessions when it resamples sessions: 2 sessions of 200 requests decide nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.executors.virtual import simulate
from workbench.report import compare

SESSIONS, ROUNDS = 8, 25
LEVELS = np.array([300.0, 500, 700, 900, 1100, 1300, 1500, 1700])  # each session's own speed
WITHIN = np.linspace(-100.0, 100.0, ROUNDS)
OWNER = np.repeat(np.arange(SESSIONS), ROUNDS)
BASE = (LEVELS[:, None] + WITHIN[None, :]).ravel()
# the change run: every round 150 ms later, give or take 40 ms that differ round to round
JITTER = 40.0 * np.sin(np.arange(SESSIONS * ROUNDS) * 1.7)
LATER = BASE + 150.0 + JITTER


def _slow_paired(a: np.ndarray, b: np.ndarray, owner: np.ndarray, q: float, n_boot: int,
                 seed: int) -> tuple[float, float]:
    """The paired cluster bootstrap spelt out: per resample the same drawn sessions for
    both runs, each bringing all of its values, the percentile of the repeated values;
    the 2.5 and 97.5 % quantiles of the differences (the same generator, batch by batch)."""
    rng = np.random.default_rng(seed)
    diffs = []
    for start in range(0, n_boot, compare.BATCH):
        for row in rng.integers(0, SESSIONS, size=(min(compare.BATCH, n_boot - start),
                                                   SESSIONS)):
            ra = np.concatenate([a[owner == s] for s in row])
            rb = np.concatenate([b[owner == s] for s in row])
            diffs.append(np.percentile(rb, q) - np.percentile(ra, q))
    lo, hi = np.quantile(diffs, [0.025, 0.975])
    return float(lo), float(hi)


def test_a_shift_every_session_shares_is_significant_paired_not_independent() -> None:
    for q in (50, 90):
        change, lo, hi = compare.bootstrap_diff(BASE, LATER, q, n_boot=600, seed=0,
                                                base_clusters=OWNER, other_clusters=OWNER)
        assert lo < 0 < hi  # independent draws: the 1400 ms spread between sessions hides it
        pchange, plo, phi = compare.bootstrap_diff(BASE, LATER, q, n_boot=600, seed=0,
                                                   base_clusters=OWNER, other_clusters=OWNER,
                                                   paired=True)
        assert pchange == change and 0 < plo <= change <= phi
        assert (plo, phi) == pytest.approx(_slow_paired(BASE, LATER, OWNER, q, 600, 0),
                                           rel=1e-12)


def test_a_shift_of_every_value_is_the_paired_interval_exactly() -> None:
    # by hand: a percentile moves with a constant shift, so every paired resample's
    # difference is the shift itself, however the sessions spread
    change, lo, hi = compare.bootstrap_diff(BASE, BASE + 150.0, 90, n_boot=300, seed=2,
                                            base_clusters=OWNER, other_clusters=OWNER,
                                            paired=True)
    assert change == pytest.approx(150.0) and lo == pytest.approx(150.0)
    assert hi == pytest.approx(150.0)


def test_sessions_are_paired_by_id_not_by_position() -> None:
    # the change run's values in another order, its session ids beside them
    order = np.random.default_rng(1).permutation(BASE.size)
    ids = np.array([f"s{s}" for s in OWNER])
    got = compare.bootstrap_diff(BASE, LATER[order], 50, n_boot=300, seed=0,
                                 base_clusters=ids, other_clusters=ids[order], paired=True)
    want = compare.bootstrap_diff(BASE, LATER, 50, n_boot=300, seed=0,
                                  base_clusters=ids, other_clusters=ids, paired=True)
    assert got == pytest.approx(want, rel=1e-12)


def test_pairing_runs_of_other_sessions_is_refused() -> None:
    with pytest.raises(ValueError, match="paired: the runs' session ids differ"):
        compare.bootstrap_diff(BASE, LATER, 50, base_clusters=OWNER,
                               other_clusters=np.minimum(OWNER, 6), paired=True)


def _trace(path: Path, sessions: int, rounds: int) -> str:
    lines = ["session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
             "tool_wait_after_ms"]
    for s in range(sessions):
        prefix = 0
        for r in range(rounds):
            inp = 30 + 7 * s
            lines.append(f"s{s},{100 * s},{r},{prefix},{inp},10,10")
            prefix += inp + 10
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _simulate(tmp: Path, trace: str, run_id: str, **engine: float) -> str:
    cfg = wb.RunConfig.from_dict({"trace": {"path": trace},
                                  "target": {"url": "sim", "engine": engine},
                                  "out_dir": str(tmp), "run_id": run_id})
    return str(simulate(cfg).run_dir)


def test_two_sessions_of_200_requests_are_too_few_sessions(tmp_path: Path) -> None:
    two = _trace(tmp_path / "two.csv", 2, 200)
    three = _trace(tmp_path / "three.csv", 3, 200)
    base = _simulate(tmp_path, two, "base")
    slow = _simulate(tmp_path, two, "slow", request_overhead_ms=50.0)
    other = _simulate(tmp_path, three, "other")
    runs = compare.load_runs([base, slow, other], ["base", "slow", "other"])
    changes = compare.change_table(runs, n_boot=300)
    assert (changes["n baseline"] == 400).all()  # requests enough for any p90 (29) ...
    assert changes["significant"].isna().all()  # ... but 2 sessions decide nothing
    mine = changes[changes["run"] == "slow"]
    assert set(mine["design"]) == {"paired"}  # the same trace, the same sessions
    assert set(mine["resampled"]) == {"sessions (2 and 2)"}
    ttft = mine[mine["metric"] == "TTFT (ms)"]
    assert list(ttft["verdict"]) == ["too few sessions (2 and 2; a p50 needs 5 in each)",
                                     "too few sessions (2 and 2; a p90 needs 29 in each)"]
    assert (ttft["change"] > 0).all()  # 50 ms later, which 2 sessions cannot show
    theirs = changes[changes["run"] == "other"]
    assert set(theirs["design"]) == {"independent: other traces"}  # nothing to pair
    assert "too few sessions (2 and 3; a p50 needs 5 in each)" in set(theirs["verdict"])
    lines = compare.compare_headline(runs, changes).lines
    slow_line = next(line for line in lines if line.startswith("  slow vs base"))
    assert slow_line.startswith("  slow vs base (intervals by session, paired): TTFT p50 +")
    assert "too few sessions (2 and 2; a p50 needs 5 in each)" in slow_line
    assert " significant" not in slow_line
    other_line = next(line for line in lines if line.startswith("  other vs base"))
    assert other_line.startswith("  other vs base (intervals by session): TTFT p50 ")


def test_runs_of_one_trace_that_do_not_share_every_session_are_not_paired(
        tmp_path: Path) -> None:
    three = _trace(tmp_path / "three.csv", 3, 12)
    whole = _simulate(tmp_path, three, "whole")
    cfg = wb.RunConfig.from_dict({"trace": {"path": three, "max_items": 2},
                                  "target": {"url": "sim"}, "out_dir": str(tmp_path),
                                  "run_id": "part"})
    part = str(simulate(cfg).run_dir)
    changes = compare.change_table(compare.load_runs([whole, part], ["whole", "part"]),
                                   n_boot=100)
    assert set(changes["design"]) == {"independent: other sessions (3 and 2, 2 shared)"}
