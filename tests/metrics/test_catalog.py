"""The metric catalog: one row per per-request metric, and everything reads it.

docs/metrics.md's table is the catalog; every list of metrics the package keeps
(frame columns, Parquet columns, summary blocks, SLO-able metrics, report and sweep
columns, labels) is the catalog's own tuple, so a new row reaches all of them; and
one SLO grammar and one percentile serve runs and sweeps.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench.catalogs.requests as catalog
import workbench.catalogs.runs as runs
import workbench.catalogs.series as series
from workbench.backends import scrape
from workbench.catalogs.requests import CATALOG, Metric
from workbench.commands import replay as replay_cmd
from workbench.errors import ConfigError
from workbench.metrics import breakdown, derive, distribution, frame, server_side, slo, summary
from workbench.records import RequestRecord, RunResult, Status
from workbench.report import compare, headline, plots, sweep_tables, tables
from workbench.sim.config import EngineConfig
from workbench.sim.metrics import exposition, make_registry
from workbench.sweeps import points

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_docs_metric_table_is_the_catalog() -> None:
    text = (DOCS / "metrics.md").read_text()
    m = re.search(r"<!-- catalog:[^\n]*-->\n(.*?)<!-- /catalog -->", text, re.S)
    assert m, "docs/metrics.md lost its catalog table markers"
    assert m.group(1) == catalog.markdown_table(), (
        "docs/metrics.md's table differs from workbench.catalogs.requests: put the output of "
        "python -c 'from workbench.catalogs.requests import markdown_table as t; print(t(), "
        "end=\"\")' between the markers")


def test_docs_series_table_is_the_series_catalog() -> None:
    text = (DOCS / "measurement-rules.md").read_text()
    m = re.search(r"<!-- series:[^\n]*-->\n(.*?)\n\n", text, re.S)
    assert m, "docs/measurement-rules.md lost its series table marker"
    assert m.group(1) == series.markdown_table()


def test_every_reader_of_server_series_reads_the_series_catalog() -> None:
    """The scraper keeps, the summary, the report and a sweep read, and the embedded engine
    exports, exactly the catalog's names: one engine row more reaches all of them."""
    assert series.SCRAPED <= scrape.SERIES and {
        scrape.CACHE_CONFIG} == scrape.SERIES - series.SCRAPED
    assert all(tables.GAUGES[r] == series.names(r) for r in ("waiting", "running", "kv_usage"))
    timeline = [{"t_ns": 0}, {"t_ns": 1}]
    for engine in series.ENGINES:
        pre = engine.name("preemptions")
        if pre is None:
            continue
        timeline = [{pre: 2.0, "t_ns": 0}, {pre: 7.0, "t_ns": 1}]
        assert server_side.server_evidence(timeline)["engine"] == engine.engine
        assert server_side.server_evidence(timeline)["preemptions"] == 5
        assert server_side.preemptions(timeline) == 5  # a sweep point's reader
    for mode, engine in (("vllm", series.VLLM), ("sglang", series.SGLANG)):
        stats = {s.stat: 1 for s in engine.series if s.stat}
        stats.update(prefix_cache_queries_tokens=1, requests=1)
        text = exposition(make_registry(EngineConfig(mode=mode), stats.copy)).decode()
        exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
                    if line and not line.startswith("#")}
        assert {s.name for s in engine.series if s.stat} <= exported, mode


def test_the_run_level_lists_are_the_run_catalogs() -> None:
    """The report's run, hit-rate and server tables and a sweep point's figures are the
    rows of ``catalogs.runs``: a figure added there reaches each of them."""
    assert runs.fields("run") == tables.RUN_FIELDS and runs.fields("hit") == tables.HIT_RATES
    assert runs.fields("server") == tables.SERVER_FIELDS and points.SCALARS is runs.SWEPT
    assert {"requests", "actual_prefix_hit_rate", "server_prefix_hit_rate"} <= set(runs.SWEPT)
    # a row for every figure of the server's evidence (metrics.server_side)
    assert {key for _, key in runs.fields("server")} == set(server_side.EMPTY)


