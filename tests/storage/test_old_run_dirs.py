"""Run directories written before the manifest was typed still load and report.

``tests/fixtures/rundirs/`` holds two run directories written by the code of commit
0fc9a55 (before ``workbench.records.RunManifest``): a live replay against the embedded
engine (``run-main-0fc9a55``: warm-up 1, concurrency 2, three sessions of
``tracelab/multi_session_example.csv``) and a virtual one (``sim-main-0fc9a55``).
Their manifests carry no schema version. Loading, summarizing and the report's tables
must give what they gave then (the stored ``summary.json``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.metrics import summarize
from workbench.metrics.files import load_frames
from workbench.report.compare import load_runs
from workbench.report.headline import run_headline
from workbench.report.tables import client_caption, config_table, run_table, summary_table
from workbench.storage.rundir import load, read_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rundirs"
OLD = sorted(p.name for p in FIXTURES.iterdir())


@pytest.fixture(params=OLD)
def old_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    d = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, d)
    return d


def test_the_fixtures_are_pre_schema_manifests() -> None:
    assert OLD == ["run-main-0fc9a55", "sim-main-0fc9a55"]
    for name in OLD:
        manifest = read_json(FIXTURES / name / "manifest.json")
        assert "schema" not in manifest and manifest["status"] == "completed"


def test_an_old_run_dir_loads_with_its_records_and_manifest(old_dir: Path) -> None:
    stored = read_json(old_dir / "manifest.json")
    result = load(old_dir)
    assert result.run_id == old_dir.name and not result.cancelled
    assert len([r for r in result.records if not r.warmup]) == stored["plan"]["rounds"]
    assert result.manifest["ideal_prefix_hit_rate"] == stored["ideal_prefix_hit_rate"]
    assert result.manifest["config"] == stored["config"]
    assert result.lifecycle and result.metrics_timeline


def test_an_old_run_dir_summarizes_as_it_did(old_dir: Path) -> None:
    stored = read_json(old_dir / "summary.json")
    again = summarize(load(old_dir))
    for key in ("requests", "ok", "ttft_ms", "tpot_ms", "actual_prefix_hit_rate",
                "planned_prefix_hit_rate", "ideal_prefix_hit_rate", "run_status"):
        assert again.get(key) == stored.get(key), key


def test_an_old_run_dir_reports(old_dir: Path) -> None:
    frames = load_frames(old_dir)
    assert len(frames["records"]) == len(load(old_dir).records)
    summary = read_json(old_dir / "summary.json")
    manifest = load(old_dir).manifest
    line = run_headline(summary, manifest)
    assert f"{summary['ok']}/{summary['requests']} ok" in line
    assert not config_table(manifest).empty and not summary_table(summary).empty
    (run,) = load_runs([old_dir]).values()
    assert run.run_id == old_dir.name
    assert not run_table(run).empty and not client_caption(run, manifest) == ""
