"""Arrival processes against their definition (docs/arrival.md, "Arrival processes").

vLLM's ``--burstiness`` gaps are ``Gamma(shape=b, scale=1/(λ·b))``: mean ``1/λ``,
coefficient of variation ``1/√b``; ``--ramp-up-strategy`` moves ``λ`` over the
requests. Statistical checks use fixed seeds and n = 20,000 gaps; each tolerance is
about four standard errors of the estimate (stated per test), so a correct sampler
passes for any seed and a wrong parameter (scale b·λ instead of 1/(λ·b), a CV of b)
fails by far more.
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.arrival.processes import ArrivalProcess
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.replay.plan import build_plan
from workbench.traces.load import load_trace

N = 20_001


def gaps(process: ArrivalProcess, seed: int = 7, n: int = N) -> np.ndarray:
    offsets = np.asarray(process.check().offsets_ms(n, seed)) / 1000.0
    assert offsets[0] == 0.0 and (np.diff(offsets) >= 0).all()
    return np.diff(offsets)


def cv(x: np.ndarray) -> float:
    return float(x.std(ddof=1) / x.mean())


@pytest.mark.parametrize("rate", [0.5, 4.0, 200.0])
def test_poisson_gaps_are_exponential_at_the_rate(rate: float) -> None:
    g = gaps(ArrivalProcess("poisson", rate))
    # mean: se = (1/λ)/√n = 0.7 % → 3 %; CV of an exponential is 1, se ≈ 1/√n·√2 → 4 %
    assert g.mean() == pytest.approx(1 / rate, rel=0.03)
    assert cv(g) == pytest.approx(1.0, rel=0.04)
    # memorylessness in one number: P(gap > mean) = e^-1
    assert (g > 1 / rate).mean() == pytest.approx(np.exp(-1), abs=0.015)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 8.0])
def test_gamma_burstiness_sets_the_cv_not_the_mean(burstiness: float) -> None:
    rate = 3.0
    g = gaps(ArrivalProcess("gamma", rate, burstiness))
    # mean 1/λ whatever b (se = CV/√n ≤ 1.4 % at b = 0.25 → 6 %)
    assert g.mean() == pytest.approx(1 / rate, rel=0.06)
    # CV 1/√b; se of a sample sd with excess kurtosis 6/b is √((2 + 6/b)/n)/2 ≤ 1.8 % → 8 %
    assert cv(g) == pytest.approx(1 / np.sqrt(burstiness), rel=0.08)


def test_gamma_of_burstiness_one_is_poisson_draw_for_draw() -> None:
    assert gaps(ArrivalProcess("gamma", 2.0, 1.0), n=100) == pytest.approx(
        gaps(ArrivalProcess("poisson", 2.0), n=100))


def test_constant_gaps_are_exactly_one_over_rate() -> None:
    g = gaps(ArrivalProcess("constant", 8.0), n=101)
    assert g == pytest.approx(np.full(100, 0.125), abs=1e-12)


def test_same_seed_same_timeline_other_seed_another() -> None:
    p = ArrivalProcess("gamma", 2.0, 0.5)
    assert p.offsets_ms(50, 3) == p.offsets_ms(50, 3)
    assert p.offsets_ms(50, 3) != p.offsets_ms(50, 4)


def test_linear_ramp_rate_of_each_unit() -> None:
    # constant gaps show λ_i exactly: the gap before unit i is 1/λ_i, λ_i = 1 + 10·i/(n-1)
    p = ArrivalProcess("constant", None, ramp_up_strategy="linear", ramp_up_start_rps=1,
                       ramp_up_end_rps=11)
    g = gaps(p, n=11)
    assert 1 / g == pytest.approx(np.arange(2, 12, dtype=float), rel=1e-12)


def test_exponential_ramp_rate_is_geometric() -> None:
    p = ArrivalProcess("constant", None, ramp_up_strategy="exponential", ramp_up_start_rps=1,
                       ramp_up_end_rps=1024)
    g = gaps(p, n=11)
    assert 1 / g == pytest.approx(2.0 ** np.arange(1, 11), rel=1e-12)


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_poisson_ramp_follows_the_rate_in_windows(strategy: str) -> None:
    p = ArrivalProcess("poisson", None, ramp_up_strategy=strategy, ramp_up_start_rps=2,
                       ramp_up_end_rps=32)
    g = gaps(p)
    rates = p.rates(N)[1:]
    # 10 windows of 2,000 gaps: the mean gap is the mean of 1/λ_i (se ≈ 2.2 % → 9 %)
    for window_g, window_r in zip(np.array_split(g, 10), np.array_split(rates, 10),
                                  strict=True):
        assert window_g.mean() == pytest.approx((1 / window_r).mean(), rel=0.09)
    # the shape: the first window is ~16x slower than the last
    assert g[:2000].mean() / g[-2000:].mean() == pytest.approx(
        (1 / rates[:2000]).mean() / (1 / rates[-2000:]).mean(), rel=0.15)


@pytest.mark.parametrize(("arrival", "rule"), [
    ({"mode": "poisson", "rate": 2, "burstiness": 0.5}, "use mode 'gamma'"),
    ({"mode": "gamma"}, "give arrival.rate"),
    ({"mode": "poisson", "rate": 2, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 2}, "drop rate"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1},
     "needs both"),
    ({"mode": "poisson", "ramp_up_strategy": "exponential", "ramp_up_start_rps": 0,
      "ramp_up_end_rps": 4}, "cannot start at 0"),
    ({"mode": "poisson", "ramp_up_strategy": "linear", "ramp_up_start_rps": 5,
      "ramp_up_end_rps": 4}, "ramp_up_start_rps must be in"),
    ({"mode": "poisson", "ramp_up_strategy": "sine", "ramp_up_start_rps": 1,
      "ramp_up_end_rps": 4}, "'linear' or 'exponential'"),
    ({"mode": "saturated", "burstiness": 0.5}, "shape an arrival process"),
    ({"mode": "trace-timed", "ramp_up_end_rps": 3}, "shape an arrival process"),
])
def test_bad_process_settings_are_config_errors(arrival: dict, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        RunConfig.from_dict({"trace": "t.csv", "arrival": arrival})


def test_process_replaces_a_traces_timeline_only_when_asked() -> None:
    workload = load_trace(data_path("tracelab/multi_session_large.csv"))
    own = [u.arrival_ms - workload.units[0].arrival_ms for u in workload.units]
    kept = build_plan(RunConfig.from_dict({"trace": "t"}), workload)
    assert [u.offset_ms for u in kept.units] == pytest.approx(own)
    cfg = RunConfig.from_dict({"trace": "t", "seed": 5,
                               "arrival": {"mode": "constant", "rate": 4}})
    drawn = build_plan(cfg, workload)
    assert [u.offset_ms for u in drawn.units] == pytest.approx(
        [250.0 * k for k in range(len(workload.units))])
    gamma = RunConfig.from_dict({"trace": "t", "seed": 5,
                                 "arrival": {"mode": "gamma", "rate": 4, "burstiness": 0.3}})
    offsets = [u.offset_ms for u in build_plan(gamma, workload).units]
    assert offsets == ArrivalProcess("gamma", 4, 0.3).offsets_ms(len(workload.units), 5)
