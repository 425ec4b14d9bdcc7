"""A headline never states a number the table under it does not show, nor a verdict its
interval or counts do not carry (docs/metrics.md, "Headline"; docs/sweeps.md, "Capacity").

Property-style: runs, comparisons and sweeps of unusual shape are generated (hypothesis),
each headline is rendered beside the tables of its report, and every number the headline
states must equal, to the precision both print, a cell of the table it summarizes; every
"met/missed", "significant", "held/broke" agrees with the counts or the interval printed
beside it."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.metrics.distribution import support
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.report import compare, sweep_plots, sweep_tables, tables
from workbench.report.headline import (
    SEP,
    SLO_MET_SHARE,
    capacity_brief,
    capacity_sentence,
    sweeps_headline,
)
from workbench.report.sections import RunReport
from workbench.sweeps.groups import capacities
from workbench.sweeps.store import Sweep, SweepManifest

MS = 1_000_000
PROFILE = settings(max_examples=80, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?|–")


# -- agreeing to the printed precision -----------------------------------------------------
def _ulp(text: str) -> float:
    """Half the last printed digit of a number as printed (``"48.2"``: 0.05)."""
    mantissa = text.split("e")[0]
    decimals = len(mantissa.partition(".")[2])
    scale = 10 ** int(text.split("e")[1]) if "e" in text else 1
    return 0.5 * 10 ** -decimals * scale


def agrees(said: str, cell: str, factor: float = 1.0) -> bool:
    """``said`` (the headline's text, in units ``factor`` times the cell's) and ``cell``
    (the table's text) are roundings of one value: both dashes, or within the sum of their
    half-ulps."""
    if said == "–" or cell == "–":
        return said == cell
    a, b = float(said) * factor, float(cell)
    return abs(a - b) <= _ulp(said) * factor + _ulp(cell) + 1e-9 * abs(b)


# -- generated runs --------------------------------------------------------------------------
TTFTS = st.one_of(st.sampled_from([100.0, 100.0, 0.5, 1e9]),  # ties, a sub-ms, 1e9 ms
                  st.floats(1.0, 90_000.0))


@st.composite
def request(draw: Any, i: int, sessions: list[str], clean: int | None) -> RequestRecord:
    """One request; ``clean`` (its output tokens): ok, fast, of that many tokens."""
    status = "ok" if clean else draw(st.sampled_from(["ok", "ok", "ok", "error", "skipped",
                                                      "cancelled"]))
    ok = status == "ok"
    toks = clean or draw(st.sampled_from([0, 1, 2, 17]))
    ttft = draw(st.floats(1.0, 150.0) if clean else TTFTS)
    tpot = draw(st.sampled_from([5.0, 5.0, 0.25, 40.0]))
    start = i * draw(st.sampled_from([10 * MS, 86_400_000 * MS]))  # ms apart, or days
    first = start + int(ttft * MS)
    times = [first + int(k * tpot * MS) for k in range(toks)] if ok else []
    usage = draw(st.booleans())
    prompt = draw(st.integers(1, 40_000))
    planned = draw(st.sampled_from([0, prompt // 2, prompt - 1]))
    cached = draw(st.sampled_from([None, 0, planned, prompt // 3]))
    short = draw(st.sampled_from([0, 0, 0, 3]))  # the server stopped before max_tokens
    error = draw(st.sampled_from(["boom", "stream idle for more than 60.0s after 2 token "
                                  "events", 'HTTP 400: {"error":{"message":"prompt 9000 > '
                                  '8192"}}']))
    return RequestRecord(
        run_id="r", request_id=f"q{i}", unit_ordinal=i, session_id=draw(st.sampled_from(sessions)),
        round_idx=i, backend="openai", policy=None, planned_prefix_tokens=planned,
        planned_input_tokens=prompt - planned, planned_output_tokens=toks + short,
        sent_prompt_tokens=prompt, scheduled_ns=start, released_ns=start, admitted_ns=start,
        dispatch_ns=start if status != "skipped" else None,
        first_token_ns=times[0] if times else None, last_token_ns=times[-1] if times else None,
        end_ns=(times[-1] if times else first) + MS, token_times_ns=times,
        token_counts=[1] * len(times),
        http_status=200 if ok or error.startswith("stream") else 400 if "HTTP" in error else 500,
        prompt_tokens=(prompt * draw(st.sampled_from([1, 1, 9])) if usage else None),
        completion_tokens=toks if usage else None,
        cached_tokens=cached if ok and usage else None,
        cached_tokens_reported=ok and usage and cached is not None, status=status,
        finish_reason=("stop" if short else "length") if ok else None,
        error=None if ok else error)


@st.composite
def runs(draw: Any) -> RunResult:
    n = draw(st.one_of(st.integers(1, 12), st.sampled_from([99, 100, 299, 320])))
    sessions = draw(st.sampled_from([["s0"], ["a", "b"], ["セッション🙂", "ß"],
                                     [f"s{k}" for k in range(40)]]))
    clean = draw(st.sampled_from([None, None, 1, 17]))  # every request ok (an SLO met)
    records = [draw(request(i, sessions, clean)) for i in range(n)]
    slo = draw(st.sampled_from([None, {"ttft_ms": 200.0}, {"ttft_ms": 2e9, "tpot_ms": 50.0}]))
    status = draw(st.sampled_from(["completed", "completed", "cancelled", "partial"]))
    manifest = RunManifest.from_dict({
        "run_id": "r", "status": status,
        "config": {"target": {"url": "http://127.0.0.1:8000"}, **({"slo": slo} if slo else {})}})
    return RunResult("r", records, manifest=manifest)


def _cells(report: RunReport, name: str) -> Any:
    return report.table(name).formatted()


def _latency_part(part: str, latency: Any) -> None:
    """``TTFT p50/p90/p99 48.2/95/210 ms``, ``TTFT p50/max 8.5/12 s of 5 requests``;
    ``TTFT not measured``: the table's count of it is 0."""
    if m := re.fullmatch(r"(TTFT|TPOT) not measured", part):
        assert latency.loc[f"{m.group(1)} (ms)", "count"] == "0", part
        return
    m = re.fullmatch(r"(TTFT|TPOT) (?:([a-z0-9/]+) )?([0-9.–/e+-]+) (ms|s)"
                     r"(?: of ([0-9]+) requests?)?(?: \(.*\))?", part)
    assert m, part
    name, keys, values, unit, count = m.groups()
    row = latency.loc[f"{name} (ms)"]  # the row named as the headline names it
    keys = (keys or "max").split("/")
    for key, said in zip(keys, values.split("/"), strict=True):
        assert agrees(said, row[key], 1000.0 if unit == "s" else 1.0), (part, key, row[key])
    if count is not None:
        assert row["count"] == count, (part, row["count"])


def check_run_headline(run: RunResult) -> str:
    report = RunReport(run)
    line = str(report.headline()).splitlines()[0]
    table, latency, prefix = (_cells(report, t) for t in ("run", "latency", "prefix"))
    for part in line.split(SEP):
        if part.startswith("INCOMPLETE"):
            assert table.loc["status", "value"].startswith("INCOMPLETE"), part
        elif m := re.fullmatch(r"([0-9]+)/([0-9]+) ok", part):
            assert (table.loc["ok", "value"], table.loc["requests", "value"]) == m.groups()
        elif part.startswith(("TTFT", "TPOT")) and "n/a" not in part:
            _latency_part(part, latency)
        elif m := re.fullmatch(r"([0-9.e+-]+|–) req/s", part):
            assert agrees(m.group(1), table.loc["requests/s", "value"]), part
        elif part.startswith("prefix hit"):
            _prefix_part(part, prefix)
        elif part.startswith("SLO"):
            _slo_part(part, table, report.summary)
        elif re.match(r"[0-9]+ failed: ", part):
            _failed_part(part, table, _cells(report, "errors"), report.summary)
        elif m := re.fullmatch(r"([0-9]+) of ([0-9]+) ok ended short of max_tokens: ([0-9]+) "
                               r"of ([0-9]+) tokens \(finish [^0-9]*\)", part):
            rows = ("ended short of max_tokens", "ok", "their output tokens", "their max_tokens")
            assert m.groups() == tuple(table.loc[r, "value"] for r in rows), part
        elif m := re.fullmatch(r"the server counted ([0-9]+) prompt tokens for the ([0-9]+) "
                               r"sent \(([0-9.e+-]+)×\)", part):
            rows = ("prompt tokens the server counted", "prompt tokens sent")
            assert m.groups()[:2] == tuple(table.loc[r, "value"] for r in rows), part
            assert agrees(m.group(3), table.loc["counted / sent", "value"]), part
        else:
            assert not NUMBER.search(part) or part.startswith("client"), part
    return line


def _failed_part(part: str, table: Any, errors: Any, summary: Any) -> None:
    """``4 failed: HTTP 400 ×3 (reason); stream idle ×1 (what its reason adds); 2 other``:
    the count is the run table's errors, each class a row of the error table with its
    sample, which says what it adds to the class, as the headline does (a dash: nothing)."""
    n, rest = part.split(" failed: ", 1)
    assert n == table.loc["errors", "value"], part
    shown = 0
    for c in summary["failures"]["classes"][:2]:
        row = errors.loc[f"error: {c['class']}"]
        head, sample = f"{c['class']} ×{row['requests']}", row["sample message"]
        assert head in rest, part
        after = rest.split(head, 1)[1]
        assert not str(sample).startswith(c["class"]), (part, sample)  # never the class again
        if sample == "–":
            assert not after.startswith(" ("), part
        else:
            assert after.startswith(f" ({sample})"), part
        shown += int(row["requests"])
    other = int(n) - shown
    assert rest.endswith(f"; {other} other") if other else not rest.endswith(" other"), part


def _prefix_part(part: str, prefix: Any) -> None:
    m = re.fullmatch(r"prefix hit (unknown \(no cached counts\)|[0-9.]+)(?: of ([0-9.]+) planned"
                     r"(?: for the ([0-9]+) requests? that reported a cached count)?)?", part)
    assert m, part
    actual, planned, reported = m.groups()
    cell = prefix.loc["actual (client)", "hit rate"]
    assert (cell == "–") if actual.startswith("unknown") else agrees(actual, cell), part
    if reported is not None:  # the plan of the requests that reported: a row of its own
        row = prefix.loc["planned (of those requests)"]
        assert agrees(planned, row["hit rate"]) and row["over requests"] == reported, part
    elif planned is not None:
        assert agrees(planned, prefix.loc["planned", "hit rate"]), part


def _slo_part(part: str, table: Any, summary: Any) -> None:
    """``SLO met: 303/303 within …``: the counts are the run table's, and ``met`` needs
    at least 99 % of the requests (failed ones count against), so as many ok."""
    m = re.match(r"SLO (met|missed|not judged): ([0-9]+)/([0-9]+) within", part)
    assert m, part
    verdict, attained, n = m.group(1), int(m.group(2)), int(m.group(3))
    assert str(n) == table.loc["requests", "value"], part
    # the row names the bounds it counts in the verdict's words (docs/metrics.md, "Headline")
    row = tables.attained_label(summary["slo"]["bounds"])
    assert f"/{n} {row.removeprefix('SLO attained (').removesuffix(')')}" in part, (row, part)
    assert table.loc[row, "value"] == str(attained), part
    ok = int(table.loc["ok", "value"])
    if verdict == "met":
        assert attained >= SLO_MET_SHARE * n and ok >= SLO_MET_SHARE * n, part
        needed = support(100 * SLO_MET_SHARE, misses=n - attained) or 0
        assert ("too few requests" in part) == (n < needed), part
        assert ("missing it" in part) == (n < needed and attained < n), part
    elif verdict == "missed":
        assert attained < SLO_MET_SHARE * n, part


@PROFILE
@given(runs())
def test_every_number_of_a_run_headline_is_a_cell_of_its_tables(run: RunResult) -> None:
    check_run_headline(run)


# -- comparisons ---------------------------------------------------------------------------
def _change_line_agrees(line: str, label: str, changes: Any) -> None:
    """Each ``p50 +12.3 ms [+8.1, +16] significant`` of the change line is a row of the
    table: the numbers, and the verdict its interval carries."""
    mine = changes[changes["run"] == label].set_index(["metric", "stat"])
    body = line.split(": ", 1)[1]
    for name, metric in (("TTFT", "TTFT (ms)"), ("TPOT", "TPOT (ms)")):
        if "identical runs" in body or f"{name} identical" in body:
            rows = mine.loc[metric]
            assert (rows["verdict"] == compare.IDENTICAL).all(), (body, rows)
            assert (rows[["change", "change lo", "change hi"]] == 0).all().all()
    found = list(re.finditer(r"(?:(TTFT|TPOT) )?(p[0-9]+) ([^ ]+) (m?s) \[([^,]+), ([^\]]+)\] ",
                             body))
    assert found or "identical runs" in body, line
    metric = ""
    for k, m in enumerate(found):
        end = found[k + 1].start() if k + 1 < len(found) else len(body)
        verdict = re.split(r"; (?=TTFT |TPOT )", body[m.end():end])[0].rstrip(",; ")
        name, stat, change, unit, lo, hi = m.groups()
        factor = 1000.0 if unit == "s" else 1.0
        metric = {"TTFT": "TTFT (ms)", "TPOT": "TPOT (ms)"}.get(name or "", metric)
        row = mine.loc[(metric, stat)]
        for said, value in ((change, row["change"]), (lo, row["change lo"]),
                            (hi, row["change hi"])):
            number = said.lstrip("+−±")
            sign = -1 if said.startswith("−") else 1
            assert agrees(number, f"{abs(value):.6g}" if math.isfinite(value) else "–",
                          factor), (said, value)
            assert said.startswith("±") == (value == 0) or number == "–", (said, value)
            assert sign * float(number) * value >= 0 if number != "–" else True
        assert verdict == row["verdict"], (verdict, row["verdict"])
        if verdict == "significant":
            assert row["change lo"] > 0 or row["change hi"] < 0
        if verdict == "not significant":
            # [0, 0] may stand (both percentiles sit on one tied value in every resample);
            # values identical session by session read IDENTICAL instead (tested below)
            assert row["change lo"] <= 0 <= row["change hi"]


def _stored(run: RunResult, name: str, trace: str) -> RunResult:
    """``run`` as a stored run of trace ``trace`` (a sha256) would read."""
    manifest = RunManifest.from_dict({**run.manifest.to_dict(), "run_id": name,
                                      "trace": {"sha256": trace}})
    return RunResult(name, run.records, manifest=manifest)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(runs(), runs(), st.sampled_from(["same", "other", "itself"]))
def test_a_compare_headline_agrees_with_its_change_table(a: RunResult, b: RunResult,
                                                         how: str) -> None:
    a = _stored(a, "a", "t1")
    b = a if how == "itself" else _stored(b, "b", "t1" if how == "same" else "t2")
    runs_ = {"base": a, "other": b}
    changes = compare.change_table(runs_, n_boot=200)
    head = compare.compare_headline(runs_, changes)
    (line,) = [ln for ln in head.lines if ln.startswith("  other vs base")]
    _change_line_agrees(line, "other", changes)
    pct = compare.percentile_table(runs_, n_boot=50)
    for label in runs_:  # each run's latencies, as its line states them, are the table's
        (mine,) = [ln for ln in head.lines if ln.startswith(f"{label}")]
        for part in mine.split(": ", 1)[1].split(SEP):
            if part.startswith(("TTFT", "TPOT")) and "n/a" not in part:
                metric = f"{part[:4]} (ms)"
                row = pct[(pct["metric"] == metric) & (pct["run"] == label)].iloc[0]
                cells = {k: tables.Table(pct, "p").cell(row[k], {k}) for k in pct.columns}
                cells["count"] = str(int(row["n"]))
                _latency_part(part, pd.DataFrame({metric: cells}).T)
                # the max in a percentile's place, "of N requests", is the table's thin one
                m = re.search(r" of ([0-9]+) requests?$", part)
                assert (row["thin"].endswith(m.group(0)) if m else row["thin"] == ""), (
                    part, row["thin"])
    hits = compare.hit_rate_table(runs_)
    for label in runs_:  # each run's prefix hit, as its line states it, is the hit table's
        (mine,) = [ln for ln in head.lines if ln.startswith(f"{label}")]
        part = next((p for p in mine.split(": ", 1)[1].split(SEP)
                     if p.startswith("prefix hit")), None)
        if part is None:
            continue
        m = re.fullmatch(r"prefix hit (unknown \(no cached counts\)|[0-9.]+)(?: of ([0-9.]+) "
                         r"planned(?: for the ([0-9]+) requests?)?.*)?", part)
        assert m, part
        actual, planned, reported = m.groups()
        row = {k: tables.Table(hits, "hits").cell(v) for k, v in hits.loc[label].items()}
        if not actual.startswith("unknown"):
            assert agrees(actual, row["actual (client)"]), (part, row)
        if planned is not None:
            column = compare.PLANNED_OF_REPORTED if reported else "planned"
            assert agrees(planned, row[column]), (part, row)
            if actual[0].isdigit():  # actual − planned: against the plan the line states
                delta = float(hits.loc[label, "actual − planned"])
                assert agrees(f"{float(actual) - float(planned):.3f}", f"{delta:.3f}"), (
                    part, delta)


# -- sweeps ------------------------------------------------------------------------------------
def _point(index: int, rate: float, held: bool) -> dict[str, Any]:
    p90 = 1000.0 if held else 3000.0
    return {"index": index, "status": "done", "params": {"arrival.rate": rate},
            "metrics": {"request_throughput_rps": rate * 0.9, "ttft_ms_p90": p90,
                        "slo:ttft_ms:p90": p90},
            "slo": {"held": held, "worst_ratio": p90 / 2000}, "runs": []}


def _sweep(verdicts: list[bool]) -> Sweep:
    pts = [_point(i, float(i + 1), held) for i, held in enumerate(verdicts)]
    return Sweep(Path("/nonexistent"), SweepManifest.from_dict({
        "sweep_id": "s", "axes": ["arrival.rate"], "slo": {"ttft_ms:p90": 2000.0},
        "slo_text": "ttft_ms:p90<=2000", "points": pts, "mode": "virtual"}))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=6))
