"""Bounded before parsing, checked before sending (docs/config-bounds.md, docs/security.md).

Every bomb runs the CLI in a subprocess under a 4 GiB address-space limit
(``RLIMIT_AS``), so a failure cannot take the machine down; the gzip bomb also bounds
the child's peak resident memory (``ru_maxrss``, written by the launcher): a YAML alias bomb, a
3,000-deep config or ``--body-field``, a server's gzip body that inflates to 1 GiB.
Every setting that used to be checked late (or not at all) is refused with exit 2
before any request: the server counts what it was sent.
"""

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from aiohttp import web
from echo_server import echo_server
from loopback import serve_app, serve_raw

from workbench.backends.base import WireRequest
from workbench.backends.http1 import HEAD_MAX
from workbench.backends.openai import OpenAICompletionsCodec
from workbench.backends.transport import Transport, TransportOptions
from workbench.data import path as data_path
from workbench.errors import ExitCode
from workbench.records import RequestRecord

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
LARGE = str(data_path("tracelab/multi_session_large.csv"))  # 48 units
REPO = Path(__file__).resolve().parents[2]
#: address space, not memory: the CLI reserves ~1.5 GB of it with ~230 MB resident (glibc
#: arenas, thread stacks, the libraries' own allocators), so 1.5 GB failed the bounded
#: client 1 run in 4 with a MemoryError; the resident bound is RSS_BOUND below
MEMORY_LIMIT = 4 << 30
#: the CLI's peak resident memory through a 16-stream gzip bomb (measured ~230 MB; the old
#: client, inflating each 1 GiB body whole, held 2.3 GB)
RSS_BOUND = 768 << 20
#: runs the CLI and, as it exits, writes its peak resident memory (KiB) to $MAXRSS_FILE
LAUNCH = ("import atexit, os, pathlib, resource, runpy, sys; f = os.environ['MAXRSS_FILE']; "
          "atexit.register(lambda: pathlib.Path(f).write_text("
          "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); "
          "sys.argv = ['workbench', *sys.argv[1:]]; runpy.run_module('workbench', "
          "run_name='__main__', alter_sys=True)")

BILLION_LAUGHS = """backend:
  options:
    extra_body:
      a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
      h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
      i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
DEEP = "[" * 3000 + "]" * 3000


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _env() -> dict[str, str]:
    # RLIMIT_AS counts address space, not memory: glibc reserves 64 MB of it per malloc
    # arena (up to 8 per core, one per thread that allocates), so a child with a few
    # threads could reach the limit with ~250 MB resident and die in a C library that
    # does not check malloc (seen: SIGSEGV, 1 run in 4 on a busy machine). Two arenas
    # keep the limit a bound on what the CLI itself holds.
    return {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
        timeout=timeout, preexec_fn=_limit_memory, env=_env(),
    )


async def _acli(*args: str, timeout: float = 180, rss: Path | None = None) -> tuple[int, str]:
    """The CLI in a subprocess (memory-limited) while this loop serves the test's server;
    with ``rss``, through ``LAUNCH``, which writes the child's peak resident KiB there."""
    head = ["-c", LAUNCH] if rss else ["-m", "workbench"]
    env = {**_env(), "MAXRSS_FILE": str(rss)} if rss else _env()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *head, *args, env=env, preexec_fn=_limit_memory,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode("utf-8", "replace")


def _refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == ExitCode.CONFIG_ERROR, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line
    for word in words:
        assert word in proc.stderr, proc.stderr


