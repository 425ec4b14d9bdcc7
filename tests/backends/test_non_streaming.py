"""Non-streaming mode (``backend.stream`` false, ``--no-stream``): one JSON answer per
request, read whole. TTFT = end-to-end latency, TPOT/ITL absent (never 0), output and
cached tokens from ``usage``; errors per request; live and virtual time agree.

Against the embedded engine over real HTTP (both clients), raw servers for the broken
answers. The rules: docs/wire-protocols.md, "Non-streaming"; docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest
from loopback import read_request, serve_raw

from workbench.backends import BACKENDS, WireRequest
from workbench.backends.transport import HTTP_CLIENTS, Transport, TransportOptions
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.metrics import summarize, to_frame
from workbench.records import RequestRecord
from workbench.report.headline import run_headline

LIMIT = 60.0
SESSIONS = str(data_path("tracelab/multi_session_example.csv"))  # rounds reuse their prefix
OUT = 5


def _cfg(backend: str = "openai", **extra: object) -> dict:
    return {
        "trace": SESSIONS,
        "arrival": {"mode": "saturated", "tool_wait_scale": 0, "output_len": f"fixed:{OUT}"},
        "backend": {"name": backend, "stream": False, "scrape_interval_s": None},
        **extra,
    }


def _check_whole(records: list[RequestRecord]) -> None:
    """Every record: ok, no token event, first token = end (TTFT = E2E), usage's counts."""
    assert records
    for r in records:
        assert r.status == "ok", r.error
        assert r.token_times_ns == [] and r.token_counts == []
        assert r.first_token_ns == r.last_token_ns == r.end_ns is not None
        assert r.completion_tokens == OUT and r.cached_tokens_reported


@pytest.mark.parametrize("http", HTTP_CLIENTS)
@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
async def test_records_against_the_engine_over_http(sim, http, backend):
    """TTFT equals E2E to the nanosecond, TPOT/ITL/amortized TPOT are NaN (absent), the
    output count is usage's, and a session's later rounds hit the prefix cache."""
    async with asyncio.timeout(LIMIT):
        res = await run_async(_cfg(backend, target=sim.base_url, executor={"http": http}))
    _check_whole(res.records)
    assert any(r.round_idx > 0 and r.cached_tokens > 0 for r in res.records)  # reuse seen
    assert {row["request_id"] for row in sim.debug_requests()} >= {
        r.request_id for r in res.records}  # the engine answered each one
    df = to_frame(res)
    assert (df["ttft_ms"] == df["e2e_ms"]).all() and (df["ttft_ms"] > 0).all()
    for col in ("tpot_ms", "completion_amortized_tpot_ms", "terminal_tail_ms"):
        assert df[col].isna().all(), col
    assert df["itl_ms"].map(len).eq(0).all() and df["token_events"].eq(0).all()
    assert res.manifest.config["backend"]["stream"] is False  # the manifest says the mode


async def test_the_wire_says_stream_false():
    """The bodies: ``"stream": false`` and no ``stream_options`` (completions and chat);
    the streaming bodies are unchanged."""
    req = WireRequest("r", [1, 2, 3], 4, session_id="s")
    for name in ("openai", "openai-chat"):
        whole = BACKENDS.get(name).with_options(stream=False).body(req)
        assert whole["stream"] is False and "stream_options" not in whole
        streamed = BACKENDS.get(name).body(req)
        assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}


def test_summary_headline_and_report_state_the_mode():
    """The summary's ``response_mode``, the headline (the CLI's and every report's line)
    and the latency table's caption say "non-streaming: TTFT = end-to-end latency"; TPOT
    shows "n/a — non-streaming", not a number."""
    from workbench.report.sections import RunReport

    res = simulate(_cfg())
    s = summarize(res)
    assert s["response_mode"]["stream"] is False
    assert s["tpot_ms"]["count"] == 0 and s["ttft_ms"]["p50"] == s["e2e_ms"]["p50"]
    line = run_headline(s, res.manifest)
    assert "non-streaming: TTFT = end-to-end latency" in line
    assert "TPOT n/a — non-streaming" in line and "TPOT p50" not in line
    caption = RunReport(res).table("latency").caption
    assert "non-streaming: TTFT = end-to-end latency" in caption
    assert "n/a — non-streaming" in caption
    streamed = simulate({**_cfg(), "backend": "openai"})
    assert "response_mode" not in summarize(streamed)
    assert "non-streaming" not in run_headline(summarize(streamed), streamed.manifest)


