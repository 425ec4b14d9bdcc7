"""The throughput–interactivity Pareto plot and the best configuration under the SLO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.report.pareto import (
    PER_GPU,
    PER_INSTANCE,
    PER_USER,
    best_row,
    best_sentence,
    frontier,
    pareto_frame,
)

TRACE = "synthetic:random,requests=24,input=fixed:256,output=fixed:32,rate=40,seed=1"


def test_frontier_by_hand() -> None:
    x = np.array([1.0, 2.0, 3.0, 2.0, 1.0, np.nan])
    y = np.array([9.0, 7.0, 2.0, 5.0, 9.0, 10.0])
    # (1,9) twice: neither beats the other; (2,5) is beaten by (2,7); NaN never on it
    assert frontier(x, y).tolist() == [True, True, True, False, True, False]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> wb.Sweep:
    out = tmp_path_factory.mktemp("pareto")
    return wb.sweep({"trace": TRACE}, {"arrival.max_concurrency": [1, 4, 16]},
                    slo="tpot_ms:p90<=1000", virtual=True, out_dir=str(out), sweep_id="p",
                    gpus=2)


def test_pareto_frame_is_the_definition(sweep: wb.Sweep) -> None:
    df = pareto_frame(sweep)
    frame = sweep.frame.set_index("point")
    for _, row in df.iterrows():
        point = frame.loc[row["point"]]
        assert row[PER_USER] == pytest.approx(1000.0 / point["tpot_ms_mean"])
        assert row[PER_INSTANCE] == pytest.approx(point["output_token_throughput_tps"])
        assert row[PER_GPU] == pytest.approx(row[PER_INSTANCE] / 2)  # the sweep's --gpus
    assert df[PER_INSTANCE].is_monotonic_increasing
    # more concurrency, more throughput per instance, less per user: all on the frontier
    assert df["on_frontier"].all()
    assert pareto_frame(sweep, gpus=4)[PER_GPU].tolist() == pytest.approx(
        (df[PER_INSTANCE] / 4).tolist())


def test_best_under_the_slo_is_named(sweep: wb.Sweep) -> None:
    row = best_row(sweep)
    df = pareto_frame(sweep)
    held = df[df["slo_held"] == True]  # noqa: E712
    assert row["label"] == held.loc[held[PER_INSTANCE].idxmax(), "label"]
    text = best_sentence(sweep)
    assert text.startswith("Highest throughput under TPOT p90 ≤ ")  # the headline's words
    assert row["label"] in text and "per GPU of 2" in text


def test_no_configuration_held(tmp_path: Path) -> None:
    s = wb.sweep({"trace": TRACE}, {"arrival.max_concurrency": [2, 8]},
                 slo="ttft_ms:p90<=0.001", virtual=True, out_dir=str(tmp_path))
    assert best_row(s) is None
    assert best_sentence(s).startswith("No point held TTFT p90 ≤ 0.001 ms.")


def test_plot_draws_points_frontier_labels(sweep: wb.Sweep) -> None:
    fig = wb.sweep_plot(sweep, "pareto")
    (ax,) = fig.axes
    texts = {t.get_text() for t in ax.texts}
    assert {p["label"] for p in sweep.points} <= texts
    frontier_line = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto frontier"]
    assert len(frontier_line) == 1 and len(frontier_line[0].get_xdata()) == 3
    assert ax.get_xlabel() == "output tokens/s per GPU"
    assert any("Highest throughput" in t.get_text() for t in fig.texts)


def test_sweep_report_shows_pareto_and_sentence(sweep: wb.Sweep, tmp_path: Path) -> None:
    from workbench.cli import main

    assert main(["report", str(sweep.sweep_dir), "-o", str(tmp_path)]) == 0
    (html,) = tmp_path.glob("*/report.html")
    text = html.read_text()
    assert "Throughput per instance against interactivity per user" in text
    assert best_sentence(sweep).split(" — ")[0].replace(">", "&gt;").replace("<", "&lt;") in text
