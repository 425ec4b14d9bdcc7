"""Independent checks of the two HTTP clients (``executor.http``) against a hostile server.

A raw ``asyncio`` server on 127.0.0.1 plays one fault per test: how it writes the
response (tiny writes, odd chunked framing, 1xx, HTTP/1.0, close-delimited bodies,
SSE line ends, gzip, resets, silence...). Every fault runs once per client and the
two records must agree on what is not a time: status, HTTP status, error class,
token events and their id counts, usage. Every await is bounded by
``asyncio.timeout``; the server's own pauses are part of the fault, never a wait of
the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import read_request, serve_raw
from test_transport import LIMIT, REQ, record, sse, tok, usage

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.backends.waits import HELD_WAIT_MS
from workbench.metrics import summarize
from workbench.records import RequestRecord, RunResult
from workbench.report.headline import run_headline
from workbench.sse import SSEDecoder

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
GOOD = [tok([11]), tok([12, 13]), tok([14], "length"), usage(4, 3), sse(b"[DONE]")]
BODY = b"".join(GOOD)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def chunked(
    parts: list[bytes], fmt: bytes = b"%x", ext: bytes = b"", trailer: bytes = b""
) -> bytes:
    out = b"".join((fmt % len(p)) + ext + b"\r\n" + p + b"\r\n" for p in parts)
    return out + b"0" + ext + b"\r\n" + trailer + b"\r\n"


def cl(body: bytes, head: bytes = SSE_HEAD) -> bytes:
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def run(
    handler: Handler,
    http: str,
    n: int = 1,
    reqs: list[WireRequest] | None = None,
    backend: str = "openai",
    **opts: Any,
) -> list[RequestRecord]:
    """Send ``n`` requests one after another to a server running ``handler`` per
    connection (its third argument: the connection's ordinal)."""
    conns = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns[0] += 1
        await handler(reader, writer, conns[0])

    recs = []
    async with (
        serve_raw(handle) as url,
        asyncio.timeout(LIMIT),
        Transport(TransportOptions(url, http=http, **opts)) as t,
    ):
        for i in range(n):
            rec = record(f"r-{i}")
            req = reqs[i] if reqs else REQ
            await t.send(BACKENDS.get(backend), req, rec)
            recs.append(rec)
    return recs


def answer(data: bytes, *, keep: bool = True) -> Handler:
    """Reply ``data`` to every request on the connection (then wait for the client)."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while True:
            await read_request(reader)
            writer.write(data)
            await writer.drain()
            if not keep:
                return

    return h


def view(rec: RequestRecord) -> dict[str, Any]:
    err = rec.error
    return {
        "status": rec.status,
        "http_status": rec.http_status,
        "error": err.split(":")[0] if err else None,
        "token_counts": rec.token_counts,
        "usage": (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
        "cached_reported": rec.cached_tokens_reported,
        "finish": rec.finish_reason,
        "stale_retry": rec.extra.get("stale_connection_retry", False),
    }


async def both(handler: Handler, n: int = 1, **kw: Any) -> list[RequestRecord]:
    """The records of each client; asserts they agree; returns the httptools ones."""
    out = {http: await run(handler, http, n, **kw) for http in HTTP_CLIENTS}
    a, b = (out[h] for h in HTTP_CLIENTS)
    assert [view(r) for r in a] == [view(r) for r in b], (
        [r.error for r in a],
        [r.error for r in b],
    )
    return a


def ok4(rec: RequestRecord) -> None:
    assert rec.status == "ok", rec.error
    assert rec.token_counts == [1, 2, 1]
    assert (rec.completion_tokens, rec.cached_tokens) == (4, 3)


# -- framing ------------------------------------------------------------------------------


async def test_headers_split_across_many_tiny_writes():
    data = cl(BODY)

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )
        for i in range(0, len(data), 3):
            writer.write(data[i : i + 3])
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()

    (rec,) = await both(h)
    ok4(rec)


@pytest.mark.parametrize("fmt", [b"%x", b"%X", b"%08X"], ids=["lower", "upper", "zero-padded"])
async def test_chunked_with_extensions_trailers_and_any_hex_case(fmt: bytes):
    parts = [BODY[i : i + 200] for i in range(0, len(BODY), 200)]  # sizes > 9: hex letters
    assert any(b"%x" % len(p) != b"%X" % len(p) for p in parts)
    body = chunked(parts, fmt, ext=b';name="v";x=1', trailer=b"X-Trailer: done\r\n")
    for rec in await both(answer(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body), n=2):
        ok4(rec)


async def test_body_without_length_closed_by_the_server_each_time():
    data = SSE_HEAD + b"Connection: close\r\n\r\n" + BODY
    recs = await both(answer(data, keep=False), n=3)
    for rec in recs:
        ok4(rec)
        assert "stale_connection_retry" not in rec.extra


async def test_connection_close_header_after_each_response_with_a_length():
    recs = await both(answer(cl(BODY, SSE_HEAD + b"Connection: close\r\n"), keep=False), n=3)
    for rec in recs:
        ok4(rec)
        assert "stale_connection_retry" not in rec.extra


async def test_http10_response():
    data = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + BODY
    recs = await both(answer(data, keep=False), n=2)
    for rec in recs:
        ok4(rec)
        assert rec.http_status == 200


@pytest.mark.parametrize("interim", [b"100 Continue", b"102 Processing", b"103 Early Hints"])
async def test_interim_1xx_responses_before_the_answer(interim: bytes):
    data = b"HTTP/1.1 " + interim + b"\r\n\r\n" + cl(BODY)
    recs = await both(answer(data), n=2)
    for rec in recs:
        ok4(rec)
        assert rec.http_status == 200


@pytest.mark.parametrize("interim", [b"100 Continue", b"103 Early Hints"])
async def test_an_interim_1xx_response_in_its_own_read(interim: bytes):
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 " + interim + b"\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)  # the fault: the answer comes in a later read
            writer.write(cl(BODY))
            await writer.drain()

    for rec in await both(h, n=2):
        ok4(rec)
        assert rec.http_status == 200


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
async def test_no_body_statuses_are_http_errors_and_the_connection_stays_usable(status: bytes):
    recs = await both(answer(b"HTTP/1.1 " + status + b"\r\n\r\n"), n=2)
    for rec in recs:
        assert rec.status == "error" and rec.error is not None
        assert rec.error.startswith("HTTP " + status[:3].decode()), rec.error


@pytest.mark.parametrize("status", [b"429 Too Many Requests", b"503 Service Unavailable"])
async def test_a_retry_after_is_said_in_the_error_and_not_honoured(status: bytes):
    """A server that asks the client to back off (``Retry-After``): the request is an
    error naming the wait the server asked for, and is not sent again (a replay keeps its
    schedule; docs/wire-protocols.md, "Errors")."""
    body = orjson.dumps({"error": {"message": "overloaded"}})
    data = cl(body, b"HTTP/1.1 " + status + b"\r\nRetry-After: 7\r\n"
              b"Content-Type: application/json\r\n")
    for rec in await both(answer(data), n=2):
        assert rec.status == "error" and rec.http_status == int(status[:3])
        assert rec.error == (f"HTTP {status[:3].decode()}: {body.decode()} (the server asked "
                             "to retry after 7; not retried: a replay keeps its schedule)")


async def test_a_200_with_a_json_error_body_says_what_the_server_said():
    body = orjson.dumps({"error": {"message": "model 'x' not found", "code": 404}})
    data = cl(body, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    (rec,) = await both(answer(data))
    assert rec.status == "error" and rec.error is not None
    assert "model 'x' not found" in rec.error, rec.error


async def test_a_response_nobody_asked_for_does_not_land_on_the_next_request():
    """Pipelining garbage: the answer is followed in the same write by a second response
    for a request that was never sent; the next request must get its own answer."""
    junk = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\njunk!"
    recs = await both(answer(cl(BODY) + junk), n=2)
    for rec in recs:
        ok4(rec)
        assert rec.http_status == 200


async def test_an_unsolicited_response_while_idle_drops_the_connection():
    junk = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\njunk!"

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(cl(BODY))
        await writer.drain()
        if n == 1:
            writer.write(junk)
            await writer.drain()
        while True:
            await read_request(reader)
            writer.write(cl(BODY))
            await writer.drain()

    recs = await both(h, n=2)
    for rec in recs:
        ok4(rec)


# -- SSE ----------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\r\n", b"\r", b"\n"], ids=["crlf", "cr", "lf"])
async def test_sse_line_ends_comments_and_multiline_data(eol: bytes):
    events = []
    for ev in GOOD:
        payload = ev[len(b"data: ") : -2]
        if payload.startswith(b"{") and b"," in payload:  # JSON split over two data lines
            cut = payload.index(b",") + 1
            lines = [b"data: " + payload[:cut], b"data:" + payload[cut:]]
        else:
            lines = [b"data: " + payload]
        events.append(eol.join([b": keep-alive comment", b"event: message", *lines, b"id: 7"])
                      + eol + eol)  # fmt: skip
    body = b": hello" + eol + eol + b"".join(events)
    (rec,) = await both(answer(cl(body)))
    ok4(rec)


async def test_events_split_mid_utf8_and_mid_json_across_reads():
    text_tok = sse({"id": "c", "choices": [{"index": 0, "token_ids": [11], "text": "héllo — ✓"}]})
    body = text_tok + b"".join(GOOD[1:])
    cuts = [text_tok.index("é".encode()) + 1, text_tok.index(b"token_ids") + 4, len(text_tok) - 1]
    cuts = sorted([*cuts, len(text_tok) + 5, len(body) - 3])

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        prev = 0
        for c in [*cuts, len(body)]:
            writer.write(b"%x\r\n%b\r\n" % (c - prev, body[prev:c]))
            await writer.drain()
            await asyncio.sleep(0.01)  # separate reads (the fault, not a test wait)
            prev = c
        writer.write(b"0\r\n\r\n")
        await reader.read()

    (rec,) = await both(h)
    ok4(rec)


async def test_a_huge_single_event():
    # within the per-request event bound (docs/output-overrun.md: 1 MiB floor): parsed
    big = sse({"id": "c", "choices": [{"index": 0, "token_ids": [11], "text": "x" * 900_000}]})
    body = big + b"".join(GOOD[1:])
    (rec,) = await both(answer(cl(body)))
    ok4(rec)


async def test_an_event_past_the_bound_is_cut_in_both_clients():
    big = sse({"id": "c", "choices": [{"index": 0, "token_ids": [11], "text": "x" * 6_000_000}]})
    body = big + b"".join(GOOD[1:])
    (rec,) = await both(answer(cl(body)))
    assert rec.status == "error" and rec.error.startswith("output_overrun:"), rec.error


async def test_gzip_content_encoding():
    data = cl(gzip.compress(BODY), SSE_HEAD + b"Content-Encoding: gzip\r\n")
    (rec,) = await both(answer(data))
    ok4(rec)


# -- failures -----------------------------------------------------------------------------


async def test_slowloris_hits_the_idle_timeout():
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        for b in cl(BODY)[:40]:
            writer.write(bytes([b]))
            await writer.drain()
            await asyncio.sleep(1.0)

    (rec,) = await both(h, stream_idle_timeout_s=0.4)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("stream idle for more than 0.4s"), rec.error


async def test_slowloris_within_the_idle_timeout_ends_at_the_request_timeout():
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        for b in cl(BODY):
            writer.write(bytes([b]))
            await writer.drain()
            await asyncio.sleep(0.05)

    (rec,) = await both(h, stream_idle_timeout_s=2.0, request_timeout_s=0.5)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("request timed out after 0.5s"), rec.error


async def test_reset_mid_stream_keeps_the_tokens_so_far():
    async def h2(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%b\r\n" % (len(GOOD[0]), GOOD[0]))
        await writer.drain()
        await asyncio.sleep(0.05)  # the fault: a token, a pause, then RST
        sock = writer.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    (rec,) = await both(h2)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("server disconnected mid-stream after 1 token events"), rec.error
    assert rec.token_counts == [1]


async def test_accepts_then_never_answers():
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        await reader.read()

    (rec,) = await both(h, stream_idle_timeout_s=0.3)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("stream idle for more than 0.3s"), rec.error


async def test_keep_alive_closed_by_the_server_while_idle_between_requests():
    """The server keeps the first connection alive, then closes it when the next
    request arrives, without answering: sent once more on a new connection."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(cl(BODY))
        await writer.drain()
        if n == 1:
            await reader.read(1)  # the next request's first byte: close, unanswered
            return
        while True:
            await read_request(reader)
            writer.write(cl(BODY))
            await writer.drain()

    recs = await both(h, n=2)
    for rec in recs:
        ok4(rec)
    assert recs[1].extra.get("stale_connection_retry") is True


async def test_an_encoding_the_client_cannot_decode_is_named():
    data = cl(b"\x0b\x02\x80hello\x03", SSE_HEAD + b"Content-Encoding: br\r\n")
    (rec,) = await run(answer(data), "httptools")
    assert rec.status == "error" and rec.error is not None
    assert "content-encoding 'br'" in rec.error, rec.error


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_neither_client_asks_for_a_compressed_stream(http: str):
    heads: list[bytes] = []

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        heads.append(await read_request(reader))
        writer.write(cl(BODY))
        await writer.drain()
        await reader.read()

    (rec,) = await run(h, http)
    ok4(rec)
    enc = [line for line in heads[0].lower().split(b"\r\n") if line.startswith(b"accept-encoding")]
    assert enc in ([], [b"accept-encoding: identity"])


@pytest.mark.parametrize("framing", ["chunked", "close"])
async def test_a_server_that_never_stops_is_cut_in_both_clients(framing: str):
    """Token events forever, no [DONE]: cut at max_tokens + margin, same record."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        chunked_body = framing == "chunked"
        writer.write(SSE_HEAD + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked_body
                                 else b"Connection: close\r\n\r\n"))  # fmt: skip
        for i in range(100_000):  # bounded: the client cuts long before
            ev = tok([100 + i % 50])
            writer.write(b"%x\r\n%b\r\n" % (len(ev), ev) if chunked_body else ev)
            await writer.drain()

    (rec,) = await both(h)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("output_overrun"), rec.error
    over = rec.extra["output_overrun"]
    assert over["cut"] is True
    # the record ends at the event that crossed the limit, however the reads fell
    assert sum(rec.token_counts) == over["received"] == over["limit"] + 1
    assert len(rec.token_times_ns) == len(rec.token_counts)


# -- more framings ------------------------------------------------------------------------


async def test_sse_without_the_space_after_the_colon():
    (rec,) = await both(answer(cl(BODY.replace(b"data: ", b"data:"))))
    ok4(rec)


async def test_sse_stream_starting_with_a_byte_order_mark():
    """The SSE spec ignores a leading U+FEFF; it must not cost the first event."""
    (rec,) = await both(answer(cl("\ufeff".encode() + BODY)))
    ok4(rec)


async def test_a_status_line_without_a_reason_phrase():
    (rec,) = await both(answer(cl(BODY, b"HTTP/1.1 200\r\nContent-Type: text/event-stream\r\n")))
    ok4(rec)


async def test_large_response_headers():
    head = SSE_HEAD + b"".join(b"X-Pad-%d: %b\r\n" % (i, b"v" * 200) for i in range(100))
    (rec,) = await both(answer(cl(BODY, head)))
    ok4(rec)


@pytest.mark.parametrize("cut", ["content-length", "chunked"])
async def test_a_body_cut_short_by_the_close(cut: str):
    part = b"".join(GOOD[:2])
    if cut == "content-length":
        data = SSE_HEAD + b"Content-Length: %d\r\n\r\n" % (len(BODY) + 100) + part
    else:
        data = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%b" % (len(BODY), part)
    (rec,) = await both(answer(data, keep=False))
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("server disconnected mid-stream after 2 token events"), rec.error
    assert rec.token_counts == [1, 2]


async def test_the_headline_says_a_failure_once_and_then_what_its_reason_adds():
    """The failures part of the headline on the errors the clients write (docs/metrics.md,
    "Headline"): a reason that starts with its class shows only what it adds, not
    "server disconnected mid-stream ×2 (server disconnected mid-stream after 2 …)"."""
    part = b"".join(GOOD[:2])
    cut = SSE_HEAD + b"Content-Length: %d\r\n\r\n" % (len(BODY) + 100) + part
    recs = [r for http in HTTP_CLIENTS for r in await run(answer(cut, keep=False), http)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with asyncio.timeout(LIMIT), Transport(TransportOptions(f"127.0.0.1:{port}")) as t:
        refused = record("r-refused")
        await t.send(BACKENDS.get("openai"), REQ, refused)
    recs.append(refused)
    for i, r in enumerate(recs):
        r.request_id, r.unit_ordinal = f"r-{i}", i
    errors = [r.error or "" for r in recs]
    cut_error, refused_error = errors[0], errors[-1]
    assert cut_error.startswith("server disconnected mid-stream after 2 token events: ")
    assert refused_error.startswith(f"cannot connect to http://127.0.0.1:{port}: ")
    line = run_headline(summarize(RunResult("t", recs)))
    adds = cut_error.removeprefix("server disconnected mid-stream ")
    said = refused_error.removeprefix(f"cannot connect to http://127.0.0.1:{port}: ")
    assert (f"0/3 ok · 3 failed: server disconnected mid-stream ×2 ({adds}); "
            f"cannot connect to http://127.0.0.1:{port} ×1 ({said}) · ") in line, line
    assert line.count("server disconnected") == 1 and line.count("cannot connect") == 1


@pytest.mark.parametrize("framing", ["chunked", "close"])
async def test_a_stream_ended_cleanly_before_done_and_usage_says_so(framing: str):
    """The body ends whole (its last chunk, or the close of a close-delimited one) after
    two token events, with neither usage nor ``[DONE]``: a proxy's time limit, a server
    that gave up. Before, the record blamed the server for ignoring
    ``stream_options.include_usage``, which a server that sends ``[DONE]`` does."""
    part = GOOD[:2]
    data = (SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(part)
            if framing == "chunked" else SSE_HEAD + b"Connection: close\r\n\r\n" + b"".join(part))
    (rec,) = await both(answer(data, keep=framing == "chunked"))
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("stream ended before [DONE] and without a usage block"), rec.error
    assert "include_usage" not in rec.error and "after 2 token events" in rec.error, rec.error
    assert rec.token_counts == [1, 2]


async def test_a_close_delimited_body_without_done_and_without_final_newline():
    body = b"".join(GOOD[:-1]).rstrip(b"\n")
    (rec,) = await both(answer(SSE_HEAD + b"Connection: close\r\n\r\n" + body, keep=False))
    ok4(rec)


@pytest.mark.parametrize("status", [b"201 Created", b"429 Too Many Requests", b"503 Busy"])
async def test_other_statuses_are_http_errors_with_the_body(status: bytes):
    data = cl(b'{"error": "slow down"}', b"HTTP/1.1 " + status + b"\r\nRetry-After: 1\r\n")
    recs = await both(answer(data), n=2)
    for rec in recs:
        assert rec.status == "error" and rec.error is not None
        assert rec.error.startswith("HTTP " + status[:3].decode()) and "slow down" in rec.error


async def test_a_close_delimited_stream_ends_at_done_when_the_server_never_closes():
    """``Connection: close`` and no length, then [DONE], then the server holds the
    connection open: the answer is whole at [DONE] (nothing after it is read), so
    the request ends there; with no timeouts set it would otherwise never end."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"Connection: close\r\n\r\n" + BODY)
        await writer.drain()
        await reader.read()  # until the client goes away

    recs = await both(h, n=2, stream_idle_timeout_s=None, request_timeout_s=None)
    for rec in recs:
        ok4(rec)


@pytest.mark.parametrize("ping", [b": ping\n\n", sse({"id": "c", "choices": [{"index": 0,
                                                      "token_ids": [], "text": ""}]})],
                         ids=["comments", "empty-events"])  # fmt: skip
async def test_keep_alive_without_tokens_forever_hits_the_idle_timeout(ping: bytes):
    """A server that sends keep-alive comments or token-less events and never a token:
    the idle timeout bounds the time without a token event, not between any bytes
    (else the run never ends with default settings)."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%b\r\n" % (len(GOOD[0]), GOOD[0]))  # one token, then pings
        for _ in range(2000):  # bounded; the client gives up long before
            writer.write(b"%x\r\n%b\r\n" % (len(ping), ping))
            await writer.drain()
            await asyncio.sleep(0.02)  # the fault's pace (faster than the idle timeout)

    (rec,) = await both(h, stream_idle_timeout_s=0.3)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("stream idle for more than 0.3s"), rec.error
    assert rec.token_counts == [1]


async def test_a_response_head_trickled_forever_hits_the_idle_timeout():
    """Slowloris on the head: a header line that never ends, one byte at a time, each
    well within the idle timeout; the head must be whole within the idle timeout of
    the request's dispatch."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"X-Slow: ")
        for _ in range(2000):  # bounded; the client gives up long before
            writer.write(b"a")
            await writer.drain()
            await asyncio.sleep(0.02)

    (rec,) = await both(h, stream_idle_timeout_s=0.4)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("stream idle for more than 0.4s"), rec.error


async def test_a_response_head_that_never_ends_is_refused_at_64_kb():
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for i in range(100_000):  # bounded; the client gives up long before
            writer.write(b"X-Pad-%d: %b\r\n" % (i, b"v" * 100))
            await writer.drain()

    (rec,) = await run(h, "httptools")
    assert rec.status == "error" and rec.error is not None
    assert "response head" in rec.error, rec.error


@pytest.mark.parametrize(
    "head",
    [b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
     b"Content-Length: 10\r\nContent-Length: 12\r\n"],
    ids=["te-and-cl", "two-lengths"],
)  # fmt: skip
async def test_ambiguous_framing_is_refused_by_both(head: bytes):
    data = SSE_HEAD + head + b"\r\n" + chunked([BODY])
    (rec,) = await both(answer(data))
    assert rec.status == "error"


async def test_a_garbled_status_line_is_malformed_in_both():
    (rec,) = await both(answer(b"HTTP/1.1 2x0 WHAT\r\n\r\n"))
    assert rec.status == "error" and rec.error is not None
    assert rec.error.startswith("malformed HTTP response from the server"), rec.error


@pytest.mark.parametrize(
    ("field", "value"),
    [("prompt_tokens", "4"), ("completion_tokens", 4.5), ("cached_tokens", "n/a"),
     ("cached_tokens", -3), ("prompt_tokens", True)],
)  # fmt: skip
async def test_a_usage_count_that_is_not_a_count_is_a_clear_error(field: str, value: Any):
    """A server's usage with a string, negative, fractional or boolean count: the record
    says which field, rather than storing it (the summary would crash on it later)."""
    u = {"prompt_tokens": 4, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}}
    if field == "cached_tokens":
        u["prompt_tokens_details"] = {"cached_tokens": value}
    else:
        u[field] = value
    body = b"".join(GOOD[:3]) + sse({"id": "cmpl-1", "choices": [], "usage": u}) + GOOD[-1]
    (rec,) = await both(answer(cl(body)))
    assert rec.status == "error" and rec.error is not None
    assert f"usage {field}" in rec.error and repr(value) in rec.error, rec.error


