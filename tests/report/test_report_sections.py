"""The replay report's sections over real runs (embedded engine), and the repo's first-contact
hygiene: what a new user's first commands leave behind and print."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from workbench.commands.demo import MOONCAKE_EXAMPLE, WEKA_EXAMPLE
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.metrics import summarize
from workbench.report.sections import TABLE_NAMES, RunReport
from workbench.traces.load import load_trace

ROOT = Path(__file__).resolve().parents[2]


async def test_the_error_table_explains_an_idle_timeout_with_a_sample(tmp_path: Path) -> None:
    result = await run_async({
        "trace": {"path": str(data_path("tracelab/multi_session_example.csv")), "max_items": 2},
        "arrival": {"stream_idle_timeout_s": 0.3, "stop_session_on_error": False},
        "target": {"url": "sim", "engine": {"speedup": 50.0, "stall_after_tokens": 2,
                                            "stall_s": 5.0}},
        "out_dir": str(tmp_path),
    })
    report = RunReport(result)
    errors = report.table("errors")
    frame = errors.frame
    assert int(frame["requests"].sum()) == summarize(result)["errors"] > 0
    (klass,) = frame.index  # one class: every request stalled the same way
    # the class names the idle timeout, the sample what it adds (how far the stream got)
    assert "idle" in klass and frame.loc[klass, "sample message"] == "after 2 token events"
    assert errors.caption and "did not end ok, by class" in errors.caption
    for name in TABLE_NAMES:  # every section draws over a run with errors
        assert len(report.table(name).html()) > 0


async def test_the_error_table_never_repeats_the_class_in_its_sample(tmp_path: Path) -> None:
    """A stream the server drops: the class is ``server disconnected mid-stream``, and the
    sample says only what it adds (how far the stream got, what the socket said), as the
    headline's part of it does (``deviations.beyond_class``)."""
    from workbench.report.headline import run_headline

    result = await run_async({
        "trace": {"path": str(data_path("tracelab/multi_session_example.csv")), "max_items": 2},
        "arrival": {"stop_session_on_error": False},
        "target": {"url": "sim", "engine": {"speedup": 50.0, "disconnect_after_tokens": 3}},
        "out_dir": str(tmp_path),
    })
    frame = RunReport(result).table("errors").frame
    klass = "error: server disconnected mid-stream"
    assert list(frame.index) == [klass]
    said = str(frame.loc[klass, "sample message"])
    assert said.startswith("after ") and "disconnected mid-stream" not in said
    headline = run_headline(summarize(result), result.manifest)
    assert f"server disconnected mid-stream ×{frame.loc[klass, 'requests']} ({said}" in headline


def test_the_readmes_mooncake_example_is_sized_for_the_default_engine() -> None:
    """``--max-items 120 --rate 1`` in virtual time (the same engine, deterministic):
    nothing near the 60 s stream idle timeout, every request ok."""
    args = dict(zip(MOONCAKE_EXAMPLE[::2], MOONCAKE_EXAMPLE[1::2], strict=True))
    s = summarize(simulate({
        "trace": {"path": str(data_path(args["--trace"])), "max_items": int(args["--max-items"])},
        "arrival": {"rate": float(args["--rate"])},
    }))
    assert s["requests"] == s["ok"] == 120
    assert s["ttft_ms"]["p99"] < 30_000  # well inside the idle timeout
    readme = (ROOT / "README.md").read_text()
    assert " ".join(("workbench demo", *MOONCAKE_EXAMPLE)) in " ".join(readme.split())


def test_the_readmes_captured_agent_example_runs_whole() -> None:
    """``WEKA_EXAMPLE`` in virtual time: both conversations and their 6 sub-agents, every
    request ok, the think times capped as it says, and the README gives it verbatim."""
    args = dict(zip(WEKA_EXAMPLE[::2], WEKA_EXAMPLE[1::2], strict=True))
    key, _, value = args["--trace-option"].partition("=")
    res = simulate({
        "trace": {"path": str(data_path(args["--trace"])), "max_items": int(args["--max-items"]),
                  "options": {key: float(value)}},
        "target": {"url": "sim", "engine": {"speedup": float(args["--speedup"])}},
    })
    s = summarize(res)
    assert s["requests"] == s["ok"] == 85
    assert len({r.session_id for r in res.records}) == 8  # 2 conversations, 6 sub-agents
    assert max(r.tool_wait_after_ms for u in load_trace(
        str(data_path(args["--trace"])), **{key: float(value)}).units[:8]
        for r in u.rounds) <= 1000.0
    readme = (ROOT / "README.md").read_text()
    assert " ".join(("workbench demo", *WEKA_EXAMPLE)) in " ".join(readme.split())


def test_license_is_an_spdx_string_so_setuptools_does_not_warn() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])


def test_make_lab_allows_root_and_binds_loopback() -> None:
    out = subprocess.run(["make", "-n", "-W", "pyproject.toml", "lab"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    lab = next(line for line in out.splitlines() if "jupyter lab" in line)
    assert "--ip=127.0.0.1" in lab and "--allow-root" in lab


@pytest.mark.parametrize("path", ["workbench/notebooks/reports/run/records.jsonl",
                                  "workbench/notebooks/sweeps/s/sweep.json",
                                  "workbench/notebooks/.ipynb_checkpoints/replay-checkpoint.ipynb"])
def test_what_the_notebooks_leave_behind_is_ignored(path: str) -> None:
    proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert proc.returncode == 0, f"{path} would show as untracked"


@pytest.mark.slow
def test_demo_shows_progress_while_it_replays_and_renders_and_nothing_else(
    tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "demo", "--trace",
         "tracelab/multi_session_example.csv", "--max-items", "2", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.replace("\r", "\n")
    assert "replay: 100%" in err and "5/5" in err  # the replay's bar
    assert "Executing: 100%" in err  # the bar over the notebook's cells
    lines = {line.split(":")[0] for line in err.splitlines() if line.strip()}
    assert lines <= {"replaying tracelab/multi_session_example.csv against the embedded "
                     "engine (its own process)…", "replay", "Executing",
                     f"rendering the report of {tmp_path}/demo…"}, err
    assert (tmp_path / "demo" / "report.html").exists()


def test_editable_install_uses_a_plain_pth_so_setuptools_stays_quiet() -> None:
    """With the project root as the package dir, setuptools' editable install writes a
    plain .pth instead of a meta-path finder and its 'Editable installation' notice."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["package-dir"] == {"": "."}


def test_html_headers_are_words_and_the_csv_keeps_the_keys() -> None:
    """Column headers a reader sees are words (``TTFT p50 (ms)``), the exported frame
    (CSV, JSON) keeps the keys a script reads (``ttft_ms_p50``)."""
    import pandas as pd

    from workbench.report.tables import header_text, show

    t = show(pd.DataFrame({"ttft_ms_p50": [1.0], "waiting_at_arrival_mean": [2.0],
                           "hit_rate": [0.5], "requests": [3]}, index=["w0"]), "workers")
    page = t.html()
    for words in ("TTFT p50 (ms)", "waiting at arrival (mean)", "hit rate", "requests"):
        assert f">{words}</th>" in page
    assert "ttft_ms_p50" not in page and "waiting_at_arrival" not in page
    assert list(t.frame.columns) == ["ttft_ms_p50", "waiting_at_arrival_mean", "hit_rate",
                                     "requests"]
    assert t.payload()["columns"][0] == "ttft_ms_p50"
    assert header_text("requests_per_worker_max") == "requests per worker (max)"
