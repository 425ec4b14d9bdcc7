"""Whose delay a late request was: the client's own (its loop, its CPU, pacing) or the
server's (a connection slow to be made, a dead kept-alive connection's first attempt);
docs/metrics.md, "Client".

Real servers on loopback: one whose accept loop is held by an ``asyncio.Event`` behind a
backlog of 1 (the kernel drops a further SYN and sends it again a second later, so that
connect waits on the server), and a client made CPU-bound by the real work of its record
sink. The pending connect is seen in ``/proc/net/tcp`` (polled for the exact condition,
tests/waiting.py), and the accept loop is let go only then.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from loopback import read_request, self_signed, serve_raw
from waiting import POLL_S

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.backends.waits import CONNECT_WAIT_MS, STALE_ATTEMPT_MS
from workbench.clock import WallClock
from workbench.config import RunConfig
from workbench.metrics.summary import client_bottleneck, client_stats
from workbench.records import RequestRecord
from workbench.replay.measure import SelfMeasure
from workbench.replay.plan import build_plan
from workbench.replay.prepare import load_workload
from workbench.replay.runner import Runner, build_runner
from workbench.report.headline import client_verdict
from workbench.report.tables import client_caption, client_table

#: the failure bound of a run here (a loaded 2-core machine), s
LIMIT = 60.0
#: the listening socket's backlog: Linux queues backlog + 1 made connections, no more
BACKLOG = 1
#: SYN_SENT in /proc/net/tcp's ``st`` column
SYN_SENT = "02"

pytestmark = pytest.mark.parametrize("http", HTTP_CLIENTS)


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


#: one short completions stream: 4 token ids, usage, [DONE]
BODY = b"".join([
    _event({"id": "c", "choices": [{"index": 0, "token_ids": [11, 12]}]}),
    _event({"id": "c",
            "choices": [{"index": 0, "token_ids": [13, 14], "finish_reason": "length"}]}),
    _event({"id": "c", "choices": [], "usage": {"prompt_tokens": 64, "completion_tokens": 4}}),
    b"data: [DONE]\n\n",
])  # fmt: skip


def cl(body: bytes) -> bytes:
    """``body`` as an event stream with a Content-Length."""
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body))


def run_summary(client: dict) -> dict:
    """A run's summary (no latency of its own) carrying ``client``."""
    return {"ttft_ms": {}, "client": client}


def record(rid: str) -> RequestRecord:
    return RequestRecord(
        run_id="t", request_id=rid, unit_ordinal=0, session_id="s", round_idx=0,
        backend="openai", policy=None, planned_prefix_tokens=0, planned_input_tokens=3,
        planned_output_tokens=4,
    )  # fmt: skip


async def answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request on a kept-alive connection with one short stream."""
    try:
        while True:
            await read_request(reader)
            writer.write(cl(BODY))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def held_accept(accept: asyncio.Event,
                      tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A server on 127.0.0.1 listening with ``BACKLOG``, accepting nothing until
    ``accept`` is set (with ``tls``, its handshakes follow the accept); its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    server = await asyncio.start_server(answer_each, sock=sock, backlog=BACKLOG, ssl=tls,
                                        start_serving=False)

    async def open_when_set() -> None:
        await accept.wait()
        await server.start_serving()

    opener = asyncio.ensure_future(open_when_set())
    try:
        yield sock.getsockname()[1]
    finally:
        opener.cancel()
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await server.wait_closed()


#: ESTABLISHED in /proc/net/tcp's ``st`` column
ESTABLISHED = "01"


def connecting_to(port: int, state: str) -> bool:
    """A client socket to 127.0.0.1:``port`` is in TCP ``state``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == f"0100007F:{port:04X}" and fields[3] == state:
            return True
    return False


async def until_syn_sent(port: int, state: str = SYN_SENT) -> None:
    while not connecting_to(port, state):
        await asyncio.sleep(POLL_S)


def independent(tmp_path: Path, arrivals_ms: list[float]) -> Path:
    path = tmp_path / "independent.csv"
    rows = [f"{i},{t},64,4" for i, t in enumerate(arrivals_ms)]
    path.write_text("id,arrival_time,input_len,output_len\n" + "\n".join(rows) + "\n")
    return path


