"""A live run against a separately started ``workbench sim serve`` says the engine was
simulated, and with which step times, because the server says so in its ``/v1/models``
card (docs/embedded-engine.md, "Which step times"); a server that does not say so (a real
vLLM's card) is never labelled simulated."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from loopback import serve_app

from workbench.backends import served
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics import summarize
from workbench.report.headline import engine_note, run_headline
from workbench.report.sections import RunReport
from workbench.sim import server
from workbench.sim.presets.stated import stated_error_brief
from workbench.sim.server import create_app, serve_sim

PRESET = "llama-3.1-8b/h100/tp1"
#: vLLM 0.32.0's card (tests/replay/test_context_fit.py), for the model the sim serves
VLLM_CARD = {"id": "workbench-sim", "object": "model", "owned_by": "vllm",
             "root": "workbench-sim", "parent": None, "max_model_len": 131072}


@asynccontextmanager
async def sim_serve(*args: str) -> AsyncIterator[str]:
    """``workbench sim serve ARGS`` in its own process; its URL once it says it listens."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workbench", "sim", "serve", *args,
        stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line.startswith("embedded engine on http://"), line
        yield line.split()[-1]
    finally:
        proc.terminate()
        await proc.wait()


async def _replay(url: str, out: Path) -> Any:
    return await run_async({
        "target": url, "out_dir": str(out),
        "trace": {"path": str(data_path("tracelab/multi_session_example.csv")), "max_items": 2},
        "backend": {"name": "openai", "options": {"model": "workbench-sim"}},
        "arrival": {"mode": "saturated", "tool_wait_scale": 0},
    })


async def test_a_run_against_sim_serve_says_it_was_simulated_and_from_what(
        tmp_path: Path) -> None:
    async with sim_serve("--engine", "speedup=50") as url:
        result = await _replay(url, tmp_path)
    said = result.manifest.target["simulated"]
    assert said["server"] == "workbench-sim" and said["engine"]["speedup"] == 50.0
    headline = run_headline(summarize(result), result.manifest)
    assert headline.endswith(f" · simulated engine (workbench sim serve at {url}, 50× real "
                             "time, default step times, not a GPU's)"), headline
    run = RunReport(result).table("run").frame  # the detail under the headline
    assert run.loc["simulated engine's step times", "value"].startswith(
        "default: the embedded engine's own coefficients, calibrated to no GPU")


async def test_a_preset_sim_serve_names_its_preset_and_stated_error() -> None:
    """The card carries the preset; the note names it with the error it states."""
    async with sim_serve("--engine", f"preset={PRESET}") as url:
        reader, writer = await asyncio.open_connection(*url.removeprefix("http://").split(":"))
        writer.write(b"GET /v1/models HTTP/1.0\r\n\r\n")
        body = (await reader.read()).split(b"\r\n\r\n", 1)[1]
        writer.close()
    said = served.simulated_engine(body)
    assert said is not None and said["engine"]["preset"] == PRESET
    from workbench.records import RunManifest

    note = engine_note(RunManifest("", target={"kind": "url", "base_url": url,
                                               "simulated": said}))
    assert note == (f"simulated engine (workbench sim serve at {url}, preset {PRESET}: "
                    f"{stated_error_brief(PRESET)})")


async def test_a_server_whose_card_does_not_say_so_is_never_labelled_simulated(
        tmp_path: Path) -> None:
    """The same engine behind a card as a real vLLM answers: nothing says "simulated"."""
    async with serve_sim(zero_cost=True) as sim:
        app = create_app(sim.engine)

        @web.middleware
        async def as_vllm(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.path == "/v1/models":
                return web.json_response({"object": "list", "data": [VLLM_CARD]})
            return await handler(request)

        app.middlewares.append(as_vllm)
        async with serve_app(app) as url:
            result = await _replay(url, tmp_path)
    assert summarize(result)["ok"] == summarize(result)["requests"] > 0
    assert "simulated" not in result.manifest.target
    assert engine_note(result.manifest) is None
    assert "simulated" not in run_headline(summarize(result), result.manifest)
    assert "simulated engine's step times" not in RunReport(result).table("run").frame.index


def test_the_client_reads_the_card_the_server_writes() -> None:
    assert (served.SIM_OWNER, served.SIM_CARD_KEY) == (server.SIM_OWNER, server.SIM_CARD_KEY)
    assert served.simulated_engine(orjson.dumps({"data": [VLLM_CARD]})) is None
    owned_only = {**VLLM_CARD, "owned_by": "workbench-sim"}  # no card: not said
    assert served.simulated_engine(orjson.dumps({"data": [owned_only]})) is None
