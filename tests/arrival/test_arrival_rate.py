"""Golden vector of docs/arrival.md (rate rescaling)."""

import pytest

from workbench.arrival.rate import measured_rate, rescale_to_rate


def test_rescale_golden():
    assert rescale_to_rate([100, 100, 300, 900], 10) == pytest.approx([37.5, 37.5, 112.5, 337.5])


def test_measured_rate_after_rescale_is_target():
    out = rescale_to_rate([0, 250, 1000, 4000, 4100], 2.5)
    assert measured_rate(out) == pytest.approx(2.5)


def test_degenerate_traces_unchanged():
    assert rescale_to_rate([0, 0, 0], 5) == [0.0, 0.0, 0.0]
    assert rescale_to_rate([7], 5) == [7.0]
    with pytest.raises(ValueError):
        rescale_to_rate([0, 1], 0)
