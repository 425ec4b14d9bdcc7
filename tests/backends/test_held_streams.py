"""A server that holds a stream open after ``[DONE]``, against ``bench/fake_server.py`` run
in the test's loop (docs/wire-protocols.md, "HTTP framing"; docs/metrics.md, "Client").

The judgement follows evidence: a server that held one stream and then ends its bodies
again gets its connections reused again; an idle connection is taken before one still
reading its body's end; with ``max_connections``, a wait for a slot a draining connection
kept is the server's (noted), a wait for a slot a request kept is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_transport import LIMIT, record

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.backends.waits import HELD_WAIT_MS
from workbench.records import RequestRecord

_spec = importlib.util.spec_from_file_location(
    "fake_server", Path(__file__).parents[2] / "bench" / "fake_server.py")
assert _spec is not None and _spec.loader is not None
fake_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_server)


@contextlib.asynccontextmanager
async def serve(**kw: Any) -> AsyncIterator[tuple[str, Any]]:
    """``bench/fake_server.py``'s server on 127.0.0.1 (an ephemeral port), in this loop."""
    mode = kw.pop("mode", "instant")
    server = fake_server.FakeServer(mode, kw.pop("ttft_ms", 0.0), kw.pop("itl_ms", 0.0), **kw)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(server.protocol, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", server
    finally:
        srv.close()


def req(i: int, max_tokens: int = 4) -> WireRequest:
    return WireRequest(request_id=f"r-{i}", prompt_ids=[1, 2, 3, 4], max_tokens=max_tokens)


async def send(t: Transport, i: int, max_tokens: int = 4) -> RequestRecord:
    rec = record(f"r-{i}")
    await t.send(BACKENDS.get("openai"), req(i, max_tokens), rec)
    assert rec.status == "ok", rec.error
    return rec


def conns(server: Any) -> dict[str, int]:
    """The server's connection of each request (its own truth)."""
    return {e["request_id"]: e["conn"] for e in server.truth}


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_reuse_resumes_once_a_server_that_held_one_stream_ends_its_bodies(http: str):
    """The first answer is held after [DONE]; every later one ends its body 20 ms after
    [DONE] (its own write). The second request waits for the held connection (once), the
    client takes the server to hold streams, and a later body that ends within
    ``HELD_AFTER_DONE_S`` clears that: the last requests reuse their connections again
    (before: a new connection per request for the client's life)."""
    async with (
        serve(hold_first=1, last_chunk_ms=20.0) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0)) as t,
    ):
        recs = [await send(t, 0), await send(t, 1)]
        assert t.after_done["held"] == 1  # the second waited for the held connection
        while not t.after_done["resumed"]:  # the event: a body ended within the bound
            recs.append(await send(t, len(recs)))
        after = [await send(t, len(recs) + i) for i in range(10)]
        stats = t.after_done
    on = conns(server)
    # reused: the probe's connection, and the one opened while it read on (back in the
    # pool too once its own body ended, the judgement cleared by then)
    assert len({on[r.request_id] for r in after}) <= 2, (on, stats)
    assert recs[1].extra.get(HELD_WAIT_MS), recs[1].extra
    assert stats["held"] == 1 and stats["resumed"] == 1, stats


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_connections_the_server_closed_idle_are_not_counted_as_idle(http: str):
    """Two warm connections, then closed by the server as idle (its keep-alive timeout);
    each body ends 300 ms after [DONE]. The first request opens a connection; each later one
    waits for that one's body to end and reuses it, rather than taking the closed ones for
    idle and opening a connection per request (before: aiohttp's count kept them)."""
    async with (
        serve(last_chunk_ms=300.0) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0)) as t,
    ):
        assert await t.warm(2) == 2
        assert server.close_idle() == 2
        recs = [await send(t, i) for i in range(5)]
    on = conns(server)
    # a request lost on a closed warm connection (its close not yet read) goes once more
    # on a new connection, one of its own with aiohttp (docs/wire-protocols.md, "Idle
    # connections"); the others share one
    kept = [r for r in recs if not r.extra.get("stale_connection_retry")]
    assert len(kept) >= 4 and len({on[r.request_id] for r in kept}) == 1, on
    assert all(r.extra.get(HELD_WAIT_MS) for r in kept[1:]), [r.extra for r in recs]


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_server_that_holds_every_stream_costs_one_wait(http: str):
    """``--hold-after-done``: one wait for the held connection, then a connection per
    request, each dropped at [DONE] but for one that reads on as evidence (bounded)."""
    async with (
        serve(hold=True) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0)) as t,
    ):
        recs = [await send(t, i) for i in range(6)]
        stats = t.after_done
    waits = [r.extra.get(HELD_WAIT_MS) for r in recs]
    assert waits[0] is None and waits[1] and not any(waits[2:]), waits
    assert len(set(conns(server).values())) == 6
    assert stats["held"] == 1 and stats["resumed"] == 0, stats
    assert stats["dropped_at_done"] >= 1, stats


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_an_idle_connection_goes_before_one_still_reading_its_body(http: str):
    """Two warm idle connections; the first request's body ends 500 ms after [DONE]. The
    second request takes the other idle connection at once: it waits for no drain."""
    async with (
        serve(last_chunk_ms=500.0) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0)) as t,
    ):
        assert await t.warm(2) == 2
        first = await send(t, 0)
        second = await send(t, 1)
    on = conns(server)
    assert HELD_WAIT_MS not in second.extra, second.extra
    assert HELD_WAIT_MS not in first.extra
    assert on["r-0"] != on["r-1"] and set(on.values()) <= {1, 2}, on


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_slot_kept_by_a_drain_is_a_held_wait(http: str):
    """``max_connections`` 1; each body ends 200 ms after [DONE]: the second request's
    wait for the one slot was the drain's (the server's), noted, though the slot came back
    within ``HELD_AFTER_DONE_S``; the connection is reused."""
    async with (
        serve(last_chunk_ms=200.0) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0,
                                   max_connections=1)) as t,
    ):
        first = await send(t, 0)
        second = await send(t, 1)
    on = conns(server)
    assert HELD_WAIT_MS not in first.extra
    assert second.extra.get(HELD_WAIT_MS), second.extra
    assert on["r-0"] == on["r-1"], on


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_slot_kept_by_a_request_is_not_a_held_wait(http: str):
    """``max_connections`` 1, two requests at once, bodies whole at [DONE]: the second
    waits for the first's slot (the client's limit, its release lag), not noted as held."""
    async with (
        serve(mode="timed", ttft_ms=20.0, itl_ms=5.0) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0,
                                   max_connections=1)) as t,
    ):
        recs = await asyncio.gather(send(t, 0, 8), send(t, 1, 8))
    assert not [r.extra for r in recs if HELD_WAIT_MS in r.extra]
    assert len(set(conns(server).values())) == 1


