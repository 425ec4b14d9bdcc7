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
from workbench.metrics.files import load_frames, save
from workbench.metrics.summary import summarize_stored
from workbench.records import RunManifest, RunResult
from workbench.report.compare import load_runs
from workbench.report.headline import run_headline
from workbench.report.tables import client_caption, config_table, run_table, summary_table
from workbench.storage.rundir import load, read_json, read_manifest

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
    assert result.manifest.ideal_prefix_hit_rate == stored["ideal_prefix_hit_rate"]
    assert result.manifest.config == stored["config"]
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
    assert not run_table(run).empty and client_caption(run, manifest) != ""


def test_an_old_manifest_reads_as_schema_1_with_every_key_a_field() -> None:
    for name in OLD:
        stored = read_json(FIXTURES / name / "manifest.json")
        typed = RunManifest.from_dict(stored)
        assert typed.schema == 1 and typed.extra == {}  # every fact it holds has a field
        assert typed.run_id == name and typed.status == "completed"
        assert typed.ideal_prefix_hit_rate == stored["ideal_prefix_hit_rate"]
        # written back: the same facts (a None is left out), now with its schema
        again = typed.to_dict()
        assert again.pop("schema") == 1
        assert again == {k: v for k, v in stored.items()
                         if v is not None or k in RunManifest.ALWAYS}


def test_a_manifest_keeps_keys_it_does_not_know_and_round_trips() -> None:
    d = {"run_id": "r", "status": "completed", "sweep_point": {"x": 1}, "schema": 7,
         "block_size": 16}
    typed = RunManifest.from_dict(d)
    assert typed.extra == {"sweep_point": {"x": 1}} and typed.block_size == 16
    assert RunManifest.from_dict(typed.to_dict()) == typed
    assert typed.to_dict()["schema"] == 7


def test_a_new_run_writes_the_current_schema(tmp_path: Path) -> None:
    from workbench.executors.virtual import simulate
    from workbench.records import MANIFEST_SCHEMA

    cfg = {"trace": str(FIXTURES.parent / "mooncake_sessions.jsonl"), "out_dir": str(tmp_path),
           "run_id": "new", "target": {"url": "sim", "engine": {"num_blocks": 512}}}
    simulate(cfg)
    stored = read_json(tmp_path / "new" / "manifest.json")
    assert stored["schema"] == MANIFEST_SCHEMA
    typed = load(tmp_path / "new").manifest
    assert typed.extra == {} and typed.mode == "virtual" and typed.to_dict() == stored
    # a result's manifest is the typed one; a loaded run saved elsewhere keeps its
    # manifest (with cancelled, which save adds), and saved once more, its bytes
    result = simulate({**cfg, "out_dir": None, "run_id": "mem"})
    assert isinstance(result.manifest, RunManifest) and result.manifest.status == "completed"
    save(load(tmp_path / "new"), tmp_path / "again")
    assert read_json(tmp_path / "again" / "manifest.json") == {**stored, "cancelled": False}
    save(load(tmp_path / "again"), tmp_path / "thrice")
    assert (tmp_path / "thrice" / "manifest.json").read_bytes() == (
        tmp_path / "again" / "manifest.json").read_bytes()


def test_a_result_without_a_run_has_an_empty_manifest_with_no_status(tmp_path: Path) -> None:
    bare = RunResult("r", [])
    assert bare.manifest.status is None and summarize(bare)["run_status"] is None
    assert read_manifest(tmp_path) == RunManifest.from_dict({})  # no file: nothing in it
    assert read_manifest(tmp_path).status is None
    (tmp_path / "manifest.json").write_text("[1, 2]")  # not an object: read as none
    assert read_manifest(tmp_path).status is None


@pytest.mark.parametrize("text, rule", [("[1, 2]", "a manifest is a JSON object, not list"),
                                        ('{"status": "compl', "not a readable manifest")])
def test_a_damaged_manifest_is_an_error_where_a_runs_figures_are_read(
    old_dir: Path, text: str, rule: str
) -> None:
    """``load`` and the stored summary read a run's manifest strictly: a damaged one names
    its file and the rule, never passes for a run with no SLO and no status; the readers
    that only show a note (``read_manifest`` as is) still read it as none."""
    (old_dir / "manifest.json").write_text(text)
    for read in (load, summarize_stored, lambda d: read_manifest(d, strict=True)):
        with pytest.raises(ValueError, match=rule) as err:
            read(old_dir)
        assert str(old_dir / "manifest.json") in str(err.value)
    assert read_manifest(old_dir).status is None


def test_an_old_run_dirs_manifest_reads_the_same_through_every_reader(old_dir: Path) -> None:
    typed = read_manifest(old_dir)
    assert typed == load(old_dir).manifest and typed.schema == 1
    assert typed.section("arrival") == read_json(old_dir / "manifest.json")["config"]["arrival"]
    assert typed.section("no such section") == {}


def test_a_copy_of_a_manifest_does_not_follow_later_writes() -> None:
    m = RunManifest("r", extra={"sweep_point": 1})
    c = m.copy()
    m.status, m.extra["late"] = "completed", True
    assert c.status == "running" and c.extra == {"sweep_point": 1}
