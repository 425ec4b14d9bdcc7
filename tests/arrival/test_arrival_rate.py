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
    from workbench.errors import ConfigError
    from workbench.records import MAX_ARRIVAL_MS as MAX_SPAN_MS

    span_ms = MAX_SPAN_MS + over_ms
    with pytest.raises(ConfigError) as err:
        rescale_to_rate([0.0, 1000.0], 1000.0 / span_ms)  # measured 1/s: span × 1000/1
    said, decimals = _span_said(str(err.value))
    assert said > MAX_SPAN_MS / 86_400_000
    assert abs(said - span_ms / 86_400_000) <= 0.5 * 10**-decimals  # the span, rounded
    assert f"the {MAX_SPAN_MS / 86_400_000:g}-day bound" in str(err.value)


def test_a_span_at_the_bound_is_allowed() -> None:
    from workbench.records import MAX_ARRIVAL_MS as MAX_SPAN_MS

    out = rescale_to_rate([0.0, 1000.0], 1000.0 / MAX_SPAN_MS)
    assert out[1] == pytest.approx(MAX_SPAN_MS)


def test_the_span_bound_is_the_trace_arrival_bound_and_its_doc_states_it() -> None:
    """One 366-day bound: a rescaled span is held to a trace's own arrival-offset bound
    (``traces.bounds.MAX_ARRIVAL_MS``, defined once in ``records``), and the refusal names
    the doc whose ``arrival.rate`` row states it (it named docs/config-bounds.md while the
    code's comment pointed to docs/trace-bounds.md, from a second copy of the constant)."""
    import re
    from pathlib import Path

    from workbench.arrival import rate
    from workbench.errors import ConfigError
    from workbench.records import MAX_ARRIVAL_MS
    from workbench.traces import bounds

    assert bounds.MAX_ARRIVAL_MS is MAX_ARRIVAL_MS
    assert not hasattr(rate, "MAX_SPAN_MS")  # no second copy
    with pytest.raises(ConfigError) as err:
        rescale_to_rate([0.0, 1000.0], 1000.0 / (2 * MAX_ARRIVAL_MS))
    docs = re.findall(r"docs/[\w-]+\.md", str(err.value))
    assert docs == ["docs/config-bounds.md"], str(err.value)
    root = Path(__file__).resolve().parents[2]
    row = next(line for line in (root / docs[0]).read_text().splitlines()
               if line.startswith("| `arrival.rate` |"))
    assert f"{MAX_ARRIVAL_MS / 86_400_000:g} days" in row, row
    source = Path(rate.__file__).read_text()
    assert set(re.findall(r"docs/[\w-]+\.md", source)) == {"docs/config-bounds.md"}
