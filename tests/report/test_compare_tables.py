"""The compare report's latency tables read as the run report does (docs/metrics.md,
"Compare"): each metric by its catalog label and unit (``TTFT (ms)``, not ``ttft_ms``),
and a percentile over fewer values than resolve it flagged as the run headline flags it
(``p99 of 10 requests``: read off the largest ones)."""

from __future__ import annotations

import numpy as np
import pytest
from test_plots import make_run, rec

from workbench.metrics.frame import ok_rows
from workbench.records import RunResult
from workbench.report import compare, tables

LABELS = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "e2e_ms": "E2E (ms)"}


def sized(run_id: str, n: int) -> RunResult:
    """``n`` single-request sessions, TTFT 10 + i ms, one-token events 2 ms apart."""
    base = make_run(run_id)
    records = [rec(i, 0, i * 5.0, 10.0 + i, run_id=run_id) for i in range(n)]
    return RunResult(run_id, records, manifest=base.manifest)


def test_the_percentile_table_names_metrics_by_label_and_flags_thin_percentiles() -> None:
    runs = {"five": make_run("five"), "ten": sized("ten", 10), "many": sized("many", 120)}
    df = compare.percentile_table(runs, n_boot=50)
    assert list(dict.fromkeys(df["metric"])) == [LABELS[m] for m in compare.CI_METRICS]
    assert not any("_ms" in str(v) for v in df["metric"])
    for key, label in LABELS.items():
        for name, run in runs.items():
            (at,) = np.flatnonzero((df["metric"] == label) & (df["run"] == name))
            got = df.iloc[at]
            values = ok_rows(run)[key].dropna().to_numpy(dtype=float)
            assert got["n"] == values.size
            assert got["p50"] == pytest.approx(float(np.percentile(values, 50)))
            assert got["max"] == pytest.approx(float(values.max()))
            want = {5: "p90, p99 of 5 requests", 10: "p99 of 10 requests", 120: ""}[values.size]
            assert got["thin"] == want, (name, key, got["thin"])
    caption = compare.latency_caption(runs)
    assert "thin" in caption and "read off the largest" in caption


def test_the_change_table_names_metrics_by_label() -> None:
    runs = {"a": sized("a", 12), "b": sized("b", 12)}
    changes = compare.change_table(runs, n_boot=50)
    assert set(changes["metric"]) == {LABELS[m] for m in compare.CI_METRICS}
    ttft = changes[(changes["metric"] == "TTFT (ms)") & (changes["stat"] == "p50")].iloc[0]
    values = ok_rows(runs["a"])["ttft_ms"].dropna().to_numpy(dtype=float)
    assert ttft["baseline"] == pytest.approx(float(np.percentile(values, 50)))
    line = compare.change_line("b", changes)  # the headline's words stay the catalog's
    assert line.startswith("identical runs: every TTFT and TPOT value"), line


def test_the_change_line_selects_by_the_metric_key_not_by_parsing_a_label() -> None:
    """Each row keeps its metric's name as the index (``KEY_INDEX``), hidden from the
    reader, kept in the export; the headline's line reads it, so relabelling the shown
    column (``TTFT (ms)`` → anything) changes nothing it says."""
    runs = {"a": sized("a", 12), "b": sized("b", 40)}
    changes = compare.change_table(runs, n_boot=50)
    assert changes.index.name == tables.KEY_INDEX
    assert list(dict.fromkeys(changes.index)) == list(compare.CI_METRICS)
    assert [LABELS[k] for k in changes.index] == list(changes["metric"])
    line = compare.change_line("b", changes)
    relabelled = changes.assign(metric="another label")
    assert compare.change_line("b", relabelled) == line
    assert line.startswith("TTFT p50 "), line
    shown = tables.show(changes)
    assert "ttft_ms" not in shown.html() and "TTFT (ms)" in shown.html()
    assert shown.payload()["index"][0] == "ttft_ms"  # the export keeps the key
