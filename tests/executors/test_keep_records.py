"""``executor.keep_records``: true, false or "auto" (default, by the plan's size).

Auto keeps records in memory for small plans and leaves larger ones on disk only;
such a run must still give the same summary, records on disk and frames as a
kept one, read back from the run directory. The threshold is monkeypatched down
rather than replaying 10,000 requests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

import workbench.config as config_mod
from workbench.config import KEEP_RECORDS_AUTO_MAX, RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.metrics import scan, summarize, to_frame
from workbench.metrics.files import save
from workbench.records import RunResult
from workbench.report.plots import plot
from workbench.sim.server import serve_sim
from workbench.storage.rundir import load, read_jsonl

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
N_ROUNDS = len(Path(SESSIONS).read_text().splitlines()) - 1
COUNTS = ("requests", "ok", "errors", "skipped", "cancelled")


def _cfg(**over: Any) -> RunConfig:
    d: dict[str, Any] = {
        "trace": SESSIONS, "arrival": {"mode": "saturated", "tool_wait_scale": 0.01},
    }  # fmt: skip
    d.update(over)
    return RunConfig.from_dict(d)


# ----------------------------------------------------------------- config
@pytest.mark.parametrize("value", [True, False, "auto"])
def test_keep_records_accepts_true_false_auto(value: Any) -> None:
    cfg = _cfg(executor={"keep_records": value})
    assert cfg.executor.keep_records == value
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_keep_records_defaults_to_auto_and_reads_from_yaml(tmp_path: Path) -> None:
    assert _cfg().executor.keep_records == "auto"
    (tmp_path / "c.yaml").write_text("trace: x.csv\nexecutor:\n  keep_records: auto\n")
    (tmp_path / "f.yaml").write_text("trace: x.csv\nexecutor:\n  keep_records: false\n")
    assert RunConfig.from_file(tmp_path / "c.yaml").executor.keep_records == "auto"
    assert RunConfig.from_file(tmp_path / "f.yaml").executor.keep_records is False


@pytest.mark.parametrize("value", ["yes", "true", "Auto", 1, 0, None, 20000])
def test_keep_records_rejects_other_values_naming_the_field(value: Any) -> None:
    expected = r"executor\.keep_records: expected true or false or 'auto', got "
    with pytest.raises(ConfigError, match=expected):
        _cfg(executor={"keep_records": value})


def test_keeps_records_decides_by_size_out_dir_and_setting(monkeypatch) -> None:
    limit = KEEP_RECORDS_AUTO_MAX
    assert _cfg(out_dir="runs").keeps_records(limit)[0]
    kept, why = _cfg(out_dir="runs").keeps_records(limit + 1)
    assert not kept and "KEEP_RECORDS_AUTO_MAX" in why and str(limit + 1) in why
    assert _cfg().keeps_records(10 * limit)[0]  # no out_dir: nowhere else to live
    assert _cfg(out_dir="runs", executor={"keep_records": True}).keeps_records(10 * limit)[0]
    assert not _cfg(out_dir="runs", executor={"keep_records": False}).keeps_records(1)[0]
    looping = {"mode": "closed-loop", "max_concurrency": 2, "duration_s": 5.0}
    assert not _cfg(out_dir="runs", arrival=looping).keeps_records(1)[0]  # count unknown
    monkeypatch.setattr(config_mod, "KEEP_RECORDS_AUTO_MAX", 3)
    assert not _cfg(out_dir="runs").keeps_records(4)[0]


# ----------------------------------------------------------------- live runs (loopback)
async def _replay(cfg: RunConfig) -> RunResult:
    async with serve_sim(speedup=50.0) as sim:
        async with asyncio.timeout(120):
            return await run_async(cfg.replace(**{"target.url": sim.base_url}))


def _summary(result: RunResult) -> dict[str, Any]:
    return orjson.loads((Path(result.run_dir or "") / "summary.json").read_bytes())


async def test_auto_keeps_records_of_a_small_run(tmp_path: Path) -> None:
    result = await _replay(_cfg(out_dir=str(tmp_path)))
    assert len(result.records) == N_ROUNDS and result.lifecycle
    assert result.manifest.records_kept is True and not result.records_on_disk
    manifest = orjson.loads((Path(result.run_dir or "") / "manifest.json").read_bytes())
    assert manifest["records_kept"] is True and "'auto'" in manifest["records_kept_reason"]


@pytest.fixture
async def kept_and_on_disk(tmp_path: Path, monkeypatch) -> tuple[RunResult, RunResult]:
    """The same small run twice: records kept (explicit true), and auto above a lowered limit."""
    kept = await _replay(_cfg(out_dir=str(tmp_path / "kept"), executor={"keep_records": True}))
    monkeypatch.setattr(config_mod, "KEEP_RECORDS_AUTO_MAX", N_ROUNDS - 1)
    on_disk = await _replay(_cfg(out_dir=str(tmp_path / "auto")))
    return kept, on_disk


async def test_auto_above_the_limit_leaves_records_on_disk_complete(
    kept_and_on_disk: tuple[RunResult, RunResult],
) -> None:
    kept, result = kept_and_on_disk
    assert result.records == [] and result.lifecycle == [] and result.records_on_disk
    assert result.manifest.records_kept is False
    assert f"{N_ROUNDS} requests > {N_ROUNDS - 1}" in result.manifest.records_kept_reason
    run_dir = Path(result.run_dir or "")
    on_disk = read_jsonl(run_dir / "records.jsonl")
    assert len(on_disk) == len(kept.records) == N_ROUNDS
    assert all(d["status"] == "ok" for d in on_disk)
    key = lambda d: (d["unit_ordinal"], d["round_idx"], d["planned_input_tokens"])  # noqa: E731
    assert sorted(map(key, on_disk)) == sorted(key(r.to_dict()) for r in kept.records)
    assert len(read_jsonl(run_dir / "lifecycle.jsonl")) == len(kept.lifecycle)
    s, k = _summary(result), _summary(kept)
    assert {c: s[c] for c in COUNTS} == {c: k[c] for c in COUNTS} == {
        "requests": N_ROUNDS, "ok": N_ROUNDS, "errors": 0, "skipped": 0, "cancelled": 0}
    assert s["ttft_ms"]["count"] == k["ttft_ms"]["count"] == N_ROUNDS
    assert s["planned_prefix_hit_rate"] == pytest.approx(k["planned_prefix_hit_rate"])
    assert s["client"]["release_lag_ms"]["count"] == N_ROUNDS


async def test_records_not_kept_are_read_back_by_every_consumer(
    kept_and_on_disk: tuple[RunResult, RunResult], tmp_path: Path
) -> None:
    _, result = kept_and_on_disk
    run_dir = Path(result.run_dir or "")
    records_before = (run_dir / "records.jsonl").read_bytes()
    assert len(to_frame(result)) == N_ROUNDS
    assert summarize(result)["requests"] == _summary(result)["requests"] == N_ROUNDS
    # the replay notebook's cells
    assert scan.report_summary(result)["ok"] == N_ROUNDS
    assert scan.report_by_round(result).set_index("group").loc["first", "requests"] > 0
    assert scan.report_by_band(result)["requests"].sum() == N_ROUNDS
    for kind in ("cdf", "prefix_hits", "hit_by_round", "ttft_by_round", "timeline"):
        assert plot(result, kind).axes
    assert len(load(run_dir).records) == N_ROUNDS
    # saving in place must not overwrite the records it does not hold; elsewhere copies them
    save(result, run_dir)
    assert (run_dir / "records.jsonl").read_bytes() == records_before
    copy = save(result, tmp_path / "copy")
    assert (copy / "records.jsonl").read_bytes() == records_before
    assert orjson.loads((copy / "summary.json").read_bytes())["ok"] == N_ROUNDS


async def test_panel_shows_a_run_whose_records_stayed_on_disk(tmp_path: Path) -> None:
    from workbench.ui.widgets import panel

    cfg = _cfg(out_dir=str(tmp_path), executor={"keep_records": False},
               target={"url": "sim", "engine": {"speedup": 50.0}})
    p = panel(cfg)
    async with asyncio.timeout(120):
        result = await p.run()
    assert p.error is None and result is not None and result.records_on_disk
    assert p.status_text.startswith(f"done: {N_ROUNDS} ok, 0 errors, 0 cancelled")
    assert p.output.outputs[0]["data"]["text/plain"].startswith(f"{N_ROUNDS}/{N_ROUNDS} ok")
    assert "image/png" in p.figures[0].output.outputs[0]["data"]


async def test_sharded_auto_run_above_the_limit_keeps_nothing_in_memory(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(config_mod, "KEEP_RECORDS_AUTO_MAX", 1)
    result = await _replay(_cfg(out_dir=str(tmp_path), executor={"workers": 2},
                                arrival={"mode": "saturated", "max_concurrency": 4,
                                         "tool_wait_scale": 0.01}))
    assert result.records == [] and result.lifecycle == [] and result.records_on_disk
    run_dir = Path(result.run_dir or "")
    assert len(read_jsonl(run_dir / "records.jsonl")) == N_ROUNDS
    assert _summary(result)["ok"] == N_ROUNDS
