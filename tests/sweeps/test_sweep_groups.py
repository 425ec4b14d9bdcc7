"""Sweeps know their configurations (issue 40): points grouped by server parameters
(``serve.*``) and every non-load axis, a capacity per configuration stated as one number
(the rate the engine sustained at the highest load that held, the offered load beside
it), the best configuration, one line per configuration in the plots, goodput against
offered load, numbers rounded in labels and CLI lines.

The grids run in virtual time on the embedded engine (``engine.max_num_seqs`` stands in
for a server parameter: docs/sweeps.md, "Configurations"), 40 requests of 2000 prompt
tokens each, Poisson arrivals: deterministic, a few seconds each. Hand-built manifests
cover ``serve.*`` axes and the edge cases (not monotone, ties)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from workbench.cli import main
from workbench.report.headline import capacity_sentence, sweeps_headline
from workbench.sweeps import Sweep, SweepManifest
from workbench.sweeps.groups import (
    best,
    capacities,
    curves,
    groups,
    in_load_order,
    load_axis_of,
)

TRACE = "synthetic:random,requests=40,input=fixed:2000,output=fixed:64"
SLO_TEXT = "ttft_ms:p90<=500"
# the grid: max_num_seqs=1 breaks at both rates (TTFT p90 871 and 8081 ms),
# max_num_seqs=8 holds at both (73 and 109 ms)
HOLDS_AND_NOT = {"engine.max_num_seqs": [1, 8], "arrival.rate": [2, 6]}
# each configuration breaks at a rate of its own: 1 at 2 req/s, 2 at 4, 4 at 8
EACH_BREAKS = {"engine.max_num_seqs": [1, 2, 4], "arrival.rate": [1, 2, 4, 8]}

HOLDS_AND_NOT_LINES = [
    "g: 4 points of arrival.rate 2–6, 2 configurations (max_num_seqs) · virtual time "
    "(simulated engine, default step times, not a GPU's) · At TTFT p90 ≤ 500 ms, per "
    "configuration:",
    "max_num_seqs=1: the SLO broke at every point, from 2 req/s offered: the capacity is "
    "below the range.",
    "max_num_seqs=8: capacity at least 5.02 req/s sustained, at 6 req/s offered: the SLO "
    "held at every point, so the capacity is above the range.",
    "Best configuration: max_num_seqs=8, capacity at least 5.02 req/s sustained, at 6 req/s "
    "offered.",
]
EACH_BREAKS_LINES = [
    "e: 12 points of arrival.rate 1–8, 3 configurations (max_num_seqs) · virtual time "
    "(simulated engine, default step times, not a GPU's) · At TTFT p90 ≤ 500 ms, per "
    "configuration:",
    "max_num_seqs=1: capacity 0.877 req/s sustained, at 1 req/s offered: the highest load "
    "that held; it broke at 2 req/s.",
    "max_num_seqs=2: capacity 1.74 req/s sustained, at 2 req/s offered: the highest load "
    "that held; it broke at 4 req/s.",
    "max_num_seqs=4: capacity 3.41 req/s sustained, at 4 req/s offered: the highest load "
    "that held; it broke at 8 req/s.",
    "Best configuration: max_num_seqs=4, capacity 3.41 req/s sustained, at 4 req/s offered.",
]


def _base(tmp: Path) -> dict[str, Any]:
    # no arrival.rate: sweeping the rate needs no base rate
    return {"trace": TRACE, "arrival": {"mode": "poisson"}, "out_dir": str(tmp)}


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sweep]:
    root = tmp_path_factory.mktemp("groups")
    return {name: wb.sweep(_base(root), over, slo=SLO_TEXT, virtual=True, sweep_id=name)
            for name, over in (("g", HOLDS_AND_NOT), ("e", EACH_BREAKS))}


def _held(sweep: Sweep) -> dict[tuple[int, float], bool]:
    return {(p["params"]["target.engine.max_num_seqs"], p["params"]["arrival.rate"]):
            p["slo"]["held"] for p in sweep.points}


def test_one_configuration_holds_everywhere_and_one_nowhere(grids: dict[str, Sweep]) -> None:
    s = grids["g"]
    # the table under the headline: what the sentences must agree with
    assert _held(s) == {(1, 2): False, (1, 6): False, (8, 2): True, (8, 6): True}
    assert sweeps_headline({"g": s}).lines == HOLDS_AND_NOT_LINES
    caps = capacities(s)
    assert [(c.label, c.status) for c in caps] == [("max_num_seqs=1", "below"),
                                                  ("max_num_seqs=8", "above")]
    b = best(caps)
    assert b is not None and [c.label for c in b.leaders] == ["max_num_seqs=8"]


def test_each_configuration_breaks_at_a_different_rate(grids: dict[str, Sweep]) -> None:
    s = grids["e"]
    held = _held(s)
    for n, broke_at in ((1, 2), (2, 4), (4, 8)):
        assert [held[(n, r)] for r in (1, 2, 4, 8)] == [r < broke_at for r in (1, 2, 4, 8)]
    assert sweeps_headline({"e": s}).lines == EACH_BREAKS_LINES
    # the capacity is the delivered rate at the last held point, as the table says
    for cap in capacities(s):
        assert cap.status == "held" and cap.point is not None and cap.broken is not None
        assert cap.sustained == cap.point["metrics"]["request_throughput_rps"]
        assert cap.point["slo"]["held"] and not cap.broken["slo"]["held"]
    # one sentence of it all (under the goodput figure, in the index)
    assert capacity_sentence(s) == " ".join(EACH_BREAKS_LINES[1:]).join(
        ["At TTFT p90 ≤ 500 ms, per configuration: ", ""])


def test_plots_draw_a_line_per_configuration_against_offered_load(
        grids: dict[str, Sweep]) -> None:
    s = grids["e"]
    fig = wb.sweep_plot(s, "goodput")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "offered load (arrival.rate, req/s)"  # not the point index
    delivered = {ln.get_label(): list(ln.get_xdata()) for ln in ax.get_lines()
                 if str(ln.get_label()).endswith(": delivered")}
    assert delivered == {f"max_num_seqs={n}: delivered": [1, 2, 4, 8] for n in (1, 2, 4)}
    caps = {ln.get_label(): list(ln.get_xdata()) for ln in ax.get_lines()
            if str(ln.get_label()).endswith("capacity (SLO held)")}
    assert caps == {"max_num_seqs=1: capacity (SLO held)": [1, 1],
                    "max_num_seqs=2: capacity (SLO held)": [2, 2],
                    "max_num_seqs=4: capacity (SLO held)": [4, 4]}
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    assert EACH_BREAKS_LINES[-1] in note
    latency = wb.sweep_plot(s, "latency").axes[0]
    handles, labels = latency.get_legend_handles_labels()
    lines = {lab: h for h, lab in zip(handles, labels, strict=True) if lab.endswith(": p90")}
    assert list(lines) == [f"max_num_seqs={n}: p90" for n in (1, 2, 4)]
    for h in lines.values():  # each line in load order: its delivered throughput rises
        xs = list(h.lines[0].get_xdata())  # an errorbar container's data line
        assert len(xs) == 4 and xs == sorted(xs)
    cache = wb.sweep_plot(s, "cache").axes[0]
    actual = {ln.get_label(): list(ln.get_xdata()) for ln in cache.get_lines()
              if str(ln.get_label()).endswith(": actual")}
    assert actual == {f"max_num_seqs={n}: actual": [1, 2, 4, 8] for n in (1, 2, 4)}
    order = in_load_order(s)
    assert list(order["target.engine.max_num_seqs"]) == [1] * 4 + [2] * 4 + [4] * 4
    assert list(order["arrival.rate"]) == [1, 2, 4, 8] * 3


def test_the_cli_sweeps_the_rate_without_a_base_rate(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's command, in virtual time: no ``--rate``, the headline per configuration
    above the table, configuration by configuration in load order."""
    args = ["sweep", "--trace", TRACE, "--arrival", "poisson", "--virtual",
            "--over", "engine.max_num_seqs=1,8", "--over", "arrival.rate=2,6",
            "--slo", SLO_TEXT, "-o", str(tmp_path), "--sweep-id", "g"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == HOLDS_AND_NOT_LINES
    rows = [line.split() for line in out[5:9]]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("1", "2", "False"), ("1", "6", "False"), ("8", "2", "True"), ("8", "6", "True")]
    assert out[9].startswith("Points in load order (")  # the caption: units
    assert out[10].startswith("Highest throughput under TTFT p90 ≤ 500 ms: "
                             "max_num_seqs=8, rate=6 — ")
    # a capacity search of the rate needs no base rate either; its line is the bracket
    assert main(["sweep", "--trace", TRACE, "--arrival", "poisson", "--virtual",
                 "--engine", "max_num_seqs=2", "--capacity", "rate", "--lo", "1", "--hi", "8",
                 "--tolerance", "0.5", "--slo", SLO_TEXT, "-o", str(tmp_path),
                 "--sweep-id", "c"]) == 0
    out = capsys.readouterr().out
    search = next(line for line in out.splitlines() if line.startswith("search of "))
    assert search.startswith("search of arrival.rate: found, bracket [")
    s = wb.load_sweep(tmp_path / "c")
    for p in s.points:  # every probe a round number, its label too
        rate = p["params"]["arrival.rate"]
        assert rate == round(rate, 2) and p["label"] == f"rate={rate:g}"
        assert len(p["label"]) <= len("rate=3.33")
    assert "found by search" in capacity_sentence(s)