def config(trace: Path, url: str, http: str) -> RunConfig:
    return RunConfig.from_dict({
        "trace": str(trace), "target": {"url": url},
        "arrival": {"output_len": "fixed:4"},
        "backend": {"preflight": False, "flush_cache": False},  # only the run's requests
        "executor": {"http": http},
    })  # fmt: skip


async def replay(cfg: RunConfig, transport: Transport, sink=None) -> tuple[Runner, list]:
    records: list[RequestRecord] = []

    def keep(rec: RequestRecord) -> None:
        records.append(rec)
        if sink is not None:
            sink(rec)

    plan = build_plan(cfg, load_workload(cfg))
    runner = build_runner(cfg, plan, run_id="t", sender=transport, clock=WallClock(),
                          sink=keep)
    await runner.execute()
    return runner, records


async def test_a_connect_the_server_holds_is_its_delay_not_the_clients_lag(http, tmp_path):
    """Three requests due at once; the server accepts none until the third's connect is
    seen waiting (its SYN dropped: the backlog is full): that wait is the request's
    ``connect_wait_ms``, not its release lag, and the verdict names the server."""
    accept = asyncio.Event()
    async with held_accept(accept) as port, asyncio.timeout(LIMIT):
        url = f"http://127.0.0.1:{port}"
        cfg = config(independent(tmp_path, [0, 0, 0]), url, http)
        async with Transport(TransportOptions.of_run(cfg, url)) as t:
            run = asyncio.ensure_future(replay(cfg, t))
            await until_syn_sent(port)
            seen_ns = time.perf_counter_ns()  # the held connect began before this
            accept.set()
            runner, records = await run
    assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
    # every request made its own connection; the held one (the longest wait: the other
    # two were queued by the kernel) went out after the accept loop was let go
    assert all(CONNECT_WAIT_MS in r.extra for r in records), [r.extra for r in records]
    held = max(records, key=lambda r: r.extra[CONNECT_WAIT_MS])
    assert held.dispatch_ns > seen_ns
    wait_ns = held.extra[CONNECT_WAIT_MS] * 1e6
    raw = runner.client_raw()
    # no request's release lag carries the held connect (before: the held one's did)
    assert max(raw["release_lag_ns"]) < wait_ns, (list(raw["release_lag_ns"]), wait_ns)
    assert sorted(raw["connect_wait_ns"]) == sorted(
        round(r.extra[CONNECT_WAIT_MS] * 1e6) for r in records)
    stats = client_stats([raw], None)
    assert stats["connect_wait_ms"]["count"] == 3
    assert stats["connect_wait_ms"]["max"] == pytest.approx(wait_ns / 1e6)
    (delay,) = stats["server_delays"]
    assert delay.startswith("server slow to accept connections: p99 ")
    assert delay.endswith(" ms over 3 connections")
    verdict = client_verdict(run_summary(stats))
    assert f"({delay}" in verdict
    # the table under the verdict shows the same numbers
    table = client_table(run_summary(stats))["value"]
    assert table["new connections"] == 3
    assert table["connect wait max (ms)"] == pytest.approx(stats["connect_wait_ms"]["max"])
    assert "The server delayed requests: server slow to accept" in client_caption(
        run_summary(stats))


def burn(rec: RequestRecord) -> None:
    """Real CPU work on the client's loop for each finished record (a sink that hashes)."""
    digest = hashlib.blake2b()
    block = rec.request_id.encode() * 4096
    for _ in range(1500):
        digest.update(block)


async def test_a_busy_client_is_blamed_for_its_own_lateness_not_the_server(http, tmp_path):
    """Requests due every 2 ms while each finished record costs the loop real CPU work:
    they go out late, the client is LIMITED by its release lag, and the connections it
    made meanwhile (noticed late by the busy loop) are not passed off as the server's."""
    async with serve_raw(answer_each) as url, asyncio.timeout(LIMIT):
        cfg = config(independent(tmp_path, [2.0 * i for i in range(30)]), url, http)
        async with Transport(TransportOptions.of_run(cfg, url)) as t:
            runner, records = await replay(cfg, t, sink=burn)
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    stats = client_stats([runner.client_raw()], None)
    assert stats["client_bottleneck"] is True
    assert any("release lag p99" in r for r in stats["client_bottleneck_reasons"])
    # the loop's own time is taken out of each connect: what is left is smaller than the
    # lateness the client caused itself
    connect = stats.get("connect_wait_ms") or {"max": 0.0}
    assert connect["max"] < stats["release_lag_ms"]["p99"], stats
    assert stats["server_delays"] == []