# ------------------------------------------------------------------ config bombs
def test_yaml_alias_bomb_is_refused_fast_in_bounded_memory(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(BILLION_LAUGHS)
    for command in ("replay", "simulate"):
        extra = ["--dry-run"] if command == "replay" else []
        proc = _cli(command, "--trace", SESSIONS, "--config", str(cfg), *extra, timeout=60)
        _refused(proc, "bomb.yaml:", "expands to more than", "aliases")
    engine = tmp_path / "engine.yaml"  # the engine-config reader is bounded the same way
    engine.write_text(BILLION_LAUGHS.replace("backend:\n  options:\n    extra_body:", "x:"))
    _refused(_cli("simulate", "--trace", SESSIONS, "--engine-config", str(engine), timeout=60),
             "engine.yaml:", "expands to more than")


@pytest.mark.parametrize("how", ["yaml", "json", "body-field-value", "body-field-key",
                                 "engine-knob", "sweep-points", "sweep-over", "report-param"])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(tmp_path, how):
    args = ["replay", "--trace", SESSIONS, "--target", "sim", "--dry-run"]
    if how == "yaml":
        (tmp_path / "deep.yaml").write_text(
            f"backend:\n  options:\n    extra_body:\n      x: {DEEP}\n")
        args += ["--config", str(tmp_path / "deep.yaml")]
    elif how == "json":
        (tmp_path / "deep.json").write_text(
            json.dumps({"backend": {"options": {"extra_body": {"x": "HERE"}}}})
            .replace('"HERE"', DEEP))
        args += ["--config", str(tmp_path / "deep.json")]
    elif how == "body-field-value":
        args += ["--body-field", f"x={DEEP}"]
    elif how == "body-field-key":
        args += ["--body-field", ".".join(["k"] * 3000) + "=1"]
    elif how == "engine-knob":
        args = ["simulate", "--trace", SESSIONS, "--engine", f"num_blocks={DEEP}"]
    elif how == "sweep-points":
        args = ["sweep", "--trace", SESSIONS, "--virtual", "--points", DEEP]
    elif how == "sweep-over":
        args = ["sweep", "--trace", SESSIONS, "--virtual", "--over", f"arrival.rate={DEEP}"]
    else:
        args = ["report", "--notebook", "trace_explorer", "--param", f"x={DEEP}", "-o",
                str(tmp_path)]
    _refused(_cli(*args, timeout=60), "nested deeper than 64 levels")


# ------------------------------------------------------------------ compressed bodies
def _gzip_of_zeros(n: int) -> bytes:
    """gzip of ``n`` bytes of ``x`` (an SSE event that never ends): ~1 MB for 1 GiB."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = b"x" * (1 << 20)
    out = [z.compress(b"data: ")]
    out += [z.compress(block) for _ in range(n // len(block))]
    out.append(z.flush())
    return b"".join(out)


@pytest.fixture(scope="module")
def gzip_gib() -> bytes:
    return _gzip_of_zeros(1 << 30)


@contextlib.asynccontextmanager
async def _gzip_server(body: bytes):
    """Answers every completion with ``body`` as ``Content-Encoding: gzip``: a 200 event
    stream (even requests) or a 500 error body (odd ones)."""
    n = 0

    async def complete(request: web.Request) -> web.StreamResponse:
        nonlocal n
        await request.read()
        n += 1
        status = 500 if n % 2 == 0 else 200
        resp = web.StreamResponse(status=status, headers={
            "Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            for i in range(0, len(body), 1 << 16):
                await resp.write(body[i:i + (1 << 16)])
            await resp.write_eof()
        return resp

    async with serve_app([web.post("/v1/completions", complete)]) as url:
        yield url


@pytest.mark.parametrize("http", ["httptools", "aiohttp"])
async def test_gzip_body_inflating_to_a_gib_is_cut_at_the_event_bound(tmp_path, gzip_gib, http):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"executor": {"http": http}}))
    async with _gzip_server(gzip_gib) as url:
        code, out = await _acli(
            "replay", "--trace", LARGE, "--max-items", "16", "--target", url, "--config",
            str(cfg), "--arrival", "saturated", "--max-concurrency", "16",
            "--tool-wait-scale", "0", "--no-preflight", "--no-flush-cache", "--no-progress",
            "--continue-on-error", "-o", str(tmp_path / "runs"), "--run-id", "gz",
            rss=tmp_path / "maxrss",
        )
    assert code == ExitCode.ERROR_RATE, out[-3000:]
    assert "MemoryError" not in out and "Traceback" not in out, out[-3000:]
    assert int((tmp_path / "maxrss").read_text()) * 1024 < RSS_BOUND
    records = [json.loads(x) for x in
               (tmp_path / "runs" / "gz" / "records.jsonl").read_text().splitlines()]
    errors = [r["error"] for r in records]
    assert all(r["status"] == "error" for r in records)
    # streams: cut where plain bytes are cut; error bodies: kept up to their bound
    assert any("without ending an event" in e for e in errors), errors[:3]
    assert any(e.startswith("HTTP 500: data: xxx") for e in errors), errors[:3]


# ------------------------------------------------------------------ response head
@pytest.mark.parametrize("http", ["httptools", "aiohttp"])
@pytest.mark.parametrize("shape", ["one-header", "many-headers"])
async def test_response_head_over_64k_in_one_read_is_refused(http, shape):
    big = HEAD_MAX + 36 * 1024  # 100 KB of headers, written at once
    fields = (b"X-Big: " + b"a" * big + b"\r\n" if shape == "one-header" else
              b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 5000) for i in range(big // 5000)))
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + fields
            + b"Content-Length: 0\r\n\r\n")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head)  # one write; the client's check must not depend on how reads fall
        await writer.drain()
        await reader.read()

    async with serve_raw(answer) as url, Transport(
        TransportOptions(url, api_key_env=None, http=http)
    ) as t:
        rec = RequestRecord("t", "r1", 0, "s", 0, "openai", None, 0, 3, 4)
        req = WireRequest(request_id="r1", prompt_ids=[1, 2, 3], max_tokens=4)
        assert await t.send(OpenAICompletionsCodec(), req, rec) is None
    assert rec.status == "error"
    assert (rec.error or "").startswith("malformed HTTP response from the server"), rec.error
    if http == "httptools" or shape == "many-headers":  # (aiohttp bounds a line at 8,190)
        assert f"response head passed {HEAD_MAX} bytes" in (rec.error or ""), rec.error


# ------------------------------------------------------------------ late checks
@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory nobody can create files in, root included: immutable (``chattr +i``)
    as root, read-only permissions otherwise."""
    d = tmp_path / "locked"
    d.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
            pytest.skip("root without chattr +i: no directory root cannot write")
        yield d
        subprocess.run(["chattr", "-i", str(d)], check=True)
    else:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


@pytest.mark.parametrize("flags", [
    ["--max-error-rate", "2"],
    ["--max-error-rate", "nan"],
    ["--percentiles", "50,x"],
    ["--percentiles", "50,101"],
    ["--header", "X-Bad:Name=1"],
    ["--header", "X Bad=1"],
    ["--routing-header", "x-slot:"],
    ["--output-len", "fixed:100000000000"],
    ["--output-len", "budget:100000000000000"],
    ["--rate", "1e-300"],
    ["--rate", "1e-6"],  # 48 units 11.6 days apart: 1.5 years of arrivals
    ["OUT_DIR"],
], ids=lambda f: " ".join(f))
async def test_every_setting_is_checked_before_the_first_request(tmp_path, flags,
                                                                 unwritable_dir):
    out = tmp_path / "runs"
    if flags == ["OUT_DIR"]:
        flags, out = [], unwritable_dir / "runs"
    async with echo_server() as server:
        code, text = await _acli(
            "replay", "--trace", LARGE, "--target", server.base_url, "--no-progress",
            "--arrival", "trace-timed" if "--rate" in flags else "saturated",
            "-o", str(out), *flags, timeout=120)
        assert code == ExitCode.CONFIG_ERROR, text[-2000:]
        assert "Traceback" not in text and text.count("\n") == 1, text
        assert server.seen == []  # nothing was sent, not even the reachability probe
    assert not out.exists()