def test_a_capacity_sentence_and_cell_agree_with_the_points_held(verdicts: list[bool]) -> None:
    """Points at 1, 2, … req/s that held or broke: "held at every point" only when each
    did, "broke at every point" only when none did, "the highest load that held" only of
    the highest that held, and a capacity stated only below the first break and said to
    be uncertain when a higher load held again; the table's cell says the same."""
    s = _sweep(verdicts)
    sentence = capacity_sentence(s, rounds_per_unit=1.0)
    (cap,) = capacities(s)
    cell = capacity_brief(cap, 1.0)
    held = [i + 1 for i, v in enumerate(verdicts) if v]
    first_break = verdicts.index(False) + 1 if False in verdicts else None
    assert ("held at every point" in sentence) == all(verdicts), sentence
    assert ("broke at every point" in sentence) == (not held), sentence
    if "the highest load that held" in sentence:
        m = re.search(r"at ([0-9.]+) req/s offered: the highest load that held", sentence)
        assert m and float(m.group(1)) == max(held), sentence
    again = first_break is not None and any(h > first_break for h in held)
    assert ("not monotone" in sentence) == again, sentence
    assert ("not monotone" in cell) == again, cell
    table = sweep_tables.points_table(sweep_plots.as_sweeps(s))
    shown = tables.show(table).formatted()
    held_col = "SLO held at TTFT p90 ≤ 2 s"  # the SLO the verdict is of, as the headline says
    assert held_col in shown and f"At {held_col.removeprefix('SLO held at ')}" in (
        str(sweeps_headline({"s": s}))), shown.columns
    rows = {float(r): i for i, r in enumerate(table["arrival.rate"])}
    for verb, said in re.findall(r"(broke|held again) at ([0-9.]+) req/s", sentence):
        assert shown[held_col].iloc[rows[float(said)]] == str(verb != "broke"), (verb, said)
    m = re.search(r"capacity (?:at least )?([0-9.]+) req/s sustained, at ([0-9.]+)", sentence)
    if m:
        load = float(m.group(2))
        assert load in held and (first_break is None or load < first_break), sentence
        row = rows[load]  # the point the capacity rests on, as the points table shows it
        assert shown[held_col].iloc[row] == "True", (sentence, shown)
        assert agrees(m.group(1), shown["throughput (req/s)"].iloc[row]), (sentence, shown)
        assert cell.lstrip("≥ ").startswith(m.group(1)), (cell, sentence)
    else:
        assert "sustained" not in cell, cell