async def test_a_resent_requests_first_attempt_is_counted_apart(http):
    """A reused connection the server closes as the next request arrives, once the test
    has let it: the time from the first dispatch to the resend is ``stale_attempt_ms``,
    and the resend's new connection its ``connect_wait_ms``."""
    got, close = asyncio.Event(), asyncio.Event()
    conns = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns[0] += 1
        if conns[0] == 1:
            await read_request(reader)
            writer.write(cl(BODY))
            await writer.drain()
            await reader.read(1)  # the next request's first byte: closed, never answered
            got.set()
            await close.wait()
            return
        await answer_each(reader, writer)

    codec = BACKENDS.get("openai")
    async with (serve_raw(handle) as url, asyncio.timeout(LIMIT),
                Transport(TransportOptions(url, http=http)) as t):  # fmt: skip
        first = record("r0")
        await t.send(codec, WireRequest("r0", [1, 2, 3], 4), first)
        again = record("r1")
        resend = asyncio.ensure_future(t.send(codec, WireRequest("r1", [1, 2, 3], 4), again))
        await got.wait()
        got_ns = time.perf_counter_ns()  # after the first attempt was written
        await asyncio.sleep(0)  # (a turn of the loop: the server still holds it)
        set_ns = time.perf_counter_ns()  # before the resend can begin
        close.set()
        await resend
    assert again.status == "ok", again.error
    assert again.extra["stale_connection_retry"] is True
    stale_ns = again.extra[STALE_ATTEMPT_MS] * 1e6
    # the first attempt (written before the server read its byte) lasted at least until
    # the test let the server close it (the resend begins after)
    assert stale_ns >= set_ns - got_ns > 0
    assert CONNECT_WAIT_MS in again.extra
    assert CONNECT_WAIT_MS in first.extra and STALE_ATTEMPT_MS not in first.extra


def test_the_lag_of_a_resent_request_leaves_out_its_first_attempt_and_connect(http):
    m = SelfMeasure()
    m.dispatched(0)
    # due at 0, first attempt 0..400 ms (dead connection), connect 50 ms, sent at 452 ms
    m.lag(452_000_000, 0, (0, 50_000_000, 400_000_000))
    m.dispatched(10)
    m.lag(13, 10)
    raw = m.raw()
    assert list(raw["release_lag_ns"]) == [2_000_000, 3]
    assert list(raw["stale_attempt_ns"]) == [400_000_000]
    assert list(raw["connect_wait_ns"]) == [50_000_000]
    stats = client_stats([raw], None)
    assert stats["stale_attempt_ms"]["max"] == pytest.approx(400.0)
    assert stats["connect_wait_ms"]["count"] == 1
    assert stats["client_bottleneck"] is False
    assert client_table(run_summary({**stats, "resent_stale": 1}))["value"][
        "first attempt before a resend, max (ms)"] == pytest.approx(400.0)  # fmt: skip


@pytest.mark.parametrize(("n", "thin"), [
    (5, "release lag p99 of 5 releases: too few to show it at 95 % confidence, needs 299"),
    (20, "release lag p99 of 20 releases: too few to show it at 95 % confidence, needs 299"),
    (298, "release lag p99 of 298 releases: too few to show it at 95 % confidence,"
          " needs 299"),
    (299, None),
])  # fmt: skip
def test_an_ok_on_few_requests_says_it_cannot_show_it(http, n, thin):
    stats = {"cpu_util": 0.1, "release_lag_ms": {"p99": 1.0, "count": n},
             "steady_release_lag_ms": {"p99": None, "count": 0}}
    verdict = client_bottleneck(stats)
    assert verdict["client_bottleneck"] is False and verdict["client_ok_thin"] == thin
    line = client_verdict(run_summary({**stats, **verdict}))
    assert line == ("client OK" if thin is None else f"client OK ({thin})")
    caption = client_caption(run_summary({**stats, **verdict}))
    assert (thin or "kept up, not the bottleneck (") in caption


