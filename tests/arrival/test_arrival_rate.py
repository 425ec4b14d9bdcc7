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


def _span_said(message: str) -> tuple[float, int]:
    """The span in days a refusal states (``would span 366.02 days``), and its decimals."""
    import re

    m = re.search(r"would span ([\d,]+)(\.\d+)? days", message)
    assert m, message
    decimals = m.group(2) or ""
    return float(m.group(1).replace(",", "") + decimals), max(len(decimals) - 1, 0)


@pytest.mark.parametrize("over_ms", [1.0, 3_600_000.0, 43_000_000.0, 5e9])
def test_a_span_past_the_bound_is_said_past_it(over_ms: float) -> None:
    """A rescaled span just past the 366-day bound is worded past it, not rounded onto it
    ("would span 366 days, past the 366-day bound") nor under it; the bound in the message
    is the one enforced."""
    from workbench.arrival.rate import MAX_SPAN_MS
    from workbench.errors import ConfigError

    span_ms = MAX_SPAN_MS + over_ms
    with pytest.raises(ConfigError) as err:
        rescale_to_rate([0.0, 1000.0], 1000.0 / span_ms)  # measured 1/s: span × 1000/1
    said, decimals = _span_said(str(err.value))
    assert said > MAX_SPAN_MS / 86_400_000
    assert abs(said - span_ms / 86_400_000) <= 0.5 * 10**-decimals  # the span, rounded
    assert f"the {MAX_SPAN_MS / 86_400_000:g}-day bound" in str(err.value)


def test_a_span_at_the_bound_is_allowed() -> None:
    from workbench.arrival.rate import MAX_SPAN_MS

    out = rescale_to_rate([0.0, 1000.0], 1000.0 / MAX_SPAN_MS)
    assert out[1] == pytest.approx(MAX_SPAN_MS)
