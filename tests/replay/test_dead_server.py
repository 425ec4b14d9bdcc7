"""A server that dies during a replay (``bench/fake_server.py``'s ``die_after``: it stops
listening and resets every connection): the run stops after ``arrival.stop_after_refused``
connections in a row could not be made, the rounds never sent are counted as not sent,
and no request that never reached the server counts as the client's release lag
(docs/measurement-rules.md, "A server that dies").

Every test runs once per HTTP client (``executor.http``)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.transport import HTTP_CLIENTS
from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.report.tables import run_end_note, stop_line

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("fake_server", ROOT / "bench" / "fake_server.py")
assert _spec is not None and _spec.loader is not None
fake_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_server)

SESSIONS, ROUNDS = 6, 5
LIMIT = 60  # a guard against a hang, never a timed assertion


@contextlib.asynccontextmanager
async def dying(die_after: int) -> AsyncIterator[tuple[str, Any]]:
    """The fake server, in this loop, dying at its (``die_after`` + 1)-th completion."""
    server = fake_server.FakeServer("instant", 0.0, 0.0, die_after=die_after)
    loop = asyncio.get_running_loop()
    srv = server.listener = await loop.create_server(server.protocol, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", server
    finally:
        srv.close()


def _trace(tmp: Path) -> str:
    rows = ["session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
            "tool_wait_after_ms"]
    rows += [f"{s},0,{k},0,16,4,0" for s in range(SESSIONS) for k in range(ROUNDS)]
    path = tmp / "sessions.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _config(tmp: Path, url: str, http: str, **arrival: Any) -> RunConfig:
    return RunConfig.from_dict({
        "trace": _trace(tmp),
        "arrival": {"mode": "saturated", "max_concurrency": 1, "tool_wait_scale": 0.0,
                    "stop_after_refused": 3, **arrival},
        "backend": {"name": "openai", "preflight": False, "flush_cache": False,
                    "options": {"model": "fake"}},
        "target": url,
        "executor": {"http": http, "warm_connections": False},
        "out_dir": str(tmp / "runs"), "run_id": "dead",
    })


async def _replay(tmp: Path, http: str, **arrival: Any) -> Any:
    async with dying(ROUNDS - 1) as (url, server), asyncio.timeout(LIMIT):
        result = await run_async(_config(tmp, url, http, **arrival))
    assert server.died.is_set()
    return result


@pytest.mark.parametrize("http", HTTP_CLIENTS)
@pytest.mark.parametrize("keep_going", [True, False], ids=["continue-on-error", "stop-session"])
async def test_a_dead_server_stops_the_run_after_the_refused_connections(
        tmp_path: Path, http: str, keep_going: bool) -> None:
    """Session 0's 4 rounds are answered, its 5th kills the server; with or without
    ``--continue-on-error`` the next two requests are refused too, and the third refusal in
    a row stops the run: 7 records, the 23 rounds never sent counted as not sent (not as
    failures), the run ``partial`` with its reason and one plain line."""
    result = await _replay(tmp_path, http, stop_session_on_error=not keep_going)
    statuses = [r.status for r in result.records]
    assert statuses == ["ok"] * (ROUNDS - 1) + ["error"] * 3
    refused = result.records[ROUNDS - 1:]
    assert all(r.extra.get("connect_failed") for r in refused)
    assert not any(r.extra.get("connect_failed") for r in result.records[:ROUNDS - 1])
    m = result.manifest
    assert m.status == "partial" and not result.cancelled
    assert m.stop_reason == "server_refused"
    assert m.completion["not_sent_rounds"] == SESSIONS * ROUNDS - len(statuses)
    assert m.stop_detail.startswith("server at http://127.0.0.1:")
    assert " refused 3 connections in a row since " in m.stop_detail
    line = stop_line(m)
    assert line is not None and line.startswith(m.stop_detail)
    assert line.endswith("; stopped; 7 records on disk")
    assert m.stop_detail in (run_end_note(m) or "")  # what report and sweep print
    assert (tmp_path / "runs" / "dead" / "records.jsonl").read_text().count("\n") == 7


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_requests_that_never_reached_the_server_are_no_release_lag(
        tmp_path: Path, http: str) -> None:
    """Only the requests whose bytes went out have a release lag (docs/metrics.md,
    "Client"): the 3 refused ones are counted apart, never as the client's lateness."""
    result = await _replay(tmp_path, http)
    client = result.manifest.client
    assert client["release_lag_ms"]["count"] == ROUNDS - 1
    assert client["not_connected"] == 3


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_no_bound_plays_every_round_against_a_dead_server(tmp_path: Path, http: str):
    """``stop_after_refused: null``: every planned round is played (and fails), nothing
    stops the run, which is whole but for its errors."""
    result = await _replay(tmp_path, http, stop_after_refused=None,
                           stop_session_on_error=False)
    assert len(result.records) == SESSIONS * ROUNDS
    assert result.manifest.status == "completed" and result.manifest.stop_reason is None


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_stop_after_refused_is_validated(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError, match=r"arrival\.stop_after_refused"):
        _config(tmp_path, "http://127.0.0.1:9", "httptools", stop_after_refused=value).check()