async def test_a_text_only_chat_stream_one_byte_per_write_counts_the_same_events():
    def chat(content: str | None, finish: str | None = None) -> bytes:
        delta = {"role": "assistant"} if content is None else {"content": content}
        return sse({"id": "c", "choices": [{"index": 0, "delta": delta,
                                            "finish_reason": finish}]})  # fmt: skip

    u = {"prompt_tokens": 4, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}}
    events = [chat(None), chat("hé"), chat(""), chat("llo"), chat(" wö"), chat("rld", "length")]
    body = b"".join([*events, sse({"id": "c", "choices": [], "usage": u}), sse(b"[DONE]")])

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )
        data = cl(body)
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()

    (rec,) = await both(h, backend="openai-chat")
    assert rec.status == "ok", rec.error
    assert len(rec.token_counts) == 4 and (rec.completion_tokens, rec.cached_tokens) == (4, 3)


# -- the SSE decoder under any split ------------------------------------------------------

_value = st.binary(max_size=12).filter(lambda b: not set(b) & {10, 13})
_line = st.one_of(
    st.builds(lambda v: b"data: " + v, _value),
    st.builds(lambda v: b"data:" + v, _value),
    st.just(b"data"), st.just(b": comment"), st.just(b"event: x"), st.just(b"id: 1"), st.just(b""),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line, max_size=25),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_sse_payloads_do_not_depend_on_how_reads_split_the_stream(
    lines: list[bytes], eol: bytes, cuts: list[int]
) -> None:
    stream = b"".join(line + eol for line in lines)
    whole = SSEDecoder()
    expected = whole.feed(stream) + whole.close()
    split = SSEDecoder()
    got: list[bytes] = []
    prev = 0
    for c in sorted({min(c, len(stream)) for c in cuts}):
        got += split.feed(stream[prev:c])
        prev = c
    got += split.feed(stream[prev:]) + split.close()
    assert got == expected
    assert expected == _reference(stream)