def test_cli_no_stream_prints_the_mode(capsys):
    from workbench.cli import main

    code = main(["simulate", "--trace", SESSIONS, "--arrival", "saturated", "--output-len",
                 f"fixed:{OUT}", "--tool-wait-scale", "0", "--no-stream"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "non-streaming: TTFT = end-to-end latency" in out and "TPOT n/a" in out
    code = main(["simulate", "--trace", SESSIONS, "--arrival", "saturated", "--output-len",
                 f"fixed:{OUT}", "--tool-wait-scale", "0", "--no-stream", "--json"])
    brief = json.loads(capsys.readouterr().out)
    assert code == 0 and brief["response_mode"]["stream"] is False


async def test_virtual_and_live_agree(sim):
    """The same run live (real HTTP) and in virtual time: the same requests, planned and
    cached tokens, output counts; both TTFT = E2E."""
    async with asyncio.timeout(LIMIT):
        live = await run_async(_cfg(target=sim.base_url))
    virtual = simulate(_cfg())
    _check_whole(live.records)
    _check_whole(virtual.records)

    def tokens(res):
        return sorted((r.request_id, r.planned_prefix_tokens, r.planned_input_tokens,
                       r.prompt_tokens, r.cached_tokens, r.completion_tokens)
                      for r in res.records)

    assert tokens(live) == tokens(virtual)


# -- errors, per request --------------------------------------------------------------------
def _answer(status: str, body: bytes, ctype: bytes = b"application/json"):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 %b\r\nContent-Type: %b\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%b" % (status.encode(), ctype, len(body), body))
        await writer.drain()

    return handle


async def _send_whole(handle, http: str, **opts: object) -> RequestRecord:
    codec = BACKENDS.get("openai").with_options(stream=False)
    rec = RequestRecord("run", "r1", 0, "s", 0, "openai", None, 0, 4, 4)
    async with serve_raw(handle) as url, asyncio.timeout(LIMIT):
        options = TransportOptions(url, http=http, stream_idle_timeout_s=None, **opts)  # type: ignore[arg-type]
        async with Transport(options) as t:
            await t.send(codec, WireRequest("r1", [1, 2, 3, 4], 4), rec)
    return rec


GOOD = orjson.dumps({"id": "cmpl-r1", "choices": [{"index": 0, "text": "a b c d",
                     "token_ids": [5, 6, 7, 8], "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 4, "completion_tokens": 4,
                               "prompt_tokens_details": {"cached_tokens": 2}}})


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_a_raw_whole_answer_is_read(http):
    rec = await _send_whole(_answer("200 OK", GOOD), http)
    assert rec.status == "ok", rec.error
    assert (rec.completion_tokens, rec.cached_tokens, rec.prompt_tokens) == (4, 2, 4)
    assert rec.first_token_ns == rec.end_ns and rec.token_times_ns == []


@pytest.mark.parametrize("http", HTTP_CLIENTS)
@pytest.mark.parametrize(("status", "body", "ctype", "says"), [
    ("200 OK", b'{"id": "x", "choices": [{"token_ids": [1, 2', b"application/json",
     "malformed JSON body"),
    ("500 Internal Server Error", b'{"error": {"message": "boom"}}', b"application/json",
     "HTTP 500"),
    ("200 OK", b'data: {"choices": []}\n\ndata: [DONE]\n\n', b"text/event-stream",
     'although the request said "stream": false'),
    ("200 OK", b"", b"application/json", "empty body"),
    ("200 OK", b'{"choices": [{"token_ids": [1]}]}', b"application/json", "usage"),
])
async def test_broken_answers_are_per_request_errors(http, status, body, ctype, says):
    rec = await _send_whole(_answer(status, body, ctype), http)
    assert rec.status == "error" and says in rec.error, rec.error
    assert rec.first_token_ns is None and rec.end_ns is not None


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_an_answer_past_its_byte_bound_is_cut(http):
    """A body that never ends is bounded like one SSE event (1 MiB for this request):
    cut there as an output overrun, the connection dropped."""
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000000\r\n\r\n{\"pad\": \"")
        for _ in range(1000):  # at most 64 MB; the client stops reading after 1 MiB
            writer.write(b"a" * 65536)
            await writer.drain()

    rec = await _send_whole(endless, http)
    assert rec.status == "error" and rec.error.startswith("output_overrun: the non-streaming "
                                                          "answer passed 1048576 bytes"), rec.error


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_only_the_request_timeout_bounds_a_silent_server(http):
    """No idle timeout applies (the answer comes whole, after the generation); a server
    that never answers ends as a per-request timeout error."""
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the client gives up (closes)

    rec = await _send_whole(silent, http, request_timeout_s=0.3)
    assert rec.status == "error" and "request timed out after 0.3s" in rec.error, rec.error


def test_run_options_drop_the_idle_timeout_and_the_config_rules():
    cfg = RunConfig.from_dict(_cfg())
    opts = TransportOptions.of_run(cfg, "http://127.0.0.1:1")
    assert opts.stream_idle_timeout_s is None and opts.request_timeout_s == 600.0
    streamed = RunConfig.from_dict({**_cfg(), "backend": "openai"})
    assert TransportOptions.of_run(streamed, "http://127.0.0.1:1").stream_idle_timeout_s == 60.0
    with pytest.raises(ConfigError, match="'vllm-tokens' only streams; use openai or openai-chat"):
        RunConfig.from_dict(_cfg("vllm-tokens")).check()
    with pytest.raises(ConfigError, match=r"needs arrival\.request_timeout_s"):
        RunConfig.from_dict({**_cfg(), "arrival": {"request_timeout_s": None}}).check()
    with pytest.raises(ConfigError, match=r"set backend\.stream"):
        RunConfig.from_dict({"trace": SESSIONS,
                             "backend": {"name": "openai", "options": {"stream": False}}}).check()