def test_a_run_against_a_server_that_held_one_stream_says_what_the_client_did(tmp_path):
    """A replay (one session at a time) against ``bench/fake_server.py --hold-first 1
    --last-chunk-ms 20`` in its own process: every request ok, and summary.json's
    ``client.after_done`` says the server was taken to hold streams once, and the held
    wait is counted apart (docs/metrics.md, "Client")."""
    import json
    import subprocess
    import sys

    from workbench.executors.dispatch import run

    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n"
                     + "".join(f"r{i},0,16,4\n" for i in range(40)))  # fmt: skip
    server = Path(__file__).parents[2] / "bench" / "fake_server.py"
    proc = subprocess.Popen([sys.executable, str(server), "--hold-first", "1",
                             "--last-chunk-ms", "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        result = run({
            "trace": {"path": str(trace), "format": "independent"},
            "arrival": {"mode": "saturated", "max_concurrency": 1,
                        "stream_idle_timeout_s": 30.0},
            "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None},
            "target": url,
            "out_dir": str(tmp_path / "run"),
        })  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert sum(r.status == "ok" for r in result.records) == 40
    saved = json.loads((Path(result.run_dir) / "summary.json").read_text())
    done = saved["client"]["after_done"]
    assert done["held"] == 1, done  # (resumed: when a body ended in time, not awaited here)
    assert saved["client"]["held_after_done"]["requests"] >= 1


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_drain_that_began_during_a_wait_for_a_slot_is_dropped_when_held(http: str):
    """``max_connections`` 1, two requests at once; the first answer is held after
    [DONE]. The second was already waiting for the one slot (a request's) when the drain
    began: the slot comes back once the drain has gone on ``HELD_AFTER_DONE_S`` (seen
    within twice that), not at the 30 s stream idle timeout (past the test's bound)."""
    async with (
        serve(hold_first=1) as (url, server),
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, stream_idle_timeout_s=30.0,
                                   max_connections=1)) as t,
    ):
        recs = await asyncio.gather(send(t, 0), send(t, 1))
        stats = t.after_done
    on = conns(server)
    assert on["r-0"] != on["r-1"], on
    assert stats["held"] == 1, stats
    if http == "httptools":  # aiohttp's connector owns its slots: that wait is unseen there
        assert recs[1].extra.get(HELD_WAIT_MS), recs[1].extra
