"""The bundled notebooks: thin by construction, and executed end to end through papermill.

Each notebook runs on a real kernel with tiny parameters (bundled traces, the
embedded engine sped up) into ``tmp_path``; the checks read what a reader
reads — the HTML — and compare its numbers with the run's ``summary.json``.
"""

from __future__ import annotations

import ast
import html as html_mod
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest

from workbench.report.render import bundled_notebooks, notebook_path, render_report

pytestmark = pytest.mark.slow
SECTIONS = ("TTFT / TPOT", "Prefix-cache hits")


def text_of(page: str) -> str:
    return html_mod.unescape(re.sub(r"<[^>]+>", "", page))


def headings(page: str) -> list[str]:
    found = re.findall(r"<h[1-3][^>]*>(.*?)</h[1-3]>", page, re.S)
    return [text_of(h).rstrip("¶").strip() for h in found]


def code_cells(name: str) -> list[Any]:
    nb = nbformat.read(notebook_path(name), as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


# -- thin ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["replay", "compare", "trace_explorer", "sweep", "plan"])
def test_notebook_cells_define_nothing(name: str) -> None:
    for cell in code_cells(name):
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(cell.source, f"<{name}>", "exec", flags=flags)
        banned = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
        found = [type(n).__name__ for n in ast.walk(tree) if isinstance(n, banned)]
        assert not found, f"{name}: {found} in cell:\n{cell.source}"


@pytest.mark.parametrize("name", ["replay", "compare", "trace_explorer", "sweep", "plan"])
def test_one_parameters_cell_of_literals(name: str) -> None:
    tagged = [c for c in code_cells(name) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for node in ast.parse(tagged[0].source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1
        ast.literal_eval(node.value)  # raises if not a literal


def test_bundled_notebooks_are_the_three() -> None:
    assert bundled_notebooks() == [
        "compare", "parity", "plan", "replay", "sweep", "trace_explorer"]


# -- executed -----------------------------------------------------------------------------
TINY = {"max_items": 2, "engine": {"speedup": 50.0}}


def fmt(x: float) -> str:
    return f"{x:.3f}"


def assert_shows_summary(page: str, summary: dict[str, Any]) -> None:
    """The HTML shows the run's percentiles and hit rates as summary.json has them."""
    text = text_of(page)
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for stat in ("p50", "p90", "p99", "mean"):
            assert fmt(summary[metric][stat]) in text, f"{metric} {stat} not shown"
    for key in ("actual_prefix_hit_rate", "planned_prefix_hit_rate"):
        assert fmt(summary[key]) in text, f"{key} not shown"


@pytest.fixture(scope="module")
def replay_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports")
    return render_report("replay", {**TINY, "run_id": "nb-replay"}, out)


def test_replay_report_shows_the_sections_and_the_run_summary(replay_report: Path) -> None:
    page = replay_report.read_text()
    for section in SECTIONS:
        assert section in headings(page), f"section {section!r} missing"
    run_dir = replay_report.parent  # the run is saved beside its report
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"] == 5 and summary["ok"] == 5
    assert_shows_summary(page, summary)
    figures = sorted(p.name for p in (run_dir / "figures").iterdir())
    assert figures == ["01-cdf.png", "02-over_time.png", "03-ttft_vs_uncached.png",
                       "04-prefix_hits.png", "05-hit_by_round.png", "06-ttft_by_round.png",
                       "07-sessions.png", "08-timeline.png"]
    latency = (run_dir / "tables" / "latency.csv").read_text().splitlines()
    assert latency[1].startswith("TTFT (ms),")  # as the compare tables name a metric
    # the client's self-measurement, with its verdict, as summary.json has it
    client = summary["client"]
    rows = pd.read_csv(run_dir / "tables" / "client.csv", index_col=0)["value"]
    assert rows["in flight, peak"] == client["in_flight"]["peak"]
    assert rows["release lag p99 (ms)"] == pytest.approx(client["release_lag_ms"]["p99"])
    verdict = "WARNING: " if client["client_bottleneck"] else "kept up"
    assert verdict in text_of(page)
    assert "client CPU" in text_of(page) and "(bound 90%)" in text_of(page)  # its evidence


def test_replay_report_says_what_was_run_and_what_failed(replay_report: Path) -> None:
    from workbench.traces.load import source_sha256

    run_dir = replay_report.parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = pd.read_csv(run_dir / "tables" / "config.csv", index_col=0)["value"]
    assert config["1 format"] == f"{manifest['trace']['format']} (detected)"
    assert config["2 context policy"] == manifest["policy"] == "trace-reported"
    assert config["3 arrival"] == "trace-timed" and config["4 backend"] == "openai"
    assert config["trace sha256"] == source_sha256(manifest["trace"]["path"])
    assert config["target engine runs in"] == "its own process"
    assert config["target engine speedup"] == "50"  # 4 significant digits
    coeffs = manifest["target"]["engine"]["prefill_coeffs"]
    assert config["target engine prefill_coeffs"] == "[" + ", ".join(
        f"{x:.4g}" for x in coeffs) + "]"  # the cost model the engine ran
    page = text_of(replay_report.read_text())
    assert "What was run" in headings(replay_report.read_text())
    assert "Errors: none (all 5 requests ended ok)" in page


def test_the_html_report_gives_every_image_its_own_alt_text(replay_report: Path) -> None:
    page = replay_report.read_text()
    alts = re.findall(r'<img alt="([^"]*)"', page)
    assert len(alts) == 8 and len(re.findall(r"<img ", page)) == 8
    assert all(a and "No description" not in a for a in alts)
    assert any(html_mod.unescape(a).startswith("Latency CDFs of ok requests") for a in alts)


def test_replay_parameters_build_the_config_the_panel_builds(replay_report: Path) -> None:
    from test_widgets import config_from_params, notebook_params

    run_dir = replay_report.parent
    executed = nbformat.read(run_dir / "replay.ipynb", as_version=4)
    injected = executed.metadata.papermill.parameters
    assert injected["max_items"] == 2 and injected["interactive"] is False
    manifest = json.loads((run_dir / "manifest.json").read_text())
    params = notebook_params(**{k: v for k, v in injected.items() if k in notebook_params()})
    expected = config_from_params(params).to_dict()
    assert manifest["config"] == json.loads(json.dumps(expected))


def test_report_cli_rerenders_a_stored_run_without_replaying(
    replay_report: Path, tmp_path: Path
) -> None:
    from workbench.cli import main

    run_dir = replay_report.parent
    records_before = (run_dir / "records.jsonl").read_bytes()
    assert main(["report", str(run_dir), "-o", str(tmp_path)]) == 0
    page = (tmp_path / "nb-replay" / "report.html").read_text()
    assert_shows_summary(page, json.loads((run_dir / "summary.json").read_text()))
    assert (run_dir / "records.jsonl").read_bytes() == records_before
    assert 'href="nb-replay/report.html"' in (tmp_path / "index.html").read_text()


def test_compare_notebook_as_shipped_compares_two_runs_it_makes(tmp_path: Path) -> None:
    page = render_report("compare", {"n_boot": 100}, tmp_path).read_text()
    text = text_of(page)
    for label in ("KV cache 8192 blocks", "KV cache 65536 blocks"):
        assert label in text
    assert "target.engine.num_blocks" in text and "Traceback" not in text
    assert "Errors" in headings(page) and "every request ended ok" in text
    small, large = (json.loads((tmp_path / f"compare-example-kv{n}" / "summary.json").read_text())
                    for n in (8192, 65536))
    assert small["actual_prefix_hit_rate"] < large["actual_prefix_hit_rate"]  # a real difference
    assert fmt(large["actual_prefix_hit_rate"]) in text


def test_replay_notebook_run_all_in_interactive_mode_never_raises(tmp_path: Path) -> None:
    """What *Run All* does in JupyterLab with the shipped ``interactive = True``: the
    panel is built, nothing has run yet, and every section says to press Run."""
    import papermill

    out = tmp_path / "replay.ipynb"
    papermill.execute_notebook(str(notebook_path("replay")), str(out), kernel_name="python3",
                               parameters={"out_dir": str(tmp_path)}, progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    assert nb.metadata.papermill.parameters == {"out_dir": str(tmp_path)}  # interactive as shipped
    texts = [o.get("data", {}).get("text/plain", "") for c in nb.cells if c.cell_type == "code"
             for o in c.get("outputs", [])]
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    widgets = [o for c in nb.cells for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) >= 15  # the panel and one live section per table and figure
    assert not list(tmp_path.glob("*/records.jsonl"))  # nothing ran before Run is pressed
    assert texts  # text fallbacks of the widgets
    assert "interactive = True" in "".join(c.source for c in code_cells("replay"))


def test_rendering_prints_no_transport_or_alt_text_warnings(
    replay_report: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    run_dir = replay_report.parent
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "workbench", "report", str(run_dir), "-o",
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for noise in ("without encryption", "Alternative text is missing", "Traceback",
                  "KeyboardInterrupt caught"):
        assert noise not in proc.stderr


def test_compare_report_puts_stored_runs_side_by_side(tmp_path: Path) -> None:
    import numpy as np

    from workbench import RunConfig
    from workbench.data import path as data_path
    from workbench.executors.virtual import simulate
    from workbench.metrics import to_frame
    from workbench.storage.rundir import load

    dirs = []
    for blocks in (80, 65536):
        cfg = RunConfig.from_dict({
            "trace": {"path": str(data_path("tracelab/multi_session_example.csv"))},
            "target": {"url": "sim", "engine": {"num_blocks": blocks}},
            "out_dir": str(tmp_path / "runs"), "run_id": f"blocks{blocks}",
        })
        dirs.append(simulate(cfg).run_dir)
    page = render_report("compare", {"run_dirs": dirs, "n_boot": 200},
                         tmp_path / "out").read_text()
    for section in (*SECTIONS, "Configuration differences"):
        assert section in headings(page)
    text = text_of(page)
    for d in dirs:
        summary = json.loads((Path(d) / "summary.json").read_text())
        assert fmt(summary["ttft_ms"]["p50"]) in text
        assert fmt(summary["actual_prefix_hit_rate"]) in text
        ttft = to_frame(load(d))["ttft_ms"].dropna()
        assert fmt(float(np.percentile(ttft, 99))) in text
    assert "target.engine.num_blocks" in text


def test_replay_and_trace_explorer_notebooks_on_captured_conversations(tmp_path: Path) -> None:
    """The bundled weka sample through both notebooks: the first conversation (4
    sub-agents) replayed against the embedded engine, think times capped at 50 ms."""
    params = {"bundled_trace": "weka/cc_traces_sample.jsonl", "max_items": 1,
              "trace_options": {"max_delay_s": 0.05}, "engine": {"speedup": 50.0},
              "run_id": "nb-weka"}
    page = render_report("replay", params, tmp_path)
    summary = json.loads((page.parent / "summary.json").read_text())
    assert summary["requests"] == summary["ok"] == 53  # 9 rounds and 4 sub-agents' 44
    manifest = json.loads((page.parent / "manifest.json").read_text())
    assert manifest["trace"]["format"] == "weka"
    assert manifest["trace"]["reader"]["max_delay_s"] == 0.05
    config = pd.read_csv(page.parent / "tables" / "config.csv", index_col=0)["value"]
    assert config["1 reader timing"] == "think-only"  # the default, said where it ran
    assert config["1 reader max_delay_s"] == "0.05"
    agents = pd.read_csv(page.parent / "tables" / "agents.csv", index_col=0)
    assert agents.loc["agents: the root and its sub-agents", "max"] == 5  # 0277 and its 4
    assert_shows_summary(page.read_text(), summary)
    explorer = render_report("trace_explorer", {"bundled_trace": "weka/cc_traces_sample.jsonl",
                                                "max_items": 2}, tmp_path / "x").read_text()
    assert "weka format" in text_of(explorer)


def test_trace_explorer_report_with_a_what_if(tmp_path: Path) -> None:
    from workbench import RunConfig, summarize
    from workbench.data import path as data_path
    from workbench.executors.virtual import simulate

    params = {"bundled_trace": "tracelab/multi_session_example.csv", "max_items": 3,
              "num_blocks": 64, "block_size": 16}
    page = render_report("trace_explorer", params, tmp_path).read_text()
    assert "Ideal hit rate vs cache capacity" in headings(page)
    cfg = RunConfig.from_dict({
        "trace": {"path": str(data_path(params["bundled_trace"])), "max_items": 3},
        "target": {"url": "sim", "engine": {"num_blocks": 64, "block_size": 16}},
    })
    summary = summarize(simulate(cfg))  # virtual time: the notebook saw the same numbers
    assert_shows_summary(page, summary)
    report_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    figures = sorted(p.name for p in (report_dir / "figures").iterdir())
    assert figures[:4] == ["01-lengths.png", "02-tool_waits.png", "03-sessions_over_time.png",
                           "04-hit_vs_capacity.png"]
