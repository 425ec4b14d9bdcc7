"""``--profile``: the engine's profiler around the measured requests, on the embedded engine
(which serves ``/start_profile`` and ``/stop_profile`` only with ``WORKBENCH_SIM_PROFILE_DIR``
set, as vLLM only with a profiler configured)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from loopback import serve_raw
from small_disk import small_disk

import workbench as wb
from workbench.backends.profile import Profiler
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
    profile = result.manifest.profile
    assert profile["start"]["status"] == 200 and profile["stop"]["status"] == 200
    (path,) = profile["files"]
    assert Path(path).parent == trace_dir
    assert profile["where"] == f"1 trace file in {trace_dir}"
    traced = {r["request_id"] for r in json.loads(Path(path).read_text())["requests"]}
    assert traced == {r.request_id for r in result.records}  # exactly the measured window
    stored = json.loads((Path(result.run_dir) / "manifest.json").read_text())
    assert stored["profile"]["files"] == [path]


async def test_a_full_disk_is_a_500_naming_the_file_and_leaves_no_partial_one(
    tmp_path, monkeypatch
):
    """The embedded engine's trace is written by ``safe_write``: on a full disk the stop
    answers 500 with the path and the errno (no traceback, no partial file, no temporary
    left); the server goes on, and its next stop writes the trace whole."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        filler = disk / "filler"
        with filler.open("wb", buffering=0) as fh, pytest.raises(OSError, match="No space"):
            for _ in range(1000):  # bounded: 64 KiB fills in 64 of these
                fh.write(b"x" * 1024)
        monkeypatch.setenv(PROFILE_DIR_ENV, str(disk / "traces"))
        async with asyncio.timeout(60), serve_sim(zero_cost=True) as sim, \
                aiohttp.ClientSession() as http:
            async def stop_after_one_request() -> tuple[int, dict]:
                assert (await http.post(f"{sim.base_url}/start_profile")).status == 200
                body = {"model": sim.engine.config.model, "prompt": "hello", "max_tokens": 2}
                async with http.post(f"{sim.base_url}/v1/completions", json=body) as resp:
                    assert resp.status == 200
                async with http.post(f"{sim.base_url}/stop_profile") as resp:
                    return resp.status, await resp.json(content_type=None) or {}

            status, answer = await stop_after_one_request()
            assert status == 500
            message = answer["error"]["message"]
            assert message.startswith(f"cannot write {disk / 'traces'}") and "ENOSPC" in message
            assert sorted(p.name for p in disk.rglob("*")) == ["filler", "traces"]
            filler.unlink()  # room again: the next window is written whole
            assert (await stop_after_one_request())[0] == 200
        (trace,) = (disk / "traces").iterdir()
        assert trace.name.startswith("sim-profile-") and trace.suffix == ".json"
        assert len(json.loads(trace.read_text())["requests"]) == 1


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


def sglang_like(seen: list[tuple[str, str, dict[str, str], bytes]], status: int = 200):
    """A raw loopback server that records every request (method, path, headers, body) and
    answers as SGLang's ``http_server.py`` does: ``POST /start_profile`` "Start
    profiling.", ``POST /stop_profile`` "Stop profiling. This will take some time."
    (or ``status`` with an error body)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, path, _ = head.split(b"\r\n")[0].decode().split(" ", 2)
        headers = dict(line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:] if line)
        lower = {k.lower(): v for k, v in headers.items()}
        body = await reader.readexactly(int(lower.get("content-length", "0")))
        seen.append((method, path, lower, body))
        text = {"/start_profile": b"Start profiling.\n",
                "/stop_profile": b"Stop profiling. This will take some time.\n"}.get(
                    path, b"Not Found")
        code = status if path in ("/start_profile", "/stop_profile") else 404
        if code != 200:
            text = b'{"detail":"Not Found"}'
        writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (code, len(text), text))
        await writer.drain()

    return serve_raw(handle)


async def test_sglang_profile_requests_have_sglangs_shape(tmp_path) -> None:
    """SGLang (not installed here; its shape from its source and docs,
    docs/real-engines.md "Profiling"): ``POST /start_profile`` with a JSON
    ``ProfileReqInput`` body whose ``output_dir`` is the trace directory, then
    ``POST /stop_profile`` with no body."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    out = tmp_path / "sglang-traces"
    out.mkdir()
    async with asyncio.timeout(30), sglang_like(seen) as url:
        profiler = Profiler(url, "sglang-tokens", {"X-Trace": "1"}, str(out))
        await profiler.start()
        (out / "run-TP-0.trace.json.gz").write_bytes(b"x")  # what the server would write
        info = await profiler.stop()
    (start, stop) = seen
    assert start[:2] == ("POST", "/start_profile")
    assert start[2]["content-type"].startswith("application/json")
    assert json.loads(start[3]) == {"output_dir": str(out)}
    assert start[2]["x-trace"] == "1"  # the run's headers (a gateway's, auth) reach it
    assert stop[:2] == ("POST", "/stop_profile") and stop[3] == b""
    assert info["start"] == {"endpoint": "POST /start_profile", "status": 200,
                             "body": "Start profiling."}
    assert info["stop"]["body"] == "Stop profiling. This will take some time."
    assert info["files"] == [str(out / "run-TP-0.trace.json.gz")]


async def test_sglang_without_a_profile_dir_sends_no_body_and_vllm_never_does(tmp_path) -> None:
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    async with asyncio.timeout(30), sglang_like(seen) as url:
        await Profiler(url, "sglang-tokens", {}, None).start()
        await Profiler(url, "vllm-tokens", {}, str(tmp_path)).start()
    # SGLang then writes to its SGLANG_TORCH_PROFILER_DIR; vLLM takes no directory in
    # the request (it was fixed at start-up by --profiler-config)
    assert [(m, p, b) for m, p, _, b in seen] == [("POST", "/start_profile", b"")] * 2


async def test_a_refused_sglang_start_is_a_config_error_quoting_the_answer(tmp_path) -> None:
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    async with asyncio.timeout(30), sglang_like(seen, status=404) as url:
        with pytest.raises(ConfigError, match=r"answered POST /start_profile with 404: "
                                              r"'\{\"detail\":\"Not Found\"\}'"):
            await Profiler(url, "sglang-tokens", {}, str(tmp_path)).start()
    assert [p for _, p, _, _ in seen] == ["/start_profile"]
