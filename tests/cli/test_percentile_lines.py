"""``--percentiles``' lines under the headline give the count beside a percentile it
cannot resolve (docs/metrics.md, "Headline"), as the headline does."""

from __future__ import annotations

from workbench.commands.replay import percentile_lines
from workbench.records import RequestRecord, RunResult


def _rec(i: int, ttft_ms: float) -> RequestRecord:
    ns = 1_000_000
    return RequestRecord(run_id="r", request_id=f"r{i}", unit_ordinal=i, session_id=f"s{i}",
                         round_idx=0, backend="openai", policy=None, planned_prefix_tokens=0,
                         planned_input_tokens=8, planned_output_tokens=2, dispatch_ns=0,
                         first_token_ns=int(ttft_ms * ns), end_ns=int((ttft_ms + 10) * ns),
                         token_times_ns=[int(ttft_ms * ns), int((ttft_ms + 10) * ns)],
                         token_counts=[1, 1], status="ok")


def test_five_values_name_the_percentiles_they_cannot_resolve() -> None:
    result = RunResult("r", [_rec(i, 10.0 * (i + 1)) for i in range(5)])
    lines = percentile_lines(result, "50,90,99")
    assert lines[0] == ("TTFT (ms): p50 30, p90 46, p99 49.6 (of 5 values; p90 needs "
                        "10, p99 100 to be other than the largest)")
    assert [line.split(":")[0] for line in lines] == [  # every metric as the tables name it
        "TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)"]


def test_enough_values_carry_no_note() -> None:
    result = RunResult("r", [_rec(i, float(i + 1)) for i in range(12)])
    assert percentile_lines(result, "50,90")[0] == "TTFT (ms): p50 6.5, p90 10.9"
