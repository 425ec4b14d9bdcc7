"""A sweep's tables say its SLO in the headline's words and name their columns as the
report does: the sweeps table's SLO row, a per-request bound's share column and the CLI's
table of points (docs/sweeps.md, "Plots and tables").

One real sweep through the CLI in virtual time on the embedded engine, over the first 30
requests of the bundled Mooncake slice, with a percentile bound, a per-request bound and
an ok share that is not the default; every check reads the produced text and compares it
to the stored sweep, not to a frozen string."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

import workbench.catalogs.requests as catalog
from workbench.cli import main
from workbench.data import path as data_path
from workbench.metrics.wording import sig, slo_phrase
from workbench.report.headline import sweeps_headline
from workbench.report.sweep_tables import POINT_SHOWN, points_table, sweeps_table
from workbench.sweeps import load_sweep
from workbench.sweeps.store import Sweep

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))
SLO = ("ttft_ms:p90<=60000", "ttft_ms<=3000", "ok>=0.5")
#: a column name as stored (``ttft_ms_p90``, ``request_throughput_rps``, ``slo_held``)
RAW = re.compile(r"^[a-z]+(_[a-z0-9]+)+$|<=")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Sweep, str]:
    out_dir = tmp_path_factory.mktemp("words")
    args = ["sweep", "--trace", MOONCAKE, "--max-items", "30", "--virtual", "--parallel", "1",
            "--over", "rate=1,2", "-o", str(out_dir), "--sweep-id", "w"]
    for bound in SLO:
        args += ["--slo", bound]
    buf = io.StringIO()  # a module-scoped fixture cannot take capsys
    with contextlib.redirect_stdout(buf):
        assert main(args) == 0
    return load_sweep(out_dir / "w"), buf.getvalue()


def test_the_sweeps_table_says_the_slo_as_the_headline_does(swept: tuple[Sweep, str]) -> None:
    s, out = swept
    said = sweeps_table({"w": s}).loc["SLO", "w"]
    assert said == slo_phrase(s.slo)
    assert f"At {said}:" in str(sweeps_headline({"w": s}))
    assert f"At {said}:" in out
    assert "<=" not in said and ">=" not in said and "_ms" not in said, said
    # the ok share that is not the default is part of the verdict: said, in every place
    assert "at least 50 % of requests ok" in said, said


def test_a_per_request_bound_is_worded_alike_in_the_verdict_and_its_share_column(
        swept: tuple[Sweep, str]) -> None:
    s, _ = swept
    table = points_table({"w": s})
    held = next(c for c in table.columns if c.startswith("SLO held"))
    share = [c for c in table.columns if c.startswith("share within ")]
    assert len(share) == 1, list(table.columns)
    bound = share[0].removeprefix("share within ")
    assert f"{bound} per request" in held, (held, share)  # one wording of the bound
    assert f"{bound} per request" in str(sweeps_headline({"w": s}))
    assert bound.startswith(catalog.label("ttft_ms"))
    ordered = sorted(s.points, key=lambda p: p["params"]["arrival.rate"])
    assert list(table[share[0]]) == [p["metrics"]["slo:ttft_ms"] for p in ordered]


def _cli_table(out: str) -> tuple[list[str], list[list[str]]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("arrival.rate"))
    head = re.split(r"\s{2,}", lines[start].strip())
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[start + 1:start + 3]]
    return head, rows


def test_the_cli_table_names_its_columns_as_the_report_and_shows_its_numbers(
        swept: tuple[Sweep, str]) -> None:
    s, out = swept
    head, rows = _cli_table(out)
    assert all(len(r) == len(head) for r in rows), (head, rows)
    raw = [h for h in head if h != "arrival.rate" and RAW.search(h)]
    assert raw == [], head
    table = points_table({"w": s})
    report = [c for c in table.columns if not c.startswith("SLO held")]
    assert [h for h in head if h != "SLO held"] == report  # the report's names, its order
    assert "SLO held" in head
    ordered = sorted(s.points, key=lambda p: p["params"]["arrival.rate"])
    label = dict(POINT_SHOWN)
    for row, p in zip(rows, ordered, strict=True):
        m = p["metrics"]
        cell = dict(zip(head, row, strict=True))
        assert cell[label["ttft_ms_p90"]] == sig(m["ttft_ms_p90"])
        assert cell[label["request_throughput_rps"]] == sig(m["request_throughput_rps"])
        assert cell["requests"] == sig(m["requests"]) == "30"
        assert cell["SLO held"] == str(p["slo"]["held"])
    # a latency names its unit as every table does; the fractions are said under the table
    assert label["ttft_ms_p90"] == catalog.with_unit("ttft_ms", "p90") == "TTFT p90 (ms)"
    assert all(f"{catalog.with_unit(m, 'p90')}" in head for m in catalog.SCALAR_LATENCY), head
    after = out.splitlines()[out.splitlines().index(next(
        line for line in out.splitlines() if line.lstrip().startswith("arrival.rate"))) + 3]
    assert "fractions 0-1" in after and "latencies in ms" not in after, after


def test_a_points_run_words_its_per_request_bound_as_the_sweep_does(
        swept: tuple[Sweep, str]) -> None:
    """Each point's run keeps the per-request bound as its own SLO: its headline's verdict
    and its table's attained row say the bound in the sweep's words (they said "TTFT ≤
    3000 ms" where the sweep said "TTFT ≤ 3 s per request")."""
    import json

    from workbench.report.headline import slo_verdict
    from workbench.report.tables import attained_label

    s, _ = swept
    share = next(c for c in points_table({"w": s}).columns if c.startswith("share within "))
    bound = share.removeprefix("share within ")
    summary = json.loads((s.sweep_dir / "runs" / "p000-r0" / "summary.json").read_text())
    verdict = slo_verdict(summary["slo"], summary) or ""
    n, attained = summary["slo"]["requests"], summary["slo"]["attained"]
    assert f"{attained}/{n} within {bound}" in verdict, (verdict, bound)
    assert attained_label(summary["slo"]["bounds"]) == f"SLO attained (within {bound})"