# -- hand-built manifests: serve.* axes, edge cases ---------------------------------------------
def _point(index: int, params: dict[str, Any], rps: float, held: bool) -> dict[str, Any]:
    return {"index": index, "status": "done", "params": params,
            "label": ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items()),
            "metrics": {"request_throughput_rps": rps}, "slo": {"held": held}, "runs": []}


def _sweep(axes: list[str], rows: list[tuple[dict[str, Any], float, bool]]) -> Sweep:
    points = [_point(i, params, rps, held) for i, (params, rps, held) in enumerate(rows)]
    return Sweep(Path("/nonexistent"), SweepManifest(sweep_id="s", axes=axes, points=points,
                                                     slo={"ttft_ms:p90": 500.0}, mode="live"))


def test_a_server_sweep_groups_by_its_server_parameter_first() -> None:
    """The issue's server sweep: ``serve.n`` is listed first, yet the load is
    ``arrival.rate``; n=8 held at both rates and is named so, and best."""
    axes = ["serve.n", "arrival.rate"]
    s = _sweep(axes, [({"serve.n": 1, "arrival.rate": 2}, 1.7, False),
                      ({"serve.n": 1, "arrival.rate": 6}, 2.4, False),
                      ({"serve.n": 8, "arrival.rate": 2}, 1.8, True),
                      ({"serve.n": 8, "arrival.rate": 6}, 5.0, True)])
    assert load_axis_of(axes) == "arrival.rate"
    assert [g.label for g in groups(s)] == ["n=1", "n=8"]
    assert capacity_sentence(s, rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 500 ms, per configuration: n=1: the SLO broke at every point, from "
        "2 req/s offered: the capacity is below the range. n=8: capacity at least 5 req/s "
        "sustained, at 6 req/s offered: the SLO held at every point, so the capacity is "
        "above the range. Best configuration: n=8, capacity at least 5 req/s sustained, at "
        "6 req/s offered.")
    # a server parameter is never the load, whatever its place
    assert load_axis_of(["serve.n"]) is None
    assert load_axis_of(["serve.n", "arrival.max_concurrency"]) == "arrival.max_concurrency"
    assert load_axis_of(["engine.num_blocks"]) == "engine.num_blocks"
    assert load_axis_of(["arrival.tool_wait_scale", "serve.n"]) == "arrival.tool_wait_scale"
    # the plot: one curve per server configuration
    assert [c.label for c in curves(s)] == ["n=1", "n=8"]


