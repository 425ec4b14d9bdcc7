"""A minimal fake OpenAI streaming server that logs its own per-request truth.

Serves ``POST /v1/completions`` (token-id prompts, ``return_token_ids``) and
``POST /v1/chat/completions`` (text messages, ``delta.content``) as SSE, one
event per output token, then a usage chunk and ``data: [DONE]``; the number of
output tokens is the request's ``max_tokens`` / ``max_completion_tokens``.

It is written on a raw ``asyncio.Protocol`` (HTTP/1.1 keep-alive, chunked
responses, pre-encoded events, one ``loop.call_at`` timer per pending token,
no coroutine per request) so that at 256 streams × 100 tokens/s it costs a
fraction of a core and the *clients* are what a benchmark measures. Requests
must carry ``Content-Length`` (every HTTP client here does).

Two modes:

* ``instant``: the whole response is written in one write as soon as the
  request body is in.
* ``timed``: the first token event is written ``--ttft-ms`` after the request
  arrived, token ``k`` at ``first + k·--itl-ms`` (absolute schedule, so late
  wakeups do not accumulate); the last token travels with usage and ``[DONE]``.

``--hold-after-done`` (instant mode): each streamed answer is written without the
chunked body's last chunk, and the connection is held (never answered again) until the
client closes it, as some proxies and servers hold a stream open after ``[DONE]``;
``--hold-first N`` holds only the first N answers (a server that stalled once).
``--last-chunk-ms MS`` (instant mode): an answer not held writes its body's last chunk
MS after the rest, in a write of its own (as servers that end the body separately do).
Each truth entry names its connection (``conn``, numbered from 1 as they are accepted).
``--die-after N``: the server dies at its (N+1)-th completion request, as a killed engine
does: its listening socket closes and every connection is reset (RST), that request's
too, so later connections are refused (``FakeServer.kill``; ``died`` is set); with
``--die-gently`` it only stops listening there and still answers the requests it has, that
one included, as llama.cpp does after SIGTERM.

Truth (``GET /debug/requests``; ``POST /debug/reset`` clears it): per request
``request_id`` (``x-request-id`` header, else ``fake-N``), ``arrival_ns`` (the
request's bytes were read), ``first_token_ns`` and ``token_ns`` (each token
event was handed to the kernel), all ``time.perf_counter_ns()`` =
CLOCK_MONOTONIC, the same clock base as any client on this host. Binds
127.0.0.1 only. ``/v1/models`` and ``/health`` answer; anything else is 404.

Run: ``python bench/fake_server.py --mode timed --ttft-ms 50 --itl-ms 10``;
it prints ``LISTENING http://127.0.0.1:PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections import deque
from functools import lru_cache
from typing import Any

import orjson

TRUTH_MAX = 200_000
DONE = b"data: [DONE]\n\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
LAST_CHUNK = b"0\r\n\r\n"


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _token_event(kind: str, k: int, n: int) -> bytes:
    tok = 1000 + (k * 7919) % 30000
    fin = "length" if k == n - 1 else None
    if kind == "chat":
        delta = {"role": "assistant", "content": " tok"} if k == 0 else {"content": " tok"}
        return _sse({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                     "model": "fake", "choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": fin}]})  # fmt: skip
    return _sse({"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": "fake",
                 "choices": [{"index": 0, "text": " tok", "token_ids": [tok],
                              "finish_reason": fin}]})  # fmt: skip


@lru_cache(maxsize=4096)
def _events(kind: str, n: int, prompt_tokens: int) -> tuple[bytes, ...]:
    """HTTP chunks of the n token events; the last one carries usage + [DONE] + end."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
             "total_tokens": prompt_tokens + n,
             "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip
    tail = _sse({"id": "fake", "object": "chunk", "created": 0, "model": "fake", "choices": [],
                 "usage": usage}) + DONE  # fmt: skip
    events = [_token_event(kind, k, n) for k in range(n)]
    chunks = [_chunk(e) for e in events[:-1]]
    chunks.append(_chunk(events[-1] + tail) + LAST_CHUNK)
    return tuple(chunks)


