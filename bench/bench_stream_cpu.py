"""CPU per token event of the streaming client, in-process: no sockets, before/after in one run.

Why in-process: on a shared machine the loopback benchmark (``bench/peers/run_peers.py``)
moves with everyone else's load; CPU time of one process that talks to an
in-memory server does not (much). The client's connections here are real
``asyncio.Protocol`` objects joined by an in-memory transport (``MemTransport``:
``write`` hands the bytes to the peer's ``data_received`` in the loop's next
iteration, as a socket read would), and the server is ``bench/fake_server.py``'s own
protocol in ``timed`` mode with 0 ms TTFT/ITL: one HTTP chunk per token, each in its
own loop iteration — 65 reads per 64-token answer, exactly the bytes of the loopback
benchmark — or in ``instant`` mode (the whole answer in one read).

Scenarios (one process each, ``--worker``):

* ``events``: ``Transport.send`` (the measured path: request body, HTTP client, SSE,
  codec parser, record) for ``--requests`` requests at ``--concurrency`` streams;
* ``floor``: the same server and loop with ``bench/floor_client.py``'s client, which
  only counts bytes: what the loop, the in-memory "socket" and the server cost;
* ``run``: a whole replay (``executors.dispatch.run_async``: plan, runner, records
  and lifecycle on disk, summary) of an ``independent`` trace, saturated;

CPU is ``time.process_time`` over the requests (start-up excluded). Reported per
token event: ``events`` − ``floor`` is the client's own cost; ``run`` − ``events``
per request is the runner's. Before/after: ``--ref REV`` extracts ``workbench/`` of
that git revision (``git archive``) and runs every scenario on both trees, rounds
interleaved (order alternating), ``--repeat`` rounds; the table gives the best
(min) and the median per tree::

    .venv/bin/python bench/bench_stream_cpu.py --ref cc478ff --repeat 7
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOKENS = 64
PROMPT = 512
WORKER_TIMEOUT_S = 600


# ----------------------------------------------------------------- in-memory sockets
class MemTransport(asyncio.Transport):
    """One end of an in-memory connection: ``write`` is the peer's next ``data_received``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, proto: asyncio.Protocol) -> None:
        super().__init__()
        self.loop, self.proto = loop, proto
        self.peer: MemTransport | None = None
        self.closing = False
        self.held: list[bytes] = []

    #: (the server's end) deliver every ``coalesce``-th HTTP chunk together with the ones
    #: held before it, and the one that ends an answer at once: reads of several token
    #: events, as the loopback gives under load (the floor client read 45 times per
    #: 65-write answer at c=32 and 32 times at c=256 in a check on this 2-core machine)
    coalesce = 1

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self.peer
        if self.closing or peer is None or peer.closing:
            return
        if self.coalesce > 1 and (self.held or not data.startswith(b"HTTP/")):
            self.held.append(bytes(data))
            if len(self.held) < self.coalesce and not data.endswith(b"0\r\n\r\n"):
                return
            data, self.held = b"".join(self.held), []
        self.loop.call_soon(peer._deliver, bytes(data))

    def _deliver(self, data: bytes) -> None:
        if not self.closing:
            self.proto.data_received(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.loop.call_soon(self.proto.connection_lost, None)
        if self.peer is not None and not self.peer.closing:
            self.peer.close()

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


try:  # the loop a replay runs on (executor.uvloop), when installed
    from uvloop import Loop as _BaseLoop
except ImportError:  # pragma: no cover
    _BaseLoop = asyncio.SelectorEventLoop  # type: ignore[misc,assignment]


class MemLoop(_BaseLoop):  # type: ignore[misc,valid-type]
    """An event loop whose ``create_connection`` joins the protocol to an in-memory server."""

    server_factory: Any = None
    coalesce = 1

    async def create_connection(self, protocol_factory: Any, host: Any = None,  # type: ignore[override]
                                port: Any = None, **_kw: Any) -> tuple[Any, Any]:  # fmt: skip
        client = protocol_factory()
        server = self.server_factory()
        ct, st = MemTransport(self, client), MemTransport(self, server)
        ct.peer, st.peer = st, ct
        st.coalesce = self.coalesce
        server.connection_made(st)
        client.connection_made(ct)
        return ct, client


def _server(mode: str) -> Any:
    sys.path.insert(0, str(HERE))
    from fake_server import FakeServer

    return FakeServer(mode, 0.0, 0.0)


# ----------------------------------------------------------------- scenarios
async def _events(n: int, c: int) -> float:
    """``Transport.send`` of ``n`` requests on ``c`` concurrent streams; CPU s."""
    from workbench.backends.base import WireRequest, make_codec
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.records import RequestRecord

    codec = make_codec("openai")
    prompt = list(range(1000, 1000 + PROMPT))
    recs: list[RequestRecord] = []
    async with Transport(TransportOptions("http://127.0.0.1:1")) as tr:
        await tr.warm(c)
        todo = iter(range(n))

        async def stream() -> None:
            for i in todo:
                rid = f"r{i}"
                rec = RequestRecord("run", rid, i, rid, 0, "openai", None, 0, PROMPT, TOKENS)
                await tr.send(codec, WireRequest(rid, prompt, TOKENS), rec)
                recs.append(rec)

        cpu = time.process_time()
        await asyncio.gather(*(stream() for _ in range(c)))
        cpu = time.process_time() - cpu
    bad = [r.error for r in recs if r.status != "ok" or len(r.token_times_ns) != TOKENS]
    if bad:
        raise SystemExit(f"events: {len(bad)} bad records, e.g. {bad[0]}")
    return cpu


async def _floor(n: int, c: int) -> float:
    sys.path.insert(0, str(HERE))
    import orjson
    from floor_client import Floor

    loop = asyncio.get_running_loop()
    body = orjson.dumps({"prompt": list(range(1000, 1000 + PROMPT)), "max_tokens": TOKENS,
                         "stream": True})  # fmt: skip
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    todo, stamps = [n], {}
    cpu = time.process_time()
    dones = []
    for _ in range(c):
        done = loop.create_future()
        await loop.create_connection(lambda d=done: Floor((head, body), todo, d, stamps), "x", 1)
        dones.append(done)
    await asyncio.gather(*dones)
    return time.process_time() - cpu


async def _run(n: int, c: int, mode: str) -> float:
    from workbench.executors.dispatch import run_async

    with tempfile.TemporaryDirectory(prefix="wb-cpu-") as tmp:
        trace = Path(tmp) / "trace.csv"
        trace.write_text("id,arrival_time,input_len,output_len\n"
                         + "".join(f"r{i},0,{PROMPT},{TOKENS}\n" for i in range(n)))  # fmt: skip
        cfg = {
            "trace": {"path": str(trace), "format": "independent"},
            "arrival": {"mode": "saturated", "max_concurrency": c},
            "backend": {"name": "openai", "preflight": False, "scrape_interval_s": None,
                        "flush_cache": False},
            "target": {"url": "http://127.0.0.1:1"},
            "out_dir": tmp,
            "executor": {"record_flush_ms": 50.0},
        }
        result = await run_async(cfg)
        summary = json.loads((Path(result.run_dir or tmp) / "summary.json").read_text())
    if summary["ok"] != n:
        raise SystemExit(f"run: {summary['ok']} of {n} ok")
    return float(summary["client"]["cpu_s"])


def worker(scenario: str, mode: str, n: int, c: int, coalesce: int = 1) -> dict[str, Any]:
    loop = MemLoop()
    loop.coalesce = coalesce
    server = _server(mode)
    loop.server_factory = server.protocol
    asyncio.set_event_loop(loop)
    try:
        if scenario == "events":
            cpu = loop.run_until_complete(_events(n, c))
        elif scenario == "floor":
            cpu = loop.run_until_complete(_floor(n, c))
        else:
            cpu = loop.run_until_complete(_run(n, c, mode))
    finally:
        loop.close()
    return {"scenario": scenario, "mode": mode, "requests": n, "concurrency": c,
            "coalesce": coalesce, "cpu_s": cpu,
            "us_per_event": cpu / (n * TOKENS) * 1e6, "us_per_request": cpu / n * 1e6}  # fmt: skip


# ----------------------------------------------------------------- driver
def extract(ref: str, dest: Path) -> Path:
    """``workbench/`` of git revision ``ref`` under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "workbench"],
                             check=True, capture_output=True, timeout=120).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=120)
    return dest


def one(tree: Path, scenario: str, mode: str, n: int, c: int, coalesce: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", scenario, "--mode", mode,
           "--requests", str(n), "--concurrency", str(c), "--coalesce", str(coalesce)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"worker failed ({tree}, {scenario}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--worker", choices=("events", "floor", "run"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("timed", "instant"), default="timed")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--coalesce", type=int, default=1,
                    help="timed mode: token events per read (the server's writes joined)")
    ap.add_argument("--ref", default=None, help="git revision to compare against (before)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scenarios", default="floor,events,run")
    ap.add_argument("--modes", default="timed,instant")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.mode, args.requests, args.concurrency,
                                args.coalesce)))  # fmt: skip
        return 0
    trees = {"after": ROOT}
    tmp = tempfile.TemporaryDirectory(prefix="wb-ref-")
    if args.ref:
        trees = {"before": extract(args.ref, Path(tmp.name)), **trees}
    results: dict[str, list[dict[str, Any]]] = {}
    load = [os.getloadavg()[0]]
    for k in range(args.repeat):
        names = list(trees) if k % 2 == 0 else list(reversed(trees))
        for mode in args.modes.split(","):
            for scenario in args.scenarios.split(","):
                for name in names:
                    if scenario == "floor" and name != names[0]:
                        continue  # the floor does not depend on workbench's tree
                    r = one(trees[name], scenario, mode, args.requests, args.concurrency,
                            args.coalesce)  # fmt: skip
                    results.setdefault(f"{mode} {scenario} {name}", []).append(r)
        load.append(os.getloadavg()[0])
    table = {}
    print(f"requests {args.requests}, concurrency {args.concurrency}, coalesce "
          f"{args.coalesce}, repeat {args.repeat}, "
          f"load average {load[0]:.2f} -> {load[-1]:.2f}")  # fmt: skip
    print(f"{'mode scenario tree':32} {'best us/event':>14} {'median':>8} {'best us/req':>12}")
    for key, rs in results.items():
        per = sorted(r["us_per_event"] for r in rs)
        table[key] = {"best_us_per_event": per[0], "median_us_per_event": statistics.median(per),
                      "best_us_per_request": per[0] * TOKENS, "rounds": per}  # fmt: skip
        print(f"{key:32} {per[0]:14.2f} {statistics.median(per):8.2f} {per[0] * TOKENS:12.1f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"load": load, "table": table}, indent=1))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