def _reference(stream: bytes) -> list[bytes]:
    """The SSE spec's event stream interpretation (data fields only), line by line; a
    last event without its blank line is kept (the decoder's documented choice)."""
    import re

    events, data = [], []
    for line in re.split(rb"\r\n|\r|\n", stream):
        if not line:
            if data:
                events.append(b"\n".join(data))
            data = []
        elif line == b"data" or line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        events.append(b"\n".join(data))
    return events


async def test_a_stray_crlf_after_the_answer_is_harmless():
    recs = await both(answer(cl(BODY) + b"\r\n"), n=3)
    for rec in recs:
        ok4(rec)


async def test_a_fresh_connection_reset_before_any_answer_is_not_retried():
    """Only a *kept-alive* connection found dead may be sent once more; a new one
    that the server resets on the request is the server's answer."""
    got = [0]

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        got[0] += 1
        sock = writer.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    (rec,) = await both(h)
    assert rec.status == "error" and "stale_connection_retry" not in rec.extra
    assert got[0] == 2  # one request per client


@pytest.mark.parametrize("n", [1, 3])
async def test_a_101_switching_protocols_answer_is_a_clean_request_error(n: int, caplog):
    """An upgrade nobody asked for: each request fails with one error class, no traceback
    from the loop (httptools raises ``HttpParserUpgrade``, which is no ``HttpParserError``:
    it escaped ``data_received``, one 'Fatal error' traceback per request)."""
    data = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    recs = await both(answer(data + b"\x81\x05hello"), n=n)
    from workbench.report.tables import error_class

    classes = {error_class(r.status, r.error, r.http_status) for r in recs}
    assert classes == {"error: HTTP 101"}, [r.error for r in recs]  # as a 404's
    assert "Traceback" not in caplog.text and "Fatal error" not in caplog.text, caplog.text
    assert not [r for r in caplog.records if r.exc_info], caplog.text


