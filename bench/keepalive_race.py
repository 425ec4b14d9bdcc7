"""Requests on connections the server closes idle: how many fail (docs/wire-protocols.md,
"Idle connections").

A server with a short keep-alive (``--server aiohttp``, or ``uvicorn`` as vLLM and SGLang
run it: ``--python`` names an interpreter that has uvicorn) runs in a process of its own;
``--sessions`` sessions send ``--rounds`` requests each, one at a time, with gaps drawn
uniformly from ``--gap-lo``..``--gap-hi`` × the keep-alive, so a reuse lands just before,
at and just after the server closes the connection. Replayed through each of the project's
HTTP clients (``Transport``), and through the capture proxy (``--capture``). Prints, per
path: requests, failed, resent (``stale_connection_retry``), and how many requests the
server's handler saw (``--url``: a server of yours, e.g. vLLM started with
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``; ``--keepalive`` then only scales the gaps, and what the
server saw is not counted).

    python bench/keepalive_race.py --keepalive 0.05 --sessions 8 --rounds 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

EXTERNAL: list[str] = []  # --url: a server of the user's (no /seen count)
MODEL = ["m"]  # what a request names (--model)

#: the server: an OpenAI completions stream of 4 tokens, each request counted
SERVER = r'''
import asyncio, json, sys
kind, keepalive, port_file = sys.argv[1], float(sys.argv[2]), sys.argv[3]
seen = [0]
EVENTS = [
    {"id": "c", "choices": [{"index": 0, "token_ids": [11], "finish_reason": None}]},
    {"id": "c", "choices": [{"index": 0, "token_ids": [12, 13], "finish_reason": None}]},
    {"id": "c", "choices": [{"index": 0, "token_ids": [14], "finish_reason": "length"}]},
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 4,
                                         "prompt_tokens_details": {"cached_tokens": 0}}},
]
BODY = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS)
BODY += b"data: [DONE]\n\n"

def report(port):
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    import os
    os.replace(port_file + ".tmp", port_file)

if kind == "aiohttp":
    from aiohttp import web
    async def completions(request):
        await request.read()
        seen[0] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(BODY)
        await resp.write_eof()
        return resp
    async def count(request):
        return web.json_response({"seen": seen[0]})
    async def main():
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/seen", count)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=keepalive)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        report(runner.addresses[0][1])
        await asyncio.Event().wait()
    asyncio.run(main())
else:
    import socket, uvicorn
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/seen":
            body = json.dumps({"seen": seen[0]}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        if scope["path"] != "/v1/completions":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        seen[0] += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": BODY})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    report(sock.getsockname()[1])
    # uvicorn takes whole seconds on its command line; its Config takes a float
    config = uvicorn.Config(app, log_level="error", timeout_keep_alive=keepalive,
                            access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
'''


@contextlib.asynccontextmanager
async def server(kind: str, keepalive: float, python: str) -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp, "port")
        proc = subprocess.Popen([python, "-c", SERVER, kind, str(keepalive), str(port_file)])
        try:
            while not port_file.exists():
                if proc.poll() is not None:
                    raise SystemExit(f"the {kind} server exited with {proc.returncode}")
                await asyncio.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text()}"
            await _ready(url)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


async def _ready(url: str) -> None:
    import aiohttp

    for _ in range(200):
        with contextlib.suppress(aiohttp.ClientError):
            async with aiohttp.ClientSession() as s, s.get(url + "/seen") as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise SystemExit(f"no server at {url}")


async def seen(url: str) -> int:
    import aiohttp

    if EXTERNAL:
        return 0
    async with aiohttp.ClientSession() as s, s.get(url + "/seen") as r:
        return int((await r.json())["seen"])


def gaps(args: argparse.Namespace, seed: int) -> list[float]:
    rng = random.Random(seed)
    k = args.keepalive
    return [rng.uniform(args.gap_lo * k, args.gap_hi * k) for _ in range(args.rounds)]


async def replay(url: str, http: str, args: argparse.Namespace) -> dict[str, int]:
    from workbench.backends import BACKENDS, WireRequest
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.records import RequestRecord

    codec = dataclasses.replace(BACKENDS.get("openai"), model=MODEL[0])
    before = await seen(url)
    recs: list[RequestRecord] = []
    opts = TransportOptions(url, http=http, **({"connection_idle_s": args.idle}
                                               if args.idle is not None else {}))

    async def session(t: Transport, s: int) -> None:
        for r, gap in enumerate(gaps(args, s)):
            rid = f"s{s}-r{r}"
            rec = RequestRecord(run_id="k", request_id=rid, unit_ordinal=s, session_id=f"s{s}",
                                round_idx=r, backend="openai", policy=None,
                                planned_prefix_tokens=0, planned_input_tokens=4,
                                planned_output_tokens=4)  # fmt: skip
            prompt = [1 + (s * 7919 + r * 104729 + i) % 30000 for i in range(args.prompt_tokens)]
            await t.send(codec, WireRequest(rid, prompt, 4), rec)
            recs.append(rec)
            await asyncio.sleep(gap)

    async with Transport(opts) as t:
        await asyncio.gather(*(session(t, s) for s in range(args.sessions)))
    failed = [r for r in recs if r.status != "ok"]
    errors: dict[str, int] = {}
    for r in failed:
        key = (r.error or "").split(":")[0]
        errors[key] = errors.get(key, 0) + 1
    return {
        "requests": len(recs),
        "failed": len(failed),
        "resent": sum(bool(r.extra.get("stale_connection_retry")) for r in recs),
        "server_saw": await seen(url) - before,
        "errors": errors,  # type: ignore[dict-item]
    }


async def capture(url: str, args: argparse.Namespace) -> dict[str, int]:
    import aiohttp

    from workbench.capture.proxy import CaptureProxy

    before = await seen(url)
    statuses: dict[int, int] = {}
    body = json.dumps({"model": MODEL[0], "prompt": [1, 2, 3, 4], "max_tokens": 4,
                       "stream": True})
    with tempfile.TemporaryDirectory() as out:
        async with CaptureProxy(url, out) as proxy, aiohttp.ClientSession() as agent:

            async def session(s: int) -> None:
                for gap in gaps(args, s):
                    async with agent.post(proxy.url + "/v1/completions", data=body,
                                          headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                    await asyncio.sleep(gap)

            await asyncio.gather(*(session(s) for s in range(args.sessions)))
    n = sum(statuses.values())
    return {"requests": n, "failed": n - statuses.get(200, 0),
            "statuses": statuses, "server_saw": await seen(url) - before}  # type: ignore[dict-item]


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--server", choices=("aiohttp", "uvicorn"), default="aiohttp")
    ap.add_argument("--python", default=sys.executable, help="the server's interpreter")
    ap.add_argument("--keepalive", type=float, default=0.05, help="the server's, seconds")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--gap-lo", type=float, default=0.8)
    ap.add_argument("--gap-hi", type=float, default=1.2)
    ap.add_argument("--idle", type=float, default=None,
                    help="the clients' connection_idle_s (default: theirs)")
    ap.add_argument("--paths", default="httptools,aiohttp,capture")
    ap.add_argument("--url", help="a running server's root (not started here)")
    ap.add_argument("--prompt-tokens", type=int, default=4)
    ap.add_argument("--model", default="m", help="the model a request names (--url)")
    args = ap.parse_args(argv)
    out: dict[str, object] = {"server": args.server, "keepalive_s": args.keepalive,
                              "load": os.getloadavg()[0]}
    MODEL[0] = args.model
    if args.url:
        EXTERNAL.append(args.url)
    serving = (contextlib.nullcontext(args.url) if args.url
               else server(args.server, args.keepalive, args.python))
    async with serving as url:
        for path in args.paths.split(","):
            t0 = time.monotonic()
            res = await (capture(url, args) if path == "capture" else replay(url, path, args))
            res["wall_s"] = round(time.monotonic() - t0, 1)  # type: ignore[assignment]
            out[path] = res
            print(path, json.dumps(res), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
