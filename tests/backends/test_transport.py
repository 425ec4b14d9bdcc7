"""Transport against scripted aiohttp servers on 127.0.0.1 port 0, with both HTTP clients.

Each server plays a script: bytes to write, floats to sleep, ``CUT`` to drop the
connection, an async callable to wait on (e.g. until the client has read an event).
Assertions are on invariants (counts, order, text), never on wall-clock windows;
every await runs under ``asyncio.timeout``. Every test runs once per
``executor.http`` client (``httptools``, ``aiohttp``): same records.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from loopback import read_request, serve_app, serve_raw
from multidict import CIMultiDict

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import (
    HTTP_CLIENTS,
    Transport,
    TransportOptions,
    normalize_base_url,
)
from workbench.records import RequestRecord

CUT = object()
LIMIT = 10.0
CLIENT = {"http": HTTP_CLIENTS[0]}


@pytest.fixture(autouse=True, params=HTTP_CLIENTS)
def http_client(request: pytest.FixtureRequest) -> str:
    """Run the test with each client; ``options`` builds TransportOptions for it."""
    CLIENT["http"] = request.param
    yield request.param
    CLIENT["http"] = HTTP_CLIENTS[0]


def options(base_url: str, **opts: Any) -> TransportOptions:
    return TransportOptions(base_url, **{"http": CLIENT["http"], **opts})


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def tok(ids: list[int], finish: str | None = None) -> bytes:
    return sse(
        {"id": "cmpl-1", "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}]}
    )


def usage(completion: int, cached: int = 0) -> bytes:
    u = {
        "prompt_tokens": 4,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return sse({"id": "cmpl-1", "choices": [], "usage": u})


GOOD = [tok([11]), 0.01, tok([12, 13]), 0.01, tok([14], "length"), usage(4, 3), sse(b"[DONE]")]


class Script:
    """A route that records each request (and the client's address it came from) and plays
    ``steps`` back as a stream."""

    def __init__(self, steps: list[Any], status: int = 200) -> None:
        self.steps = steps
        self.status = status
        self.requests: list[tuple[CIMultiDict[str], Any]] = []
        self.arrived = asyncio.Event()
        self.peers: list[Any] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        self.peers.append(transport.get_extra_info("peername") if transport else None)
        self.requests.append((request.headers.copy(), await request.json()))
        self.arrived.set()
        if self.status != 200:
            return web.Response(status=self.status, text="engine exploded: CUDA OOM")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for step in self.steps:
            if step is CUT:
                assert request.transport is not None
                request.transport.abort()
                return resp
            if isinstance(step, float):
                await asyncio.sleep(step)
            elif callable(step):
                await step()
            else:
                await resp.write(step)
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def serve(script: Script, path: str = "/v1/completions") -> AsyncIterator[str]:

    async def handler(request: web.Request) -> web.StreamResponse:
        return await script(request)

    async with serve_app([web.post(path, handler)]) as url:
        yield url


def read_events(rec: RequestRecord, n: int) -> Any:
    """A script step: wait (bounded by the test's timeout) until the client has read ``n``
    token events into ``rec`` (the record's lists fill as events are decoded)."""

    async def wait() -> None:
        while len(rec.token_counts) < n:
            await asyncio.sleep(0.001)

    return wait


def record(rid: str = "r-1") -> RequestRecord:
    return RequestRecord(
        run_id="t",
        request_id=rid,
        unit_ordinal=0,
        session_id="s",
        round_idx=0,
        backend="openai",
        policy=None,
        planned_prefix_tokens=0,
        planned_input_tokens=4,
        planned_output_tokens=4,
    )


REQ = WireRequest(request_id="r-1", prompt_ids=[1, 2, 3, 4], max_tokens=4)


async def send(
    script: Script, backend: str = "openai", path: str = "/v1/completions",
    rec: RequestRecord | None = None, **opts: Any
) -> tuple[RequestRecord, list[int] | None]:
    rec = rec or record()
    async with (
        asyncio.timeout(LIMIT),
        serve(script, path) as url,
        Transport(options(url + "/v1/", **opts)) as transport,
    ):
        ids = await transport.send(BACKENDS.get(backend), REQ, rec)
    return rec, ids


async def test_success_fills_record_with_consistent_times():
    script = Script(GOOD)
    rec, ids = await send(script)
    assert rec.status == "ok", rec.error
    assert ids == [11, 12, 13, 14]
    assert rec.token_counts == [1, 2, 1]
    assert rec.first_token_ns == rec.token_times_ns[0]
    assert rec.last_token_ns == rec.token_times_ns[-1]
    assert rec.token_times_ns == sorted(rec.token_times_ns)
    assert rec.dispatch_ns is not None and rec.end_ns is not None
    assert rec.dispatch_ns < rec.first_token_ns <= rec.last_token_ns <= rec.end_ns
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (4, 4, 3)
    assert rec.cached_tokens_reported
    assert (rec.http_status, rec.finish_reason, rec.server_request_id) == (200, "length", "cmpl-1")
    assert rec.sent_prompt_tokens == 4 and rec.error is None


async def test_request_id_in_header_and_body():
    script = Script(GOOD)
    await send(script)
    headers, body = script.requests[0]
    assert headers["x-request-id"] == "r-1"
    assert body["rid"] == "r-1"


async def test_vllm_tokens_route_has_no_v1_and_body_request_id():
    steps = [
        sse({"request_id": "g-r-1", "choices": [{"token_ids": [5], "finish_reason": "length"}]}),
        sse(
            {
                "request_id": "g-r-1",
                "choices": [],
                "usage": {"prompt_tokens": 4, "completion_tokens": 1},
            }
        ),
        sse(b"[DONE]"),
    ]
    script = Script(steps)
    rec, ids = await send(script, "vllm-tokens", "/inference/v1/generate")
    assert ids == [5] and rec.status == "ok"
    assert script.requests[0][1]["request_id"] == "r-1"
    assert (rec.cached_tokens, rec.cached_tokens_reported) == (0, False)


async def test_api_key_from_env_is_sent_but_never_recorded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WB_TEST_KEY", "sk-secret-123")
    script = Script(GOOD)
    rec, _ = await send(script, api_key_env="WB_TEST_KEY")
    assert script.requests[0][0]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in orjson.dumps(rec.to_dict()).decode()


async def test_no_authorization_header_without_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("WB_TEST_KEY", raising=False)
    script = Script(GOOD)
    await send(script, api_key_env="WB_TEST_KEY")
    assert "Authorization" not in script.requests[0][0]


async def test_ttft_counts_only_events_with_token_ids():
    role_only = sse({"id": "c", "choices": [{"index": 0, "token_ids": [], "text": ""}]})
    script = Script([role_only, 0.2, *GOOD])
    rec, _ = await send(script)
    assert rec.status == "ok"
    assert rec.token_counts == [1, 2, 1]
    assert rec.first_token_ns is not None and rec.dispatch_ns is not None
    assert rec.first_token_ns - rec.dispatch_ns >= 200_000_000  # the role chunk came earlier


async def test_http_500_records_status_and_body():
    rec, ids = await send(Script([], status=500))
    assert ids is None
    assert rec.status == "error" and rec.http_status == 500
    assert rec.error is not None and "HTTP 500" in rec.error and "CUDA OOM" in rec.error
    assert rec.end_ns is not None


async def test_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = record()
    async with (
        asyncio.timeout(LIMIT),
        Transport(options(f"127.0.0.1:{port}")) as transport,
    ):
        ids = await transport.send(BACKENDS.get("openai"), REQ, rec)
    assert ids is None and rec.status == "error"
    assert rec.error is not None and "cannot connect" in rec.error
    assert rec.http_status is None and rec.end_ns is not None


async def test_disconnect_mid_stream_keeps_partial_tokens():
    # cut only once both events are read: a reset that overtakes unread bytes drops them
    # from the receive queue, which under load made this fail whenever the client lagged
    rec = record()
    rec, ids = await send(Script([tok([11]), tok([12]), read_events(rec, 2), CUT]), rec=rec)
    assert ids is None and rec.status == "error"
    assert rec.error is not None and "disconnected" in rec.error
    assert rec.token_counts == [1, 1]
    assert rec.first_token_ns == rec.token_times_ns[0]


ERROR = sse({"error": {"message": "engine died", "type": "InternalError"}})


@pytest.mark.parametrize("events", [1, 2, 12], ids=["own-read", "same-read", "feed-all"])
async def test_an_error_object_mid_stream_keeps_the_tokens_before_it(events: int):
    """Tokens, then ``{"error": ...}``: the record is an error and keeps every token
    event that came before the error object, whether the error shares their read (``2``
    events: ``feed_one`` each; ``12``: the parser's ``feed_all``) or comes on its own."""
    rec = record()
    toks = [tok([100 + i]) for i in range(events)]
    steps: list[Any] = (
        [*toks, read_events(rec, events), ERROR] if events == 1 else [b"".join([*toks, ERROR])]
    )
    rec, ids = await send(Script(steps), rec=rec)
    assert ids is None and rec.status == "error"
    assert rec.error is not None and "engine died" in rec.error
    assert rec.token_counts == [1] * events
    assert rec.first_token_ns == rec.token_times_ns[0] is not None
    assert rec.last_token_ns == rec.token_times_ns[-1]


async def test_stall_hits_the_idle_timeout():
    rec, _ = await send(Script([tok([11]), 30.0, tok([12])]), stream_idle_timeout_s=0.3)
    assert rec.status == "error"
    assert rec.error is not None and "idle" in rec.error and "0.3" in rec.error
    assert rec.token_counts == [1]
    assert rec.first_token_ns == rec.last_token_ns == rec.token_times_ns[0]


async def test_request_timeout():
    steps: list[Any] = [x for _ in range(200) for x in (tok([1]), 0.05)]
    rec, _ = await send(Script(steps), request_timeout_s=0.4)
    assert rec.status == "error"
    assert rec.error is not None and "timed out after 0.4" in rec.error
    assert len(rec.token_counts) >= 1


async def test_missing_usage_is_an_error():
    rec, ids = await send(Script([tok([11]), tok([12], "length"), sse(b"[DONE]")]))
    assert ids is None and rec.status == "error"
    assert rec.error is not None and "usage" in rec.error
    assert rec.token_counts == [1, 1]


async def test_missing_done_is_tolerated_when_usage_arrived():
    rec, ids = await send(Script([tok([11, 12, 13, 14], "length"), usage(4)]))
    assert rec.status == "ok" and ids == [11, 12, 13, 14]


async def test_cumulative_sglang_stream_fails_naming_the_flag():
    def c(ids: list[int]) -> bytes:
        meta = {"id": "x", "prompt_tokens": 4, "completion_tokens": len(ids), "cached_tokens": 0}
        return sse({"output_ids": ids, "meta_info": meta})

    rec, ids = await send(Script([c([7]), c([7, 8]), c([7, 8, 9])]), "sglang-tokens", "/generate")
    assert ids is None and rec.status == "error"
    assert rec.error is not None and "--stream-output" in rec.error


async def test_sglang_prompt_echo_trimmed_and_counted():
    def c(ids: list[int], done: int) -> bytes:
        meta = {"id": "x", "prompt_tokens": 4, "completion_tokens": done, "cached_tokens": 1}
        return sse({"output_ids": ids, "meta_info": meta})

    steps = [c([3, 4], 0), c([7], 1), c([8], 2), c([9], 3), c([10], 4), sse(b"[DONE]")]
    rec, ids = await send(Script(steps), "sglang-tokens", "/generate")
    assert rec.status == "ok", rec.error
    assert ids == [7, 8, 9, 10]
    assert rec.echoed_prompt_tokens == 2
    assert rec.token_counts == [1, 1, 1, 1]


async def test_cancel_marks_record_and_propagates():
    rec = record()
    script = Script([tok([11]), 30.0])
    async with (
        asyncio.timeout(LIMIT),
        serve(script) as url,
        Transport(options(url)) as transport,
    ):
        task = asyncio.create_task(transport.send(BACKENDS.get("openai"), REQ, rec))
        await read_events(rec, 1)()  # mid-stream: the first event is in
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.status == "cancelled" and rec.end_ns is not None


async def test_one_session_serves_concurrent_requests():
    script = Script(GOOD)
    recs = [record(f"r-{i}") for i in range(8)]
    async with (
        asyncio.timeout(LIMIT),
        serve(script) as url,
        Transport(options(url, max_connections=4)) as transport,
    ):
        codec = BACKENDS.get("openai")
        async with asyncio.TaskGroup() as tg:
            for i, rec in enumerate(recs):
                req = WireRequest(f"r-{i}", [1, 2, 3, 4], 4)
                tg.create_task(transport.send(codec, req, rec))
    assert all(r.status == "ok" for r in recs)
    assert sorted(h["x-request-id"] for h, _ in script.requests) == sorted(
        r.request_id for r in recs
    )


def test_normalize_base_url():
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000"
    assert normalize_base_url("h:8000") == "http://h:8000"
    assert normalize_base_url("https://x/api/") == "https://x/api"


async def test_send_outside_context_is_a_programming_error():
    with pytest.raises(RuntimeError, match="async with"):
        await Transport(options("h:1")).send(
            BACKENDS.get("openai"), REQ, record()
        )


async def test_connection_is_reused_after_done():
    """Reading past [DONE] to the end of the body keeps the connection pooled."""
    script = Script(GOOD)
    async with asyncio.timeout(LIMIT), serve(script) as url, Transport(options(url)) as transport:
        for i in range(3):
            rec = record(f"r-{i}")
            await transport.send(BACKENDS.get("openai"), REQ, rec)
            assert rec.status == "ok"
    assert len(script.peers) == 3 and len(set(script.peers)) == 1


async def test_a_request_lost_on_a_stale_pooled_connection_is_sent_once_more():
    """llama-server closes after every stream while advertising keep-alive: the next
    request on that pooled connection dies before any response byte; it is sent once
    more on a fresh connection and flagged. A refusal or a mid-stream drop is not retried."""
    body = b"".join(s for s in GOOD if isinstance(s, bytes))
    answered: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        answered.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Connection: keep-alive\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        await read_request(reader)  # the stale connection: gone without a byte of answer

    codec = BACKENDS.get("openai")
    recs = []
    async with serve_raw(handle) as url, asyncio.timeout(LIMIT), Transport(options(url)) as t:
        for k in range(3):
            rec = record(f"r{k}")
            out = await t.send(codec, WireRequest(f"r{k}", [1, 2, 3, 4], 4), rec)
            assert rec.status == "ok", rec.error
            assert out == [11, 12, 13, 14]
            recs.append(rec)
    assert len(answered) == 3
    assert "stale_connection_retry" not in recs[0].extra
    assert recs[1].extra.get("stale_connection_retry")
    # httptools pools the resend's new connection, so the next request meets it closed
    # too; aiohttp's resends go on connections it never pools (docs/wire-protocols.md,
    # "Idle connections"), so the next one opens its own
    resent = bool(recs[2].extra.get("stale_connection_retry"))
    assert resent is (CLIENT["http"] == "httptools")



async def test_dispatch_is_stamped_when_the_request_bytes_go_out():
    """The request's bytes are handed to the transport inside ``send``, and
    ``dispatch_ns`` is stamped as they are.

    A callback queued right behind the send blocks the loop for 50 ms: the
    httptools client's write and its stamp come before it runs; with either
    client the stamp precedes the server's arrival stamp.
    """
    import time

    from workbench.backends import BACKENDS
    from workbench.backends.base import WireRequest
    from workbench.clock import WallClock
    from workbench.records import RequestRecord
    from workbench.sim.server import serve_sim

    clock = WallClock()
    blocked = []

    def blocker():
        blocked.append(clock.now_ns())
        time.sleep(0.05)

    async with serve_sim(speedup=50.0) as sim, Transport(options(sim.base_url)) as t:
        await t.warm(1)
        rec = RequestRecord("x", "stamp-1", 0, "s", 0, "openai", None, 0, 32, 2)
        req = WireRequest("stamp-1", list(range(32)), 2)
        before = clock.now_ns()
        task = asyncio.ensure_future(t.send(BACKENDS.get("openai"), req, rec))
        asyncio.get_running_loop().call_soon(blocker)
        await task
        (row,) = [r for r in sim.debug_requests() if r["request_id"] == "stamp-1"]
    assert rec.status == "ok"
    assert before < rec.dispatch_ns < row["arrival_ns"]
    if CLIENT["http"] == "httptools":  # the aiohttp fallback writes from a task (Python 3.11)
        assert rec.dispatch_ns < blocked[0]