# -- a stream held open after [DONE] ------------------------------------------------------

HELD = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(GOOD)[: -len(b"0\r\n\r\n")]


@pytest.mark.parametrize("held", [HELD, cl(BODY)[: -len(BODY)].replace(
    b"Length: %d" % len(BODY), b"Length: %d" % (len(BODY) + 10)) + BODY],
    ids=["chunked", "content-length"])
@pytest.mark.parametrize("bound", [0, 1])
@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_stream_held_open_after_done_ends_the_request_at_done(
    http: str, bound: int, held: bytes
):
    """The server sends ``data: [DONE]`` but never the body's end (its last chunk, or
    the bytes its Content-Length promised): each request
    ends at [DONE] (not at the 30 s stream idle timeout, past the test's bound), and the
    client closes the held connection when the next request has waited 1 s for it (with
    ``max_connections`` 1 too: the held connection's slot is freed). After that one
    connection reads on as evidence (at most 1 s, or until a request needs its slot), the
    others are dropped at [DONE] (``test_held_streams.py``)."""
    closed_by_client: list[int] = []

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(held)
        await writer.drain()
        with contextlib.suppress(ConnectionError):  # an abort may come as a reset
            await reader.read()  # held until the client closes the connection
        closed_by_client.append(n)

    recs = await run(h, http, n=3, stream_idle_timeout_s=30.0, max_connections=bound)
    for rec in recs:
        ok4(rec)
    # the first, by the client, a second before any other; with one slot, the second (the
    # probe) gives its slot up to the third request (the last closes come as the client
    # closes: Python 3.11's server does not wait for them)
    assert closed_by_client[: bound + 1] == [1, 2][: bound + 1], closed_by_client
    # the second waited for the first's held connection (the server's doing, not the
    # client's lag: docs/metrics.md, "Client"); the third found the server known to hold
    waits = [rec.extra.get(HELD_WAIT_MS) for rec in recs]
    assert waits[0] is None and waits[1] > 0 and waits[2] is None, waits


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_body_ending_shortly_after_done_keeps_its_connection(http: str):
    """The chunked body's end comes a moment after ``data: [DONE]`` (another write, as a
    server writing its last chunk separately does): the request ends at [DONE] and its
    connection is read to the body's end and reused: one connection for three requests."""

    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(HELD)
            await writer.drain()
            await asyncio.sleep(0.05)  # the fault: the body's end a moment later
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    conns: list[int] = []

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        conns.append(n)
        await h(reader, writer, n)

    recs = await run(count, http, n=3, stream_idle_timeout_s=30.0)
    for rec in recs:
        ok4(rec)
    assert conns == [1], conns