@lru_cache(maxsize=4096)
def _instant(kind: str, n: int, prompt_tokens: int) -> bytes:
    return SSE_HEAD + b"".join(_events(kind, n, prompt_tokens))


def _json_response(obj: Any, status: str = "200 OK") -> bytes:
    body = orjson.dumps(obj)
    return (b"HTTP/1.1 %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (status.encode(), len(body), body))  # fmt: skip


class FakeServer:
    def __init__(self, mode: str, ttft_ms: float, itl_ms: float, hold: bool = False,
                 hold_first: int = 0, last_chunk_ms: float = 0.0,
                 die_after: int | None = None, die_gently: bool = False) -> None:  # fmt: skip
        self.mode = mode
        self.die_gently = die_gently
        self.die_after = die_after  # completions answered before the server dies (--die-after)
        self.answered = 0
        self.listener: asyncio.AbstractServer | None = None  # set by whoever listens
        self.died = asyncio.Event()
        self.hold = hold
        self.hold_first = hold_first  # answers still to hold (--hold-first)
        self.last_chunk_s = last_chunk_ms / 1e3
        self.conns = itertools.count(1)
        self.ttft_ns = round(ttft_ms * 1e6)
        self.itl_ns = round(itl_ms * 1e6)
        self.truth: deque[dict[str, Any]] = deque(maxlen=TRUTH_MAX)
        self.ids = itertools.count()
        self.open: set[Conn] = set()  # connections not yet closed

    def protocol(self) -> Conn:
        return Conn(self)

    def close_idle(self) -> int:
        """Close every connection not answering a request, as a server's keep-alive timeout
        does (uvicorn's ``--timeout-keep-alive``); how many it closed."""
        idle = [c for c in self.open if not c.busy and c.transport is not None]
        for c in idle:
            c.transport.close()  # type: ignore[union-attr]
        return len(idle)

    def kill(self) -> None:
        """Die as a killed process does: stop listening (new connections are refused) and
        reset every open connection (RST: a request in flight ends mid-stream); gently
        (``die_gently``): stop listening only."""
        if self.listener is not None:
            self.listener.close()
        for c in [] if self.die_gently else list(self.open):
            if c.transport is not None:
                c.transport.abort()
        self.died.set()


class Conn(asyncio.Protocol):
    """One keep-alive connection: parse requests, answer them one at a time."""

    def __init__(self, server: FakeServer) -> None:
        self.s = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.loop = asyncio.get_running_loop()
        self.n = next(server.conns)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.s.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.s.open.discard(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while not self.busy and self.transport is not None:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0"))
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body, self.buf = self.buf[head_end + 4 : end], self.buf[end:]
            method, path = head[0].split(" ")[:2]
            self.handle(method, path.split("?")[0], headers, body, time.perf_counter_ns())

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes,
               arrival: int) -> None:  # fmt: skip
        assert self.transport is not None
        s = self.s
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            if s.die_after is not None and s.answered >= s.die_after and not s.died.is_set():
                s.kill()
                if not s.die_gently:
                    return
            s.answered += 1
            req = orjson.loads(body)
            if path == "/v1/completions":
                kind, p = "completions", req.get("prompt")
                n_prompt = len(p) if isinstance(p, list) else len(str(p)) // 4
                n = int(req.get("max_tokens") or 16)
            else:
                kind = "chat"
                n_prompt = max(1, sum(len(str(m.get("content", ""))) for m in req["messages"]) // 4)
                n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
            rid = headers.get("x-request-id") or f"fake-{next(s.ids)}"
            entry = {"request_id": rid, "kind": kind, "arrival_ns": arrival,
                     "first_token_ns": None, "token_ns": [], "output_tokens": n,
                     "conn": self.n}  # fmt: skip
            s.truth.append(entry)
            if s.mode == "instant":
                data = _instant(kind, n, n_prompt)
                hold = s.hold or s.hold_first > 0
                if hold:  # no last chunk, and nothing more on this connection
                    s.hold_first -= 1
                    data, self.busy = data[: -len(LAST_CHUNK)], True
                elif s.last_chunk_s > 0:  # the last chunk later, on its own
                    data, self.busy = data[: -len(LAST_CHUNK)], True
                    self.loop.call_later(s.last_chunk_s, self._last_chunk)
                self.transport.write(data)
                now = time.perf_counter_ns()
                entry["first_token_ns"] = now
                entry["token_ns"] = [now] * n
                return
            self.busy = True
            self.transport.write(SSE_HEAD)
            stream = _Stream(self, entry, _events(kind, n, n_prompt), arrival + s.ttft_ns)
            stream.arm()
        elif method == "GET" and path == "/debug/requests":
            self.transport.write(_json_response(list(s.truth)))
        elif method == "POST" and path == "/debug/reset":
            s.truth.clear()
            self.transport.write(_json_response({"ok": True}))
        elif method == "GET" and path == "/v1/models":
            card = {"id": "fake", "object": "model", "owned_by": "bench"}
            self.transport.write(_json_response({"object": "list", "data": [card]}))
        elif method == "GET" and path == "/health":
            self.transport.write(_json_response({}))
        else:
            self.transport.write(_json_response({"error": "not found"}, "404 Not Found"))

    def _last_chunk(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(LAST_CHUNK)
        self.stream_done()

    def stream_done(self) -> None:
        self.busy = False
        if self.buf:
            self.data_received(b"")


class _Stream:
    """One timed response: a ``call_at`` per token, on the absolute schedule."""

    __slots__ = ("conn", "due_ns", "entry", "events", "k")

    def __init__(self, conn: Conn, entry: dict[str, Any], events: tuple[bytes, ...],
                 due_ns: int) -> None:  # fmt: skip
        self.conn, self.entry, self.events, self.due_ns, self.k = conn, entry, events, due_ns, 0

    def arm(self) -> None:
        loop = self.conn.loop
        delay = (self.due_ns - time.perf_counter_ns()) / 1e9
        loop.call_at(loop.time() + max(0.0, delay), self.emit)

    def emit(self) -> None:
        transport = self.conn.transport
        if transport is None or transport.is_closing():
            self.conn.busy = False
            return
        transport.write(self.events[self.k])
        t = time.perf_counter_ns()
        times = self.entry["token_ns"]
        times.append(t)
        if self.k == 0:
            self.entry["first_token_ns"] = t
        self.k += 1
        if self.k == len(self.events):
            self.entry["end_ns"] = t
            self.conn.stream_done()
            return
        self.due_ns += self.conn.s.itl_ns
        self.arm()


async def serve(port: int, server: FakeServer) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(server.protocol, "127.0.0.1", port, backlog=4096)
    server.listener = srv
    bound = srv.sockets[0].getsockname()[1]
    print(f"LISTENING http://127.0.0.1:{bound}", flush=True)
    async with srv:
        if server.die_after is None:
            await srv.serve_forever()
        else:  # a killed server's process is gone: exit once it died (gently: once the
            await server.died.wait()  # requests it still had are answered)
            while server.die_gently and server.open:
                await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", choices=("instant", "timed"), default="instant")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--hold-after-done", action="store_true")
    ap.add_argument("--hold-first", type=int, default=0, metavar="N")
    ap.add_argument("--last-chunk-ms", type=float, default=0.0, metavar="MS")
    ap.add_argument("--die-after", type=int, default=None, metavar="N")
    ap.add_argument("--die-gently", action="store_true")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)
    server = FakeServer(args.mode, args.ttft_ms, args.itl_ms, args.hold_after_done,
                        args.hold_first, args.last_chunk_ms, args.die_after, args.die_gently)
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(serve(args.port, server))
            return
    asyncio.run(serve(args.port, server))


if __name__ == "__main__":
    main()