def test_every_consumer_list_is_the_catalogs() -> None:
    assert frame.DERIVED_COLUMNS is catalog.FRAME_COLUMNS
    assert (derive.INT_COLUMNS, derive.FLOAT_COLUMNS) == (catalog.INT_COLUMNS,
                                                          catalog.FLOAT_COLUMNS)
    assert summary.LATENCY_METRICS is catalog.LATENCY and summary.AUDIT_METRICS is catalog.AUDIT
    assert summary.SLO_METRICS is catalog.SLO_ABLE
    assert tables.LATENCY_METRICS is catalog.LATENCY and points.LATENCY is catalog.LATENCY
    assert compare.CI_METRICS is catalog.SCALAR_LATENCY
    assert breakdown.BREAKDOWN_METRICS is catalog.SCALAR_LATENCY
    assert tuple(f"{m}_p90" for m in catalog.SCALAR_LATENCY) == tuple(
        k for k, _ in sweep_tables.POINT_SHOWN if k.endswith("_p90"))
    assert {m.name: m.title for m in CATALOG} == plots.LATENCY_NAMES
    assert {m.name: m.label for m in CATALOG} == headline.METRIC_NAMES
    assert points.STATS[1:] == summary.STAT_KEYS[1:4]  # the summary's percentiles


def _rec(i: int, ttft_ms: int, gaps_ms: list[int], status: Status = "ok") -> RequestRecord:
    ms = 1_000_000
    times = [ttft_ms * ms]
    for g in gaps_ms:
        times.append(times[-1] + g * ms)
    return RequestRecord("t", f"r{i}", i, f"s{i}", 0, "openai-chat", None, 0, 100, 4,
                         status=status, dispatch_ns=0, end_ns=times[-1] + ms,
                         token_times_ns=times, token_counts=[1] * len(times),
                         completion_tokens=len(times))


def test_the_catalog_lists_exactly_what_derive_computes() -> None:
    rec = _rec(0, 1, [1])
    d = frame._derived([rec])
    assert (set(d) - {"gaps"}) | {"itl_ms"} == set(catalog.names())  # gaps: itl_ms, pooled
    row = frame.to_frame([rec]).iloc[0]
    assert [c for c in row.index if c in catalog.names()] == list(catalog.FRAME_COLUMNS)


def test_a_new_row_joins_every_derived_list() -> None:
    toy = Metric("toy_ms", "ms", "Toy", summarised=True, latency=True, slo_able=True,
                 doc="a toy")
    extended = (*CATALOG, toy)
    for where in ({"in_frame": True}, {"kind": "float"}, {"summarised": True},
                  {"latency": True}, {"slo_able": True}):
        assert catalog.names(extended, **where)[-1] == "toy_ms", where
    assert "| `toy_ms` | ms | Toy | yes | yes | yes | a toy |" in catalog.markdown_table(extended)
    assert catalog.get("toy_ms", extended) == toy and catalog.get("toy_ms") is None


def test_slo_parsing_reads_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"toy_ms.*unknown"):
        slo.SLO.parse("toy_ms:p90<=5")
    monkeypatch.setattr(catalog, "SLO_ABLE", (*catalog.SLO_ABLE, "toy_ms"))
    parsed = slo.SLO.parse("toy_ms:p90<=5,toy_ms<=7")
    assert parsed is not None and [str(b) for b in parsed.bounds] == ["toy_ms:p90<=5",
                                                                       "toy_ms<=7"]


def test_one_grammar_for_runs_and_sweeps() -> None:
    text = slo.SLO.parse("ttft_ms<=2000; tpot_ms=50, e2e_ms:p99.9<=9000, ok>=0.95")
    mapping = slo.SLO.parse({"ttft_ms": 2000, "tpot_ms": 50, "e2e_ms:p99.9": 9000, "ok": 0.95})
    assert text == mapping and text is not None
    assert text.per_request_mapping() == {"ttft_ms": 2000.0, "tpot_ms": 50.0}
    assert [b.key for b in text.percentile_bounds] == ["e2e_ms:p99.9"]
    assert slo.SLO.parse(text.to_dict()) == text  # what a sweep manifest stores reads back
    assert slo.run_slo({"itl_ms": 30, "admission_lag_ms": 5}) == {"itl_ms": 30.0,
                                                                   "admission_lag_ms": 5.0}
    for bad, rule in ((["ttft<2000"], "METRIC<=LIMIT_MS"), ({"ttft_ms": -1}, "limit > 0"),
                      ({"ttft_ms:p0": 1}, "percentile"), ({"ok": 2}, r"\[0, 1\]")):
        with pytest.raises(ConfigError, match=rule):
            slo.SLO.parse(bad)
    with pytest.raises(ConfigError, match=r"slo: unknown metric.*'ttft_ms:p90'.*sweep"):
        slo.run_slo({"ttft_ms:p90": 2000})