def test_a_limited_verdict_needs_no_count_and_its_numbers_are_the_tables(http):
    """One late request of 5 shows the client late (a broken bound needs no support: no
    ``client_ok_thin``), the p99 saying over how many releases it was read; the number the
    verdict prints is on the same side of its bound as the table's."""
    stats = {"cpu_util": 0.8996, "release_lag_ms": {"p99": 10.04, "count": 5},
             "steady_release_lag_ms": {"p99": None, "count": 0}}
    verdict = client_bottleneck(stats)
    assert verdict["client_ok_thin"] is None
    assert verdict["client_bottleneck_reasons"] == [
        "release lag p99 10.04 ms of 5 releases (> 10 ms)"]
    caption = client_caption(run_summary({**stats, **verdict}))
    assert "client CPU 89.96% of a core (bound 90%)" in caption
    assert "release lag p99 10.04 ms of 5 releases (bound 10 ms)" in caption
    table = client_table(run_summary({**stats, **verdict}))["value"]
    assert table["release lag p99 (ms)"] == pytest.approx(10.04)


def test_a_connection_noticed_late_by_a_busy_loop_is_the_clients_lateness(http):
    """The kernel says when the server's last packet of a connection came (TCP_INFO): a
    client that notices the made connection only after real CPU work keeps that work as
    its own; the server's part ends when the SYN-ACK came."""
    from workbench.backends.waits import connect_began, note_connect_wait

    listener = socket.create_server(("127.0.0.1", 0))
    rec = record("r0")
    began = connect_began(rec, time.perf_counter_ns(), tcp=True)
    with listener, socket.create_connection(listener.getsockname()) as sock:
        burn_0 = time.perf_counter_ns()
        for _ in range(8):  # the loop busy after the connection was made (~100 ms of CPU)
            burn(rec)
        burn_ns = time.perf_counter_ns() - burn_0
        now = time.perf_counter_ns()
        note_connect_wait(rec, began, now, sock)
    if not hasattr(socket, "TCP_INFO"):
        pytest.skip("this kernel cannot say when the peer's last packet came")
    assert began is not None
    # the kernel counts in ticks (at most 10 ms): the burn is off the wait but for one
    assert rec.extra[CONNECT_WAIT_MS] * 1e6 <= (now - began[0]) - burn_ns + 10_000_000


async def test_a_tls_handshake_the_server_holds_is_its_connect_wait(http, tmp_path):
    """The kernel makes the TCP connection (the backlog has room); the server accepts it,
    and so begins the TLS handshake, only once the test has seen it made: the hold is the
    request's connect wait, out of its release lag."""
    key, cert = self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    accept = asyncio.Event()
    async with held_accept(accept, server_ctx) as port, asyncio.timeout(LIMIT):
        url = f"https://127.0.0.1:{port}"
        cfg = config(independent(tmp_path, [0]), url, http)
        opts = dataclasses.replace(TransportOptions.of_run(cfg, url),
                                   ssl_context=ssl.create_default_context(cafile=str(cert)))
        async with Transport(opts) as t:
            run = asyncio.ensure_future(replay(cfg, t))
            await until_syn_sent(port, ESTABLISHED)  # made, its handshake not begun
            seen_ns = time.perf_counter_ns()
            await asyncio.sleep(0)  # (a turn of the loop: the handshake still held)
            set_ns = time.perf_counter_ns()
            accept.set()
            runner, records = await run
    (rec,) = records
    assert rec.status == "ok", rec.error
    assert rec.dispatch_ns > seen_ns
    wait_ns = rec.extra[CONNECT_WAIT_MS] * 1e6
    if http == "httptools":  # the kernel says when the server's last packet came
        assert wait_ns >= set_ns - seen_ns > 0  # the hold is inside the connect wait
    else:  # aiohttp: the loop's idle time meanwhile, a lower bound (waits.py), and this
        assert wait_ns >= 0  # server's handshake runs on the client's own loop
    # and out of the release lag: due at the run's start (arrival 0), sent at dispatch
    (lag,) = runner.client_raw()["release_lag_ns"]
    assert lag == pytest.approx(max(0, rec.dispatch_ns - runner.t0_ns - wait_ns), abs=1e3)