@pytest.mark.parametrize(("said", "cell", "factor", "ok"), [
    ("48.2", "48.210", 1.0, True), ("48.2", "48.300", 1.0, False),
    ("943", "943300.400", 1000, True),
    ("–", "–", 1.0, True), ("0", "–", 1.0, False), ("0.0523", "0.052", 1.0, True),
])  # fmt: skip
def test_agreeing_to_the_printed_precision(said: str, cell: str, factor: float, ok: bool) -> None:
    assert agrees(said, cell, factor) is ok


def _sessions_run(name: str, sessions: int, rounds: int, shift_ms: float = 0.0) -> RunResult:
    records = []
    for k in range(sessions):
        for r in range(rounds):
            i = k * rounds + r
            start = i * 10 * MS
            first = start + int((40.0 + 7 * k + r + shift_ms) * MS)
            times = [first + j * 5 * MS for j in range(4)]
            records.append(RequestRecord(
                run_id=name, request_id=f"q{i}", unit_ordinal=k, session_id=f"s{k}",
                round_idx=r, backend="openai", policy=None, planned_prefix_tokens=0,
                planned_input_tokens=100, planned_output_tokens=4, sent_prompt_tokens=100,
                scheduled_ns=start, dispatch_ns=start, first_token_ns=first,
                last_token_ns=times[-1], end_ns=times[-1] + MS, token_times_ns=times,
                token_counts=[1] * 4, http_status=200, prompt_tokens=100, completion_tokens=4))
    manifest = RunManifest.from_dict({"run_id": name, "status": "completed",
                                      "trace": {"sha256": "t"}})
    return RunResult(name, records, manifest=manifest)