def test_no_verdict_stronger_than_its_evidence() -> None:
    """Not monotone: the capacity stays below the first break and says it held again;
    tied configurations are named as tied; a configuration that held over a lower range
    may be better; a delivered rate far below the offered one is warned of, once, with
    no second capacity and no threshold in the sentence."""
    rate = "arrival.rate"
    zigzag = _sweep([rate], [({rate: 1}, 1.0, True), ({rate: 2}, 1.9, False),
                             ({rate: 4}, 3.9, True)])
    assert capacity_sentence(zigzag, rounds_per_unit=1.0) == (
        "At TTFT p90 ≤ 500 ms: capacity 1 req/s sustained, at 1 req/s offered: the highest "
        "load below the first break; it broke at 2 req/s, yet held again at 4 req/s: the "
        "verdict is not monotone in load, so this capacity is uncertain (repeat the points).")
    low_broke = _sweep([rate], [({rate: 1}, 1.0, False), ({rate: 2}, 1.9, True)])
    assert "not monotone in load, no capacity to state" in capacity_sentence(low_broke, 1.0)
    k = "engine.max_num_seqs"
    tied = _sweep([k, rate], [({k: 4, rate: 2}, 1.9, True), ({k: 4, rate: 4}, 3.1, False),
                              ({k: 8, rate: 2}, 1.95, True), ({k: 8, rate: 4}, 3.2, False)])
    assert capacity_sentence(tied, 1.0).endswith(
        "Best configurations, tied (each held up to 2 req/s offered): max_num_seqs=4 "
        "(1.9 req/s sustained), max_num_seqs=8 (1.95 req/s sustained).")
    lower = _sweep([k, rate], [({k: 4, rate: 1}, 1.0, True), ({k: 8, rate: 2}, 1.9, True),
                               ({k: 8, rate: 4}, 3.2, False)])
    assert capacity_sentence(lower, 1.0).endswith(
        "Best configuration: max_num_seqs=8, capacity 1.9 req/s sustained, at 2 req/s "
        "offered. max_num_seqs=4 held at every point of a lower range: its capacity may be "
        "higher.")
    none = _sweep([k, rate], [({k: 1, rate: 2}, 1.0, False), ({k: 2, rate: 2}, 1.0, False)])
    assert capacity_sentence(none, 1.0).endswith(
        "No configuration held the SLO at any load tried.")
    # interrupted before any point finished: no load was tried, so none is said to be
    pending = _sweep([k, rate], [({k: 1, rate: 2}, 1.0, False), ({k: 2, rate: 2}, 1.0, False)])
    for p in pending.manifest.points:
        p["status"] = "pending"
    assert capacity_sentence(pending, 1.0) == (
        "At TTFT p90 ≤ 500 ms, per configuration: max_num_seqs=1: no point finished: no "
        "capacity to state. max_num_seqs=2: no point finished: no capacity to state. No "
        "point finished: no best configuration to name.")
    behind = _sweep([rate], [({rate: 2.6296296296296293}, 1.81, True), ({rate: 4}, 2, False)])
    text = capacity_sentence(behind, 1.0)
    assert text == (
        "At TTFT p90 ≤ 500 ms: capacity 1.81 req/s sustained, at 2.63 req/s offered: the "
        "highest load that held; it broke at 4 req/s. WARNING: the engine delivered 1.81 of "
        "the 2.63 req/s offered (69 %): it fell behind, or the run was too short for its "
        "ramp-up and drain to be negligible.")
    assert "2.6296" not in text and "below 80" not in text and text.count("capacity") == 1


