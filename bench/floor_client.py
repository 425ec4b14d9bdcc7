"""The floor: a client that only sends requests and counts the bytes it reads.

The cheapest client an asyncio program can be: ``--concurrency`` keep-alive
connections (``asyncio.Protocol``), each sending the next pre-built request as
soon as the previous answer has ended, with no HTTP parsing, no SSE, no JSON and
no records — an answer ends when its bytes end with the chunked terminator
``0\\r\\n\\r\\n`` (``bench/fake_server.py`` always sends chunked answers). What it
costs per token event is what any asyncio client pays for the socket reads
alone; ``bench/peers/run_peers.py`` sets workbench's cost beside it.

It also stamps, per request, the write and the first read that carries an SSE
``data:`` line (two ``perf_counter_ns`` calls and an ``x-request-id`` per request),
so its TTFT can be joined with the server's truth like workbench's: what is left
of the bias for this client is the machine's (scheduling, loopback), not parsing.

Prints one JSON line: ``{"client": "floor", "requests": N, "cpu_s": ..., "wall_s": ...,
"reads": ..., "bytes": ..., "per_request": {id: [write_ns, first_data_read_ns]}}``;
``cpu_s`` is ``time.process_time`` over the requests only (imports and start-up
excluded, as workbench's own ``summary.client.cpu_s``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

import orjson

END = b"0\r\n\r\n"


class Floor(asyncio.Protocol):
    def __init__(self, request: tuple[bytes, bytes], todo: list[int],
                 done: asyncio.Future[None], stamps: dict[str, list[int]]) -> None:  # fmt: skip
        self.request, self.todo, self.done, self.stamps = request, todo, done, stamps
        self.transport: asyncio.Transport | None = None
        self.tail = b""
        self.reads = self.bytes = 0
        self.current: list[int] | None = None  # [write_ns, first data read ns] until seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        if self.todo[0] <= 0:
            if self.transport is not None:
                self.transport.close()
            return
        self.todo[0] -= 1
        assert self.transport is not None
        rid = b"floor-%d" % self.todo[0]
        head, body = self.request
        stamp = [time.perf_counter_ns(), 0]
        self.stamps[rid.decode()] = self.current = stamp
        self.transport.write(head + b"x-request-id: %b\r\n\r\n%b" % (rid, body))

    def data_received(self, data: bytes) -> None:
        if self.current is not None and b"data: " in data:
            self.current[1] = time.perf_counter_ns()
            self.current = None
        self.reads += 1
        self.bytes += len(data)
        if data.endswith(END) or (self.tail + data[-5:]).endswith(END):
            self.tail = b""
            self._next()
        else:
            self.tail = data[-5:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def main_async(args: argparse.Namespace) -> dict:
    url = urlsplit(args.url)
    body = orjson.dumps({"prompt": list(range(1000, 1000 + args.prompt)),
                         "max_tokens": args.output, "stream": True,
                         "stream_options": {"include_usage": True},
                         "return_token_ids": True})  # fmt: skip
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % (url.netloc.encode(), len(body)))  # fmt: skip
    stamps: dict[str, list[int]] = {}
    loop = asyncio.get_running_loop()
    todo = [args.requests]
    conns = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(args.concurrency):
        done = loop.create_future()
        _, proto = await loop.create_connection(
            lambda d=done: Floor((head, body), todo, d, stamps), url.hostname, url.port
        )
        conns.append(proto)
    await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), timeout=300)
    return {"client": "floor", "requests": args.requests, "concurrency": args.concurrency,
            "cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - t0,
            "reads": sum(c.reads for c in conns), "bytes": sum(c.bytes for c in conns),
            "per_request": stamps}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            print(json.dumps(uvloop.run(main_async(args))))
            return 0
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