def test_a_run_compared_with_itself_reads_identical_not_no_change() -> None:
    """The paired interval of a run against itself is [0, 0] by construction: every
    resample draws the same sessions for both. "±0 ms [±0, ±0] not significant" reads as
    a measured absence of change; it is one measurement shown twice."""
    run = _sessions_run("a", 40, 3)
    runs_ = {"base": run, "again": _sessions_run("b", 40, 3)}  # a deterministic repeat
    changes = compare.change_table(runs_, n_boot=200)
    assert set(changes["verdict"]) == {compare.IDENTICAL}
    assert changes["significant"].isna().all() and (changes["change"] == 0).all()
    line = compare.compare_headline(runs_, changes).lines[-1]
    assert line == ("  again vs base: identical runs: every TTFT and TPOT value is equal in "
                    "both (the same run given twice, or a deterministic replay repeated), no "
                    "change to judge")
    shifted = {"base": run, "later": _sessions_run("c", 40, 3, shift_ms=9.0)}
    changes = compare.change_table(shifted, n_boot=200)
    ttft = changes[changes["metric"] == "TTFT (ms)"]
    assert set(ttft["verdict"]) == {"significant"}  # every value 9 ms later: paired, exact
    line = compare.compare_headline(shifted, changes).lines[-1]
    assert line.startswith("  later vs base (intervals by session, paired): TTFT p50 +9 ms "
                           "[+9, +9] significant, p90 +9 ms [+9, +9] significant; TPOT "
                           "identical in both runs (every value equal), no change to judge")
    _change_line_agrees(line, "later", changes)