def test_the_command_prints_one_plain_line_and_exits_1(tmp_path: Path) -> None:
    """``workbench replay --continue-on-error --stop-after-refused 3`` against a server
    killed mid-run: the line that says why it stopped, the partial note, exit status 4
    (every refused request failed: the error rate goes first, README "Exit codes")."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "fake_server.py"), "--die-after", "4",
         "--no-uvloop"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[-1]  # the event: LISTENING http://...
        done = subprocess.run(
            [sys.executable, "-m", "workbench", "replay", "--trace", _trace(tmp_path),
             "--arrival", "saturated", "--max-concurrency", "1", "--tool-wait-scale", "0",
             "--target", url, "--no-preflight", "--no-flush-cache", "--model", "fake",
             "--continue-on-error", "--stop-after-refused", "3", "-o", str(tmp_path / "runs"),
             "--run-id", "dead", "--no-progress"],
            capture_output=True, text=True, env=env, timeout=LIMIT)
    finally:
        server.kill()
        server.wait()
    lines = done.stdout.splitlines()
    stop = [line for line in lines if " refused 3 connections in a row since " in line]
    assert len(stop) == 1, done.stdout + done.stderr
    assert stop[0].startswith(f"server at {url} refused 3 connections in a row since ")
    assert stop[0].endswith("; stopped; 7 records on disk")
    assert any(line.startswith("INCOMPLETE: partial (of 30 planned rounds, 7 were recorded")
               for line in lines), done.stdout
    assert done.returncode == 4, done.stdout + done.stderr


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_requests_in_flight_end_on_their_own_before_the_stop(tmp_path: Path, http: str):
    """A server that stops listening at its first request but streams that one on (as
    llama.cpp after SIGTERM): session 1, due 50 ms later, is refused 3 times; nothing
    more is sent, and the run stops only once session 0's stream has ended, ok (before:
    it was cancelled at the third refusal)."""
    path = tmp_path / "two.csv"
    path.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                    "tool_wait_after_ms\n0,0,0,0,16,30,0\n"
                    + "".join(f"1,50,{k},0,16,4,0\n" for k in range(ROUNDS)))
    server = fake_server.FakeServer("timed", 0.0, 100.0, die_after=0, die_gently=True)
    srv = server.listener = await asyncio.get_running_loop().create_server(
        server.protocol, "127.0.0.1", 0)
    cfg = _config(tmp_path, f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", http,
                  mode="trace-timed", max_concurrency=None, stop_session_on_error=False)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "trace": str(path)})
    try:
        async with asyncio.timeout(LIMIT):
            result = await run_async(cfg)
    finally:
        srv.close()
    first, *refused = result.records[-1:] + result.records[:-1]
    assert (first.session_id, first.status, first.completion_tokens) == ("0", "ok", 30)
    assert len(refused) == 3 and all(r.extra.get("connect_failed") for r in refused)
    assert first.end_ns > max(r.end_ns for r in refused)  # it ended after the third refusal
    assert result.manifest.stop_reason == "server_refused"
    assert result.manifest.completion["not_sent_rounds"] == ROUNDS - 3
