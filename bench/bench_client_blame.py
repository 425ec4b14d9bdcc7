"""Whose delay the client verdict blames (docs/metrics.md, "Client"): two real cases.

``slow-accept``: a server in a process of its own that listens with a backlog of 1 and
accepts one connection every ``--accept-every`` ms (a proxy slow to accept, a server
whose accept loop is behind): ``--requests`` independent requests due at once each need
a connection; past the two the kernel queues, their SYNs are dropped and sent again 1 s,
3 s … later. The client did nothing late: the verdict should say the server was slow.

``busy-client``: a server that keeps up (backlog 128, accepting at once), requests due
every ``--gap-ms`` ms,
and a record sink that does real CPU work (``--burn`` blake2b passes over 64 KiB) on the
client's loop: requests go out late through the client's own fault, and the connections
it makes meanwhile must not be passed off as the server's.

Each case prints one JSON line: the client's release lag (p50/p99/max ms, the judged one),
the new connections' wait (count, p99, max) when the tree measures it, the headline's
client verdict and the client CPU share. Run it once per tree (``PYTHONPATH`` at the
other tree gives its verdict for the same case); ``--overhead`` adds what measuring a
connect costs here (two ``busy_ns`` reads, µs).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BODY = (b'data: {"id":"c","choices":[{"index":0,"token_ids":[11,12]}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"token_ids":[13,14],"finish_reason":"length"}]}'
        b'\n\ndata: {"id":"c","choices":[],"usage":{"prompt_tokens":64,"completion_tokens":4}}'
        b"\n\ndata: [DONE]\n\n")
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%b"
          % (len(BODY), BODY))


async def serve(accept_every_s: float, backlog: int) -> None:
    """The server: ``backlog``, one accept every ``accept_every_s``; prints its port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    sock.setblocking(False)
    print(sock.getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()

    async def answer(conn: socket.socket) -> None:
        reader, writer = await asyncio.open_connection(sock=conn)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if head.startswith(b"GET"):
                    body = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
                else:
                    writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    tasks = set()
    while True:
        conn, _ = await loop.sock_accept(sock)
        task = loop.create_task(answer(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if accept_every_s > 0:
            await asyncio.sleep(accept_every_s)


def write_trace(path: Path, n: int, gap_ms: float) -> Path:
    rows = [f"{i},{i * gap_ms},64,4" for i in range(n)]
    path.write_text("id,arrival_time,input_len,output_len\n" + "\n".join(rows) + "\n")
    return path


def burner(passes: int):
    block = b"x" * 65536

    def burn(_rec: Any) -> None:
        digest = hashlib.blake2b()
        for _ in range(passes):
            digest.update(block)

    return burn


async def replay(url: str, trace: Path, http: str, sink) -> dict[str, Any]:
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.clock import WallClock
    from workbench.config import RunConfig
    from workbench.metrics.summary import client_stats
    from workbench.replay.plan import build_plan
    from workbench.replay.prepare import load_workload
    from workbench.replay.runner import build_runner
    from workbench.report.headline import client_verdict

    cfg = RunConfig.from_dict({
        "trace": str(trace), "target": {"url": url}, "arrival": {"output_len": "fixed:4"},
        "backend": {"preflight": False, "flush_cache": False}, "executor": {"http": http},
    })  # fmt: skip
    plan = build_plan(cfg, load_workload(cfg))
    records: list[Any] = []

    def keep(rec: Any) -> None:
        records.append(rec)
        if sink is not None:
            sink(rec)

    async with Transport(TransportOptions.of_run(cfg, url)) as t:
        runner = build_runner(cfg, plan, run_id="bench", sender=t, clock=WallClock(), sink=keep)
        await runner.execute()
    stats = client_stats([runner.client_raw()], None)
    lag = stats.get("steady_release_lag_ms") or {}
    if not lag.get("count"):
        lag = stats["release_lag_ms"]
    connect = stats.get("connect_wait_ms") or {}
    return {
        "ok": sum(r.status == "ok" for r in records), "requests": len(records),
        "lag_ms": {k: lag.get(k) for k in ("p50", "p99", "max", "count")},
        "connect_ms": {k: connect.get(k) for k in ("count", "p50", "p99", "max")} or None,
        "cpu_util": stats.get("cpu_util"),
        "verdict": client_verdict({"client": stats}),
    }


def overhead(n: int = 2000) -> float | None:
    try:
        from workbench.backends.waits import busy_ns
    except ImportError:
        return None
    t0 = time.perf_counter_ns()
    for _ in range(n):
        busy_ns()
    return (time.perf_counter_ns() - t0) / n / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backlog", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--case", choices=("slow-accept", "busy-client"), action="append")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--accept-every", type=float, default=50.0, help="ms (slow-accept)")
    ap.add_argument("--gap-ms", type=float, default=2.0, help="busy-client arrivals")
    ap.add_argument("--burn", type=int, default=300, help="blake2b passes a record")
    ap.add_argument("--http", default="httptools")
    ap.add_argument("--overhead", action="store_true")
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve(args.accept_every / 1e3, args.backlog))
        return
    tree = os.path.dirname(__import__("workbench").__file__)
    for case in args.case or ["slow-accept", "busy-client"]:
        slow = case == "slow-accept"  # else a server that keeps up: backlog 128, no pause
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--accept-every",
             str(args.accept_every if slow else 0.0), "--backlog", "1" if slow else "128"],
            stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            port = int(server.stdout.readline())  # type: ignore[union-attr]
            with tempfile.TemporaryDirectory() as tmp:
                gap = 0.0 if case == "slow-accept" else args.gap_ms
                trace = write_trace(Path(tmp) / "t.csv", args.requests, gap)
                sink = burner(args.burn) if case == "busy-client" else None
                out = asyncio.run(replay(f"http://127.0.0.1:{port}", trace, args.http, sink))
        finally:
            server.terminate()
            server.wait()
        print(json.dumps({"case": case, "tree": tree, "http": args.http,
                          "load": os.getloadavg()[0], **out}))
    if args.overhead:
        print(json.dumps({"busy_ns_us": overhead()}))


if __name__ == "__main__":
    main()