@pytest.mark.parametrize(("attained", "n", "note"), [
    (303, 303, None),
    (300, 303, " (too few requests to show 99 % at 95 % confidence with 3 missing it: needs 773)"),
    (299, 300, " (too few requests to show 99 % at 95 % confidence with 1 missing it: needs 473)"),
    (499, 500, None),
    (8, 8, " (too few requests to show 99 % at 95 % confidence: needs 299)"),
])  # fmt: skip
def test_slo_met_with_misses_needs_the_requests_that_show_it(attained: int, n: int,
                                                             note: str | None) -> None:
    """``SLO met: 300/303`` read as shown: 99 % attained over more than 299 requests. With 3
    of them missing it the 95 % lower bound of the share is 97.5 %, not 99 %: the verdict
    needs 773 requests with 3 misses (the order-statistics rule of "Evidence" with the
    largest but 3 values in place of the largest)."""
    from workbench.report.headline import slo_verdict

    slo = {"bounds": {"ttft_ms": 2000.0}, "requests": n, "attained": attained,
           "joint_attainment": attained / n}
    assert slo_verdict(slo) == (f"SLO met: {attained}/{n} within TTFT ≤ 2 s" + (note or ""))


def test_a_constant_metric_equal_in_both_runs_and_a_run_with_no_value_read_as_such() -> None:
    """Every TPOT exactly 5 ms in both runs, their sessions disjoint: each resample's
    difference is 0, an interval [0, 0] that "not significant" would present as noise
    measured; a run with no ok request has no change to sign ("±– ms" read as a number)."""
    base = _sessions_run("a", 40, 3)
    other = _sessions_run("b", 40, 3, shift_ms=3.0)
    for r in other.records:
        r.session_id = "x" + r.session_id
    runs_ = {"base": base, "other": other}
    changes = compare.change_table(runs_, n_boot=200)
    tpot = changes[changes["metric"] == "TPOT (ms)"]
    assert set(tpot["verdict"]) == {compare.IDENTICAL}
    line = compare.compare_headline(runs_, changes).lines[-1]
    assert line.endswith("; TPOT identical in both runs (every value equal), no change to judge")
    _change_line_agrees(line, "other", changes)
    empty = RunResult("e", [], manifest=RunManifest.from_dict({"run_id": "e"}))
    runs_ = {"base": base, "none": empty}
    line = compare.compare_headline(runs_, compare.change_table(runs_, n_boot=200)).lines[-1]
    assert "TTFT p50 – ms [–, –] no interval, p90 – ms [–, –] no interval;" in line


