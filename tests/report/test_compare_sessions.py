"""Compare's bootstrap resamples sessions, not requests, when a session has several
requests (docs/metrics.md, "Compare"): the rounds of one agent session are correlated, and
a per-request bootstrap counts each of them as fresh evidence."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.report import compare

SESSIONS, ROUNDS = 8, 25
LEVELS = np.array([300.0, 500, 700, 900, 1100, 1300, 1500, 1700])  # each session's own speed
WITHIN = np.linspace(-100.0, 100.0, ROUNDS)  # its rounds, spread about it


def _run(shift: float) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT values, session of each): 8 sessions of 25 rounds, every value ``shift`` later."""
    values = (LEVELS[:, None] + shift + WITHIN[None, :]).ravel()
    return values, np.repeat(np.arange(SESSIONS), ROUNDS)


def _decided(base: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray],
             q: float, *, by_session: bool) -> bool:
    change, lo, hi = compare.bootstrap_diff(
        base[0], other[0], q, n_boot=2000, seed=0,
        base_clusters=base[1] if by_session else None,
        other_clusters=other[1] if by_session else None)
    assert lo <= change <= hi
    return lo > 0 or hi < 0


def test_a_shift_smaller_than_the_spread_between_sessions_is_not_significant() -> None:
    # 150 ms later, where the 8 sessions' own speeds span 1400 ms: 8 sessions cannot
    # show it, though their 200 requests, counted as independent, do
    base, later = _run(0.0), _run(150.0)
    assert _decided(base, later, 90, by_session=False)
    assert not _decided(base, later, 90, by_session=True)


def test_a_shift_wider_than_that_spread_is_significant_either_way() -> None:
    base, later = _run(0.0), _run(1000.0)
    for q in (50, 90):
        assert _decided(base, later, q, by_session=False)
        assert _decided(base, later, q, by_session=True)


def test_sessions_of_one_request_are_the_plain_bootstrap() -> None:
    # each value its own session: the per-request bootstrap, draw for draw
    values = np.linspace(100.0, 900.0, 40)
    plain = compare.bootstrap_ci(values, 90, n_boot=500, seed=3)
    frame = pd.DataFrame({"ttft_ms": values, "session_id": [f"s{i}" for i in range(40)]})
    sessions = compare.clusters_of(frame, "ttft_ms")
    assert not sessions.grouped and compare.resampled_unit(sessions) == "requests"
    assert sessions.clusters is None and sessions.units == 40
    assert compare.bootstrap_ci(values, 90, n_boot=500, seed=3,
                                clusters=frame["session_id"]) == plain


def test_sessions_are_read_from_the_frame_and_named() -> None:
    values, sessions = _run(0.0)
    frame = pd.DataFrame({"ttft_ms": np.append(values, np.nan),
                          "session_id": [f"s{s}" for s in sessions] + ["s0"]})
    found = compare.clusters_of(frame, "ttft_ms")
    vals, codes = found.values, found.clusters
    assert vals.size == SESSIONS * ROUNDS and codes is not None  # the NaN left out
    assert compare.resampled_unit(found) == "8 sessions" and found.units == SESSIONS
    lo, hi = compare.bootstrap_ci(vals, 50, seed=0, clusters=codes)
    plo, phi = compare.bootstrap_ci(vals, 50, seed=0)
    assert lo < plo and hi > phi  # wider: 8 sessions are less evidence than 200 requests
    with pytest.raises(ValueError, match="3 cluster labels for 200 values"):
        compare.bootstrap_ci(vals, 50, clusters=[0, 1, 2])
    assert all(math.isfinite(x) for x in (lo, hi))


def test_a_resample_of_sessions_is_the_percentile_of_their_values_repeated() -> None:
    """``_weighted_percentile`` reads the percentile off ranks, without building the
    repeats: the same numbers as numpy's over the repeated values, any sizes."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(2, 60))
        arr = rng.gamma(2.0, 100.0, n)
        _, owner = np.unique(rng.integers(0, int(rng.integers(1, n + 1)), n),
                             return_inverse=True)
        groups = int(owner.max()) + 1
        picks = rng.integers(0, groups, size=(5, groups))
        order = np.argsort(arr, kind="stable")
        for q in (0.5, 50, 90, 99):
            got = compare._weighted_percentile(arr[order], owner[order], picks, q)
            want = [np.percentile(np.repeat(arr, np.bincount(p, minlength=groups)[owner]), q)
                    for p in picks]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
