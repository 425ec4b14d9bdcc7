"""A ramp over a duration against its definition (docs/arrival.md, "A ramp over a duration").

The rate is a function of time: ``r(t) = r0 + (r1 - r0)·t/S`` (linear) or
``r0·(r1/r0)^(t/S)`` (exponential) for ``t < S``, then ``r1``. The units after unit 0
form a nonhomogeneous process of intensity ``r(t)``: Poisson counts in disjoint time
bins are independent with mean ``∫ r`` over the bin (and variance the same), so the
tolerances below come from that variance; ``constant`` puts unit ``i`` where ``∫₀ᵗ r``
reaches ``i``. The tests integrate ``r(t)`` themselves (trapezoids on a fine grid), never
through the code's own ``cumulative``, so a wrong closed form fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.arrival.processes import ArrivalProcess
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.replay.plan import build_plan
from workbench.traces.load import load_trace


def rate_def(strategy: str, r0: float, r1: float, span: float, t: np.ndarray) -> np.ndarray:
    """``r(t)`` as the docs state it."""
    x = np.minimum(t / span, 1.0)
    return r0 + (r1 - r0) * x if strategy == "linear" else r0 * (r1 / r0) ** x


def integral_def(strategy: str, r0: float, r1: float, span: float,
                 t_end: float, points: int = 2_000_001) -> tuple[np.ndarray, np.ndarray]:
    """``(t, ∫₀ᵗ r)`` on a grid: the trapezoid rule, exact for the linear ramp, and to
    ~1e-10 relative for the exponential one at this step."""
    grid = np.linspace(0.0, t_end, points)
    r = rate_def(strategy, r0, r1, span, grid)
    steps = np.diff(grid) * (r[1:] + r[:-1]) / 2
    return grid, np.concatenate(([0.0], np.cumsum(steps)))


def ramp(kind: str, strategy: str, r0: float, r1: float, span: float,
         burstiness: float = 1.0) -> ArrivalProcess:
    return ArrivalProcess(kind, None, burstiness, strategy, r0, r1, span).check()


def starts_s(process: ArrivalProcess, n: int, seed: int = 11) -> np.ndarray:
    offsets = np.asarray(process.offsets_ms(n, seed)) / 1000.0
    assert offsets[0] == 0.0 and (np.diff(offsets) >= 0).all()
    return offsets


@pytest.mark.parametrize(("strategy", "r0", "r1"), [("linear", 5.0, 50.0),
                                                    ("linear", 0.0, 40.0),
                                                    ("exponential", 2.0, 64.0)])
def test_poisson_counts_in_time_bins_follow_the_integrated_rate(strategy, r0, r1) -> None:
    span = 200.0
    grid, cum = integral_def(strategy, r0, r1, span, 300.0)
    n = int(np.interp(300.0, grid, cum)) + 1  # the process runs past the ramp
    t = starts_s(ramp("poisson", strategy, r0, r1, span), n)[1:]
    # bins of 10 s up to 250 s, where Λ is ≥ 8 sd below the n - 1 drawn: every event
    # of the process before 250 s is among the drawn ones
    edges = np.arange(0.0, 251.0, 10.0)
    assert np.interp(250.0, grid, cum) + 8 * math.sqrt(n) < n - 1
    counts = np.histogram(t, bins=edges)[0]
    expected = np.diff(np.interp(edges, grid, cum))
    # each bin: Poisson(m), sd √m; 25 bins at 4.5 sd fail by chance with p < 2e-4
    assert (np.abs(counts - expected) <= 4.5 * np.sqrt(expected)).all(), (counts, expected)
    # all bins at once: Σ (c - m)²/m ~ χ²(25): mean 25, sd √50; 6 sd above the mean
    assert ((counts - expected) ** 2 / expected).sum() < 25 + 6 * math.sqrt(50)
    # the shape: the rate rises over the ramp, then holds (the bins after 200 s alike)
    assert counts[19] > 4 * counts[0]
    assert abs(counts[20:].mean() - 10 * r1) <= 4.5 * math.sqrt(10 * r1 / 5)


def test_the_ramp_is_not_over_the_units() -> None:
    """The same rates over the units (vLLM's index form) give another timeline: the
    duration form is a different definition, not a relabelling."""
    by_time = starts_s(ramp("constant", "linear", 1.0, 10.0, 20.0), 200)
    by_index = starts_s(ArrivalProcess("constant", None, 1.0, "linear", 1.0, 10.0).check(), 200)
    assert abs(by_time[-1] - by_index[-1]) > 1.0


@pytest.mark.parametrize(("strategy", "r0", "r1"), [("linear", 1.0, 10.0),
                                                    ("linear", 0.0, 10.0),
                                                    ("exponential", 1.0, 32.0),
                                                    ("exponential", 2.0, 16.0)])
def test_constant_units_sit_where_the_integrated_rate_reaches_each_count(strategy, r0,
                                                                          r1) -> None:
    span = 20.0
    t = starts_s(ramp("constant", strategy, r0, r1, span), 400)
    grid, cum = integral_def(strategy, r0, r1, span, float(t[-1]) + 1.0)
    # ∫₀^{t_i} r = i: the gap before each unit holds exactly one unit of the rate
    assert np.interp(t, grid, cum) == pytest.approx(np.arange(400.0), abs=1e-6)
    # after the ramp the rate is r1: the gaps are exactly 1/r1
    flat = np.diff(t[t >= span])
    assert flat.size > 100 and flat == pytest.approx(np.full(flat.size, 1 / r1), rel=1e-9)


def test_exponential_ramp_rate_doubles_every_fifth_of_the_span() -> None:
    # r(t) = 1·32^(t/50): doubles every 10 s. A constant gap g_i ≈ 1/r at its midpoint,
    # to second order in the rate's change over the gap
    span = 50.0
    t = starts_s(ramp("constant", "exponential", 1.0, 32.0, span), 600)
    gaps = np.diff(t)
    mid = (t[1:] + t[:-1]) / 2
    ramp_part = mid < span
    assert (1 / gaps[ramp_part]) == pytest.approx(2.0 ** (mid[ramp_part] / 10.0), rel=0.01)
    # and the number of units by 10, 20, ... s is (2^(t/10) - 1)·10/ln 2
    for k in (1, 2, 3, 4, 5):
        due = (2.0 ** k - 1) * 10 / math.log(2)
        assert (t[1:] <= 10.0 * k).sum() == math.floor(due + 1e-9)


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
@pytest.mark.parametrize(("kind", "burstiness"), [("poisson", 1.0), ("gamma", 0.4),
                                                  ("constant", 1.0)])
def test_equal_rates_are_the_plain_process_draw_for_draw(strategy, kind, burstiness) -> None:
    plain = ArrivalProcess(kind, 3.0, burstiness).check().offsets_ms(500, 9)
    flat = ramp(kind, strategy, 3.0, 3.0, 60.0, burstiness).offsets_ms(500, 9)
    assert flat == pytest.approx(plain, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_shapes_the_rescaled_gaps(burstiness) -> None:
    # time rescaling: the gaps in Λ-time are Gamma(b, 1/b): mean 1, CV 1/√b (20,000 of
    # them: se of the mean ≤ 1.4 %, of the CV ≤ 1.8 %, each checked at ~4-5 se)
    strategy, r0, r1, span = "linear", 2.0, 30.0, 400.0
    t = starts_s(ramp("gamma", strategy, r0, r1, span, burstiness), 20_001)
    grid, cum = integral_def(strategy, r0, r1, span, float(t[-1]) + 1.0)
    g = np.diff(np.interp(t, grid, cum))
    assert g.mean() == pytest.approx(1.0, rel=0.06)
    assert g.std(ddof=1) / g.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


def test_same_seed_same_timeline() -> None:
    p = ramp("poisson", "exponential", 1.0, 8.0, 30.0)
    assert p.offsets_ms(100, 4) == p.offsets_ms(100, 4) != p.offsets_ms(100, 5)


@pytest.mark.parametrize(("arrival", "rule"), [
    ({"mode": "poisson", "rate": 2, "ramp_up_duration_s": 10},
     r"ramp_up_duration_s need arrival\.ramp_up_strategy"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 4, "ramp_up_duration_s": 0},
     r"arrival\.ramp_up_duration_s: expected a finite number in \(0, 604800\]"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 4, "ramp_up_duration_s": -5}, r"arrival\.ramp_up_duration_s"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 4, "ramp_up_duration_s": 1e9}, r"arrival\.ramp_up_duration_s"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 4, "ramp_up_duration_s": "10"}, r"arrival\.ramp_up_duration_s"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 2e6, "ramp_up_duration_s": 10},
     r"arrival\.ramp_up_end_rps: expected a finite number in \[1e-06, 1000000\]"),
    ({"mode": "poisson", "ramp_up_strategy": "exponential", "ramp_up_start_rps": 0,
      "ramp_up_end_rps": 4, "ramp_up_duration_s": 10}, "cannot start at 0"),
    ({"mode": "saturated", "ramp_up_duration_s": 10}, "shape an arrival process"),
])
def test_bad_duration_settings_are_config_errors_naming_the_field(arrival, rule) -> None:
    with pytest.raises(ConfigError, match=rule):
        RunConfig.from_dict({"trace": "t.csv", "arrival": arrival})


def test_the_process_checks_its_ranges_under_its_own_name() -> None:
    # the same range table (workbench/ranges.py) wherever the process is built
    with pytest.raises(ConfigError, match=r"^synthetic\.ramp_up_duration_s: expected"):
        ArrivalProcess("poisson", None, 1.0, "linear", 1.0, 2.0, math.inf).check("synthetic")


def test_the_plan_takes_the_ramp_from_the_config_and_the_cli() -> None:
    from workbench.cli import build_parser
    from workbench.commands._axes import config_from_args

    workload = load_trace(data_path("tracelab/multi_session_large.csv"))
    args = build_parser().parse_args([
        "simulate", "--trace", "t.csv", "--arrival", "constant", "--seed", "2",
        "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4",
        "--ramp-up-duration", "6"])
    cfg = config_from_args(args)
    assert cfg.arrival.ramp_up_duration_s == 6.0
    offsets = [u.offset_ms for u in build_plan(cfg, workload).units]
    expected = ramp("constant", "linear", 1.0, 4.0, 6.0).offsets_ms(len(workload.units), 2)
    assert offsets == pytest.approx(expected)
    # unit 1 where r0·t + (r1 - r0)·t²/(2S) = 1: t = 2/(1 + √(1 + 2·3/6)) = 2/(1 + √2)
    assert offsets[1] == pytest.approx(1000 * 2 / (1 + math.sqrt(2)), rel=1e-12)