def test_labels_and_probes_are_rounded() -> None:
    import asyncio

    from workbench.sweeps import spec
    from workbench.sweeps.capacity import _search, probe_digits

    assert spec.label({"arrival.rate": 2.6296296296296293, "serve.n": 8}) == "rate=2.63, n=8"
    assert spec.label({"arrival.rate": 2.0, "x": 12345.6, "y": "a"}) == "rate=2, x=12346, y=a"
    assert (probe_digits(0.5), probe_digits(1), probe_digits(10)) == (2, 1, 0)
    seen: list[float] = []

    async def held(values: list[float]) -> list[bool]:
        seen.extend(values)
        return [v <= 2.63 for v in values]

    for width in (1, 2, 3):
        seen.clear()
        res = asyncio.run(_search(held, 1.0, 8.0, 0.05, 2.0, 24, False, width))
        assert res["status"] == "found" and 2.63 - 0.05 <= res["value"] <= 2.63
        assert all(v == round(v, 3) for v in seen), seen


def test_a_capacity_search_runs_per_configuration(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--capacity arrival.rate`` with ``--over engine.max_num_seqs=1,4``: a search for
    each configuration in one sweep, each stated in the headline with its own bracket,
    then the best one; the brackets agree with the grid above (1 breaks at 2 req/s, 4 at
    8)."""
    argv = ["sweep", "--trace", TRACE, "--arrival", "poisson", "--virtual",
            "--over", "engine.max_num_seqs=1,4", "--capacity", "arrival.rate", "--lo", "1",
            "--hi", "8", "--tolerance", "1", "--slo", "ttft_ms:p90<=500", "-o",
            str(tmp_path), "--sweep-id", "c", "--parallel", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    sweep = wb.load_sweep(tmp_path / "c")
    per = sweep.capacity["configurations"]
    assert [c["params"] for c in per] == [{"target.engine.max_num_seqs": 1},
                                          {"target.engine.max_num_seqs": 4}]
    assert [c["status"] for c in per] == ["found", "found"]
    one, four = per
    assert 1 <= one["bracket"][0] < one["bracket"][1] <= 2  # the grid: held at 1, broke at 2
    assert 4 <= four["bracket"][0] < four["bracket"][1] <= 8
    caps = {c.label: c for c in capacities(sweep)}
    assert caps["max_num_seqs=1"].found_by_search and caps["max_num_seqs=4"].found_by_search
    assert out[1].startswith("max_num_seqs=1: capacity ") and "(found by search)" in out[1]
    assert out[2].startswith("max_num_seqs=4: capacity ") and "(found by search)" in out[2]
    assert out[3].startswith("Best configuration: max_num_seqs=4, capacity ")
    searches = [ln for ln in out if ln.startswith("search of arrival.rate at ")]
    assert [ln.split(":")[0] for ln in searches] == [
        "search of arrival.rate at max_num_seqs=1", "search of arrival.rate at max_num_seqs=4"]
