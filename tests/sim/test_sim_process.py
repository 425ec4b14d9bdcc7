"""The embedded engine in its own process (the default for ``target: sim``).

Real processes, real sockets on 127.0.0.1: the child serves the same engine,
the parent sees its pid and config, and every way out of the context (normal
end, error, cancellation, the parent going away) leaves no engine behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import aiohttp
import pytest

from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.sim.process import SimProcessError, serve_sim_process

TRACE = str(data_path("tracelab/multi_session_example.csv"))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def health(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/health") as r:
        return r.status


async def test_a_sim_run_gets_an_engine_process_of_its_own_and_ends_it() -> None:
    result = await run_async({"trace": {"path": TRACE, "max_items": 2},
                              "target": {"url": "sim", "engine": {"speedup": 50.0}}})
    assert [r.status for r in result.records] == ["ok"] * 5
    target = result.manifest.target
    proc = target["engine_process"]
    assert proc["own_process"] is True and proc["pid"] != os.getpid()
    assert target["engine"]["speedup"] == 50.0  # the child's resolved config
    assert len(target["engine"]["prefill_coeffs"]) == 3  # the cost model too (a list)
    assert target["base_url"].startswith("http://127.0.0.1:")
    assert gone(proc["pid"])


async def test_in_process_keeps_the_engine_on_the_clients_loop() -> None:
    result = await run_async({"trace": {"path": TRACE, "max_items": 1},
                              "target": {"url": "sim", "engine": {"speedup": 50.0},
                                         "in_process": True}})
    assert result.manifest.target["engine_process"] == {"pid": None, "own_process": False}
    assert all(r.status == "ok" for r in result.records)


async def test_an_error_inside_the_context_stops_the_engine() -> None:
    pid = None
    with pytest.raises(RuntimeError, match="boom"):
        async with serve_sim_process(speedup=10.0) as proc:
            pid = proc.pid
            assert await health(proc.base_url) == 200
            raise RuntimeError("boom")
    assert pid is not None and gone(pid)


async def test_cancelling_the_run_stops_the_engine() -> None:
    entered: asyncio.Queue[int] = asyncio.Queue()

    async def hold() -> None:
        async with serve_sim_process() as proc:
            await entered.put(proc.pid)
            await asyncio.Event().wait()

    task = asyncio.ensure_future(hold())
    async with asyncio.timeout(60):
        pid = await entered.get()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pid)


async def test_a_bad_knob_fails_before_any_process_starts() -> None:
    with pytest.raises(ValueError, match="unknown engine knob"):
        async with serve_sim_process(no_such_knob=1):
            pass


async def test_a_child_that_cannot_start_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")  # an interpreter that exits at once
    with pytest.raises(SimProcessError, match="did not start"):
        async with serve_sim_process():
            pass


def test_the_engine_exits_when_its_parent_closes_stdin() -> None:
    child = subprocess.Popen([sys.executable, "-m", "workbench.sim.process", "{}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        ready = json.loads(child.stdout.readline())
        assert ready["base_url"].startswith("http://127.0.0.1:")
        child.stdin.close()  # what the OS does when the parent dies
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def test_the_start_error_quotes_the_childs_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/sh")  # sh cannot open the module as a script
    with pytest.raises(SimProcessError, match=r"did not start: .*cannot open workbench"):
        async with serve_sim_process():
            pass