def test_a_change_of_seconds_is_said_in_seconds_as_the_headlines_above_it() -> None:
    """The runs' headlines read ``TTFT p50/p90/p99 178/287/297 s`` and the change under
    them ``+177950 ms``: one rule for both (``SECONDS_FROM_MS``)."""
    base = _sessions_run("a", 40, 3)
    slow = _sessions_run("b", 40, 3, shift_ms=150_000.0)
    runs_ = {"base": base, "slow": slow}
    changes = compare.change_table(runs_, n_boot=200)
    head = compare.compare_headline(runs_, changes)
    assert "TTFT p50/p90/p99 150/150/150 s" in head.lines[2]
    line = head.lines[-1]
    assert "TTFT p50 +150 s [+150, +150] significant, p90 +150 s [+150, +150] significant" in line
    _change_line_agrees(line, "slow", changes)


def _configs_sweep(verdicts: list[list[bool]]) -> Sweep:
    k, rate = "engine.max_num_seqs", "arrival.rate"
    pts = []
    for c, row in enumerate(verdicts):
        for i, held in enumerate(row):
            p = _point(len(pts), float(i + 1), held)
            p["params"] = {k: 4 * (c + 1), rate: float(i + 1)}
            pts.append(p)
    return Sweep(Path("/nonexistent"), SweepManifest.from_dict({
        "sweep_id": "s", "axes": [k, rate], "slo": {"ttft_ms:p90": 2000.0},
        "slo_text": "ttft_ms:p90<=2000", "points": pts, "mode": "virtual"}))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=2, max_size=3))
