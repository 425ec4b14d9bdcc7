"""Every body read from a server is bounded (docs/security.md, "Bounded inputs").

A loopback server answers *everything* a replay asks it — ``GET /metrics``, the
prefix-cache reset, ``GET /v1/models``, the completions — with a body that inflates to
1 GiB (gzip) or is 400 MB of plain text; a completion is a valid stream followed by that
padding after ``[DONE]``. The CLI runs in a subprocess; its peak resident memory is the
kernel's count for that child (``os.wait4``'s ``ru_maxrss``). The run must exit 0 under
300 MB, with the cut page noted in the log and in the manifest's ``metrics_scrape``.

Before: the scraper and the reset read each page whole (``resp.text()``, aiohttp inflating
every read at once): ~2.2 GB for the gzip, 8 GB and a ``MemoryError`` for the 400 MB page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import zlib
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from loopback import serve_app

from workbench.data import path as data_path

LARGE = str(data_path("tracelab/multi_session_large.csv"))
REPO = Path(__file__).resolve().parents[2]
#: the issue's bound on the replay's peak resident memory
RSS_BOUND = 300 << 20
MIB = 1 << 20
#: a Prometheus comment line of 1 KiB: a page of these parses (to nothing)
LINE = b"# " + b"p" * 1021 + b"\n"
BLOCK = LINE * 1024  # 1 MiB


class Bomb:
    """What every answer carries after its real content: ``size`` bytes of ``LINE``, as
    gzip (made as it is sent: the client's cut stops it) or plain."""

    def __init__(self, gz: bool, size: int) -> None:
        self.gz, self.size = gz, size
        self.sent_mib = 0  # the largest answer's MiB produced before the client stopped it

    async def answer(self, request: web.Request, head: bytes = b"",
                     content_type: str = "text/plain") -> web.StreamResponse:
        await request.read()
        headers = {"Content-Type": content_type}
        if self.gz:
            headers["Content-Encoding"] = "gzip"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        z = zlib.compressobj(1, zlib.DEFLATED, 31) if self.gz else None
        with contextlib.suppress(ConnectionError):
            if head:
                await resp.write(z.compress(head) + z.flush(zlib.Z_SYNC_FLUSH) if z else head)
            for i in range(self.size // MIB):  # bounded: the size
                data = z.compress(BLOCK) if z else BLOCK
                if data:
                    await resp.write(data)
                self.sent_mib = max(self.sent_mib, i + 1)
            if z:
                await resp.write(z.flush())
            await resp.write_eof()
        return resp

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        n = int(body["max_tokens"])
        events = [{"id": "c", "choices": [{"index": 0, "text": "x", "token_ids": [7] * n,
                                           "finish_reason": "length"}]},
                  {"id": "c", "choices": [], "usage": {
                      "prompt_tokens": len(body.get("prompt") or []), "completion_tokens": n}}]
        head = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
        return await self.answer(request, head + b"data: [DONE]\n\n", "text/event-stream")


# The CLI's own peak RSS, read by a small launcher that starts it and waits for it. Not the
# test process's wait4: Linux carries the peak RSS of the process that spawned a child
# over its exec, so a CLI spawned straight from a large pytest worker reports the worker's
# size (measured: 1,200 MiB, the same for every case, in the full suite).
LAUNCHER = """import os, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run(tmp_path: Path, args: list[str]) -> tuple[int, str, int]:
    """The CLI in a subprocess: (exit code, its output, its peak RSS in bytes)."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    peak = tmp_path / "peak_rss_kib"
    with open(os.devnull, "rb") as null:
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(peak), sys.executable,
                               "-m", "workbench", *args], stdin=null, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env, timeout=600)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), int(peak.read_text()) * 1024


@pytest.mark.parametrize("http", ["httptools", "aiohttp"])
@pytest.mark.parametrize(("gz", "size"), [(True, 1 << 30), (False, 400 * MIB)],
                         ids=["gzip-1GiB", "plain-400MB"])
async def test_every_answer_a_bomb_replay_stays_flat(tmp_path, gz, size, http):
    bomb = Bomb(gz, size)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"executor": {"http": http}}))
    app = [web.get("/metrics", bomb.answer), web.post("/reset_prefix_cache", bomb.answer),
           web.get("/v1/models", bomb.answer), web.get("/health", bomb.answer),
           web.post("/v1/completions", bomb.complete)]
    async with serve_app(app) as url:
        code, out, rss = await asyncio.to_thread(_run, tmp_path, [
            "replay", "--trace", LARGE, "--max-items", "2", "--target", url,
            "--arrival", "saturated", "--max-concurrency", "2", "--tool-wait-scale", "0",
            "--no-preflight", "--no-progress", "-o", str(tmp_path / "runs"), "--run-id", "b",
            "--config", str(cfg),
        ])
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    print(f"peak RSS {rss / MIB:.0f} MiB ({'gzip 1 GiB' if gz else 'plain 400 MB'}, {http})")
    assert rss < RSS_BOUND, f"peak RSS {rss / MIB:.0f} MiB"
    # the cut, noted: one warning line, and the manifest's record of it
    assert "metrics page of" in out and "cut there" in out, out[-3000:]
    manifest = json.loads((tmp_path / "runs" / "b" / "manifest.json").read_text())
    assert manifest["metrics_scrape"]["pages_cut"] == [f"{url}/metrics"]
    assert manifest["cache_flush"]["ok"] is True  # the reset's answer read to its bound
    assert bomb.sent_mib < size // MIB  # the client stopped reading: nothing ran to the end