def _run() -> RunResult:
    """Four requests: ttft 10/20/30 ms ok, one error; gaps 1, 2+4, none."""
    return RunResult("t", [_rec(0, 10, [1]), _rec(1, 20, [2, 4]), _rec(2, 30, []),
                           _rec(3, 40, [8], status="error")])


def test_a_sweep_point_and_a_run_judge_per_request_bounds_alike() -> None:
    run = _run()
    df = frame.to_frame(run)
    spec = slo.SLO.parse("itl_ms<=3,ok>=0.5")
    assert spec is not None
    # ok requests within 3 ms of every gap: r0 (1) and r2 (no gap); r1 has a 4 ms gap
    ev = spec.evaluate(df)
    assert ev["values"] == {"itl_ms": 0.5} and ev["good_requests"] == 2
    assert spec.verdict(ev["values"], ev["ok_rate"])["ratios"] == {"itl_ms": 1.0}
    run_view = summary.summarize(run, {"itl_ms": 3})["slo"]
    assert run_view["attainment"] == {"itl_ms": 0.5} and run_view["attained"] == 2


def test_one_percentile_everywhere() -> None:
    run = _run()
    df = frame.to_frame(run)
    ok = df[df["status"] == "ok"]
    gaps = np.asarray([1.0, 2.0, 4.0])
    assert slo.ok_percentile(ok, "itl_ms", 90) == pytest.approx(np.percentile(gaps, 90))
    assert distribution.percentile([None, float("nan"), 10.0, 20.0, 30.0], 50) == 20.0
    s = summary.summarize(run)
    table = replay_cmd.percentile_table(run, "50,90,99")
    for m in catalog.LATENCY:
        assert table[m]["p90"] == s[m]["p90"], m  # --percentiles and summary.json agree
    by_band = breakdown.percentiles(df[df["status"] == "ok"], "ttft_ms")
    assert by_band.loc["all", "p90"] == s["ttft_ms"]["p90"]


def test_old_sweep_slo_forms_still_parse() -> None:
    """sweep.json files store ``SLO.to_dict()``; runs store ``{metric: ms}``."""
    old_sweep = {"ttft_ms:p90": 8000.0, "ok": 0.99}
    parsed = slo.SLO.parse(old_sweep)
    assert parsed is not None and parsed.to_dict() == old_sweep
    assert dataclasses.asdict(parsed.bounds[0]) == {"metric": "ttft_ms", "q": 90.0,
                                                    "limit": 8000.0}
    frame_with_none = pd.DataFrame({"status": ["ok"], "ttft_ms": [np.nan], "itl_ms": [[]]})
    assert slo.ok_percentile(frame_with_none, "ttft_ms", 50) is None


def test_a_row_with_compute_is_derived_from_the_columns_before_it(monkeypatch) -> None:
    """A metric of other derived columns is its catalog row alone: ``derive`` calls the
    row's ``compute`` (``hit_delta`` is one), in row order, for frames and Parquet alike."""
    recs = [_rec(0, 3, [1, 2]), _rec(1, 5, [4])]
    d = frame._derived(recs)
    assert np.array_equal(d["hit_delta"], d["actual_hit"] - d["planned_hit"], equal_nan=True)
    toy = Metric("decode_ms", "ms", "decode", summarised=True, slo_able=True,
                 doc="ttft → end of stream", compute=lambda c: c["e2e_ms"] - c["ttft_ms"])
    monkeypatch.setattr(catalog, "CATALOG", (*CATALOG, toy))
    d = frame._derived(recs)
    assert d["decode_ms"].tolist() == (d["e2e_ms"] - d["ttft_ms"]).tolist() == [4.0, 5.0]