def test_the_best_configuration_sentence_agrees_with_the_points_held(
        verdicts: list[list[bool]]) -> None:
    """"No configuration held the SLO at any load tried" only when no point held; a best
    configuration whose capacity is uncertain (not monotone) is said to be."""
    sentence = capacity_sentence(_configs_sweep(verdicts), rounds_per_unit=1.0)
    last = sentence.rsplit(". ", 1)[-1] if "Best" not in sentence else sentence[
        sentence.index("Best"):]
    if "No configuration held the SLO at any load tried" in sentence:
        assert not any(any(row) for row in verdicts), sentence
    again = {f"max_num_seqs={4 * (c + 1)}" for c, row in enumerate(verdicts)
             if False in row and any(row[row.index(False):])}
    for label in again:
        if label in last:
            assert "not monotone" in last, (label, last)


def test_a_sweep_whose_only_hold_is_above_a_break_names_it_not_none() -> None:
    """max_num_seqs=4 broke at 1 req/s and held at 2; max_num_seqs=8 broke at both. The
    sentence ended "No configuration held the SLO at any load tried." over a table with a
    point that held."""
    sentence = capacity_sentence(_configs_sweep([[False, True], [False, False]]), 1.0)
    assert sentence.endswith(
        "No configuration has a capacity to state: none held the SLO from its lowest load "
        "on; max_num_seqs=4 held only above a load that broke it (not monotone in load).")