# -- what a careful user's servers do (s24 probes: each passed as it stands) ---------------

_ERROR_EVENT = sse({"error": {"message": "boom", "type": "server_error", "code": 500}})
_USAGE_NO_COMPLETION = sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 4}})


@pytest.mark.parametrize(("data", "want"), [
    (cl(BODY + sse(b"[DONE]")), "ok"),  # [DONE] twice
    (cl(BODY + tok([99])), "ok"),  # an event after [DONE]: not counted
    (SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked([*GOOD, tok([99])]), "ok"),
    (cl(BODY.replace(b"\n", b"\r")), "ok"),  # CR-only line ends
    (cl(b": ping\n\n" + b"".join(g + b": ping\n\n" for g in GOOD)), "ok"),  # keep-alives
    (cl(tok([11]) + _ERROR_EVENT + sse(b"[DONE]")), "server error in the answer: boom"),
    (cl(tok([11]) + _ERROR_EVENT), "server error in the answer: boom"),  # and no [DONE]
    (cl(orjson.dumps({"id": "c", "choices": [{"index": 0, "text": "hi"}]}),
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"),
     "HTTP 200 with a JSON body instead of an event stream"),  # stream asked, JSON given
], ids=["done-twice", "event-after-done", "event-after-done-chunked", "cr", "ping",
        "error-event", "error-event-no-done", "json-200"])
async def test_careful_user_faults(data: bytes, want: str):
    for rec in await both(answer(data), n=2):
        if want == "ok":
            ok4(rec)
        else:
            assert rec.status == "error" and (rec.error or "").startswith(want), rec.error


async def test_usage_without_completion_tokens_leaves_the_count_to_the_stream():
    """``usage`` in a last chunk with ``choices: []`` and no ``completion_tokens``: the
    record is ok, its token events counted, ``completion_tokens`` unknown (None; the
    metrics then count the stream's tokens, docs/metrics.md ``output_tokens``)."""
    data = cl(tok([11]) + tok([12, 13]) + tok([14], "length") + _USAGE_NO_COMPLETION
              + sse(b"[DONE]"))
    for rec in await both(answer(data), n=2):
        assert rec.status == "ok" and rec.token_counts == [1, 2, 1], rec.error
        assert rec.completion_tokens is None and rec.finish_reason == "length"
