"""``--profile``: the engine's profiler around the measured requests, on the embedded engine
(which serves ``/start_profile`` and ``/stop_profile`` only with ``WORKBENCH_SIM_PROFILE_DIR``
set, as vLLM only with a profiler configured)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import workbench as wb
from workbench.errors import ConfigError
from workbench.sim.server import PROFILE_DIR_ENV, serve_sim

TRACE = "synthetic:random,requests=5,input=fixed:32,output=fixed:4,rate=50"


def cfg(url: str, tmp_path: Path, **backend) -> dict:
    return {"trace": TRACE, "target": url, "out_dir": str(tmp_path / "runs"),
            "backend": {"preflight": False, "scrape_interval_s": None, "profile": True,
                        **backend}}


async def test_profile_window_writes_a_trace_and_records_where(tmp_path, monkeypatch):
    trace_dir = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(trace_dir))
    async with asyncio.timeout(60), serve_sim(zero_cost=True) as sim:
        result = await wb.run_async(cfg(sim.base_url, tmp_path, profile_dir=str(trace_dir)))
    profile = result.manifest["profile"]
    assert profile["start"]["status"] == 200 and profile["stop"]["status"] == 200
    (path,) = profile["files"]
    assert Path(path).parent == trace_dir
    assert profile["where"] == f"1 trace file(s) in {trace_dir}"
    traced = {r["request_id"] for r in json.loads(Path(path).read_text())["requests"]}
    assert traced == {r.request_id for r in result.records}  # exactly the measured window
    stored = json.loads((Path(result.run_dir) / "manifest.json").read_text())
    assert stored["profile"]["files"] == [path]


async def test_a_server_without_a_profiler_stops_before_any_measured_request(tmp_path,
                                                                             monkeypatch):
    monkeypatch.delenv(PROFILE_DIR_ENV, raising=False)
    async with asyncio.timeout(60), serve_sim(zero_cost=True) as sim:
        with pytest.raises(ConfigError, match=r"answered POST /start_profile with 404"):
            await wb.run_async(cfg(sim.base_url, tmp_path))
        from workbench.sim.server import SERVER_KEY

        assert list(sim.app[SERVER_KEY].debug_log) == []  # it answered no completion


def test_profile_dir_without_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"set backend\.profile true"):
        wb.RunConfig.from_dict({"trace": TRACE, "backend": {"profile_dir": "/tmp/x"}})
