"""The Ray executor: a local Ray cluster with 2 actors vs the local executor (embedded engine).

The merged Ray run must hold the local run's requests unit for unit — same
request ids, same planned lengths, same prompts sent — with every shard's units
admitted in file order, and load, summarize and render like any other run.
Skipped when Ray is not installed (``pip install 'workbench[ray]'``).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench import RunConfig
from workbench.errors import ConfigError

WORKERS = 2
MAX_CONCURRENCY = 4


def test_ray_kind_without_ray_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "ray" else real(n))
    with pytest.raises(ConfigError, match=r"pip install 'workbench\[ray\]'"):
        RunConfig.from_dict({"executor": {"kind": "ray"}})


def test_executor_kind_and_address_are_checked() -> None:
    with pytest.raises(ConfigError,
                       match=r"executor\.kind: expected 'local' or 'processes' or 'ray', got 'slu"):
        RunConfig.from_dict({"executor": {"kind": "slurm"}})
    with pytest.raises(ConfigError, match=r"executor\.address"):
        RunConfig.from_dict({"executor": {"address": "ray://h:10001"}})
    assert RunConfig.from_dict({"executor": {"kind": "processes"}}).executor.kind == "processes"


def test_shift_moves_every_ns_field_onto_the_driver_clock() -> None:
    from workbench.executors.ray import shift_ns

    row = {"dispatch_ns": 10, "end_ns": None, "token_times_ns": [11, 12], "round_idx": 3,
           "warmup": False}  # fmt: skip
    assert shift_ns(dict(row), 0) == row
    assert shift_ns(dict(row), 5) == {**row, "dispatch_ns": 15, "token_times_ns": [16, 17]}


# ------------------------------------------------------------------ a local Ray cluster
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False,
             configure_logging=False)  # fmt: skip
    try:
        yield ray
    finally:
        ray.shutdown()


def _cfg(url: str, out: Path, executor: dict[str, Any]) -> dict[str, Any]:
    from workbench import data

    return {
        "trace": {"path": str(data.path("tracelab/multi_session_large.csv")), "max_items": 10},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0,
                    "max_concurrency": MAX_CONCURRENCY},
        "target": {"url": url},
        "executor": executor,
        "out_dir": str(out),
        "run_id": executor.get("kind", "local"),
    }  # fmt: skip


PLANNED = ("request_id", "unit_ordinal", "session_id", "round_idx", "planned_prefix_tokens",
           "planned_input_tokens", "planned_output_tokens", "folded_prefix_tokens",
           "derived_prefix", "prefix_shortfall_tokens", "sent_prompt_tokens", "prompt_tokens",
           "completion_tokens", "status", "warmup")  # fmt: skip


def _by_unit(records: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    out: dict[int, list[tuple[Any, ...]]] = {}
    for r in sorted(records, key=lambda r: (r.unit_ordinal, r.round_idx)):
        out.setdefault(r.unit_ordinal, []).append(tuple(getattr(r, k) for k in PLANNED))
    return out


@pytest.fixture(scope="module")
def runs(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from workbench.executors.dispatch import run_async
    from workbench.sim.server import serve_sim

    out = tmp_path_factory.mktemp("runs")

    async def both() -> dict[str, Any]:
        async with serve_sim(speedup=50.0) as sim:
            local = await run_async(_cfg(sim.base_url, out, {"kind": "local"}))
            ray = await run_async(_cfg(sim.base_url, out, {"kind": "ray", "workers": WORKERS}))
            return {"local": local, "ray": ray}

    return asyncio.run(asyncio.wait_for(both(), 240))


def test_ray_run_equals_local_run_unit_for_unit(runs: dict[str, Any]) -> None:
    local, ray = runs["local"], runs["ray"]
    assert not ray.cancelled and ray.manifest.status == "completed"
    assert len(ray.records) == len(local.records) > 10
    assert _by_unit(ray.records) == _by_unit(local.records)
    assert all(r.status == "ok" for r in ray.records)


def test_each_shard_admits_its_units_in_file_order(runs: dict[str, Any]) -> None:
    ray = runs["ray"]
    admitted = {row["unit_ordinal"]: row for row in ray.lifecycle}
    assert sorted(admitted) == list(range(10))
    ex = ray.manifest.executor
    assert ex["kind"] == "ray" and ex["shard_units"] == [5, 5]
    assert ex["shard_concurrency"] == [2, 2]
    for k in range(WORKERS):
        shard = [admitted[u] for u in range(k, 10, WORKERS)]  # split_plan: unit i → shard i mod N
        times = [row["admitted_ns"] for row in shard]
        assert times == sorted(times), f"shard {k} admitted out of file order"
        slots = {row["routing_slot"] for row in shard}
        assert slots <= set(range(2 * k, 2 * k + 2)), slots
    # one host: every actor shares the driver's monotonic clock; all moments after the epoch
    assert all(c["same_host"] and c["shift_ns"] == 0 for c in ex["clocks"])
    assert min(r.dispatch_ns for r in ray.records) >= ex["epoch_ns"]


def test_merged_ray_run_loads_summarizes_and_renders(runs: dict[str, Any], tmp_path: Path) -> None:
    import workbench as wb
    from workbench.metrics import scan
    from workbench.report.render import render_report

    run_dir = Path(runs["ray"].run_dir)
    assert not (run_dir / "shards").exists()
    loaded = wb.load(run_dir)
    assert len(loaded.records) == len(runs["ray"].records)
    summary = wb.summarize(loaded)
    assert summary["ok"] == len(loaded.records)
    assert summary["planned_prefix_hit_rate"] == wb.summarize(runs["local"])[
        "planned_prefix_hit_rate"
    ]
    if scan.available():
        assert (run_dir / "records.parquet").exists()
        got = scan.summarize(run_dir)
        for key in ("requests", "ok", "output_tokens", "planned_prefix_hit_rate"):
            assert got[key] == pytest.approx(summary[key])
    page = render_report("replay", {"run_dir": str(run_dir)}, tmp_path).read_text()
    assert "Replay report" in page and "TTFT" in page
