"""Every credential a run sends, however it was given, is absent from every output.

A server echoes every request's headers, URL and body fields into its error bodies,
into the ``id`` of its 200 streams and into its refusal of the prefix-cache reset
(tests/echo_server.py). ``workbench replay`` (a subprocess: its console captured) and
then ``workbench report`` (HTML report and executed notebook) run against it; no
secret may appear in the run directory (records, Parquet, manifest, summary, ...),
the report directory or either command's console (docs/security.md).
"""

import asyncio
import base64
import json
import os
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from echo_server import echo_server

from workbench import redact
from workbench.data import path as data_path

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))

ENV_KEY = "sk-envkey-0123456789abcdefSECRET"  # OPENAI_API_KEY: Authorization: Bearer
HEADER_ENV = "azkey-FROM-ENV-5d41402abc4b2a76"  # --header api-key=$GATEWAY_KEY
HEADER_LITERAL = "cookie-literal-7f3a9c2e11"  # --header Cookie=sid=... (on the command line)
QUERY_KEY = "qkey-IN-URL-QUERY-42aa17c0"  # ?api_key=...
BODY_TOKEN = "bodytoken-SECRET-991c"  # --body-field auth_token=...
URL_USER, URL_PASSWORD = "benchuser", "urlpass-S3CRET-987"


def _texts(root: Path) -> dict[str, str]:
    """Every file under ``root`` as text (Parquet: every value of every row)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix == ".parquet":
            out[str(p.relative_to(root))] = json.dumps(pq.read_table(p).to_pylist(), default=str)
        elif p.is_file():
            out[str(p.relative_to(root))] = p.read_bytes().decode("utf-8", "replace")
    return out


async def _cli(*args: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workbench", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode("utf-8", "replace")


@pytest.mark.parametrize("source", ["env-header-query-body", "url-userinfo",
                                    "url-userinfo-2-workers"])
async def test_no_credential_from_any_source_in_any_output(tmp_path, source):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "GATEWAY_KEY": HEADER_ENV, "OPENAI_API_KEY": ENV_KEY}
    basic = base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()
    async with echo_server() as server:
        if source.startswith("url-userinfo"):  # the URL's credentials win over the env key
            target = server.base_url.replace("http://", f"http://{URL_USER}:{URL_PASSWORD}@")
            target += f"/?api_key={QUERY_KEY}"
            secrets = [URL_PASSWORD, basic, QUERY_KEY]
            # worker processes send (and so register) the credentials themselves
            extra: list[str] = (["--workers", "2", "--max-concurrency", "2"]
                                if source.endswith("workers") else [])
        else:
            target = f"{server.base_url}/v1?api_key={QUERY_KEY}&api-version=2024-10-21"
            secrets = [ENV_KEY, HEADER_ENV, HEADER_LITERAL, QUERY_KEY, BODY_TOKEN]
            extra = ["--header", "api-key=$GATEWAY_KEY", "--header", f"Cookie=sid={HEADER_LITERAL}",
                     "--body-field", f"auth_token={BODY_TOKEN}"]
        code, console = await _cli(
            "replay", "--trace", SESSIONS, "--max-items", "4", "--target", target,
            "--arrival", "saturated", "--tool-wait-scale", "0", "--continue-on-error",
            "--no-preflight", "--max-error-rate", "1", "-o", str(tmp_path / "runs"),
            "--run-id", "echo", "--no-progress", *extra, env=env, timeout=120,
        )
        assert code == 0, console
        # every source reached the server (so the echo carried it)
        assert server.requests >= 4
        assert all(f"api_key={QUERY_KEY}" in p for p in server.seen if p.startswith("/v1/comp"))
        expected = f"Basic {basic}" if source.startswith("url") else f"Bearer {ENV_KEY}"
        assert set(server.authorizations) == {expected}
    run_dir = tmp_path / "runs" / "echo"
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    errors = [r["error"] for r in records if r["status"] == "error"]
    echoed_ids = [r["server_request_id"] for r in records if r["status"] == "ok"]
    assert errors and echoed_ids, records
    assert all("x-request-id:" in e.lower() and redact.MARK in e for e in errors), errors[0]
    assert all(redact.MARK in i for i in echoed_ids), echoed_ids[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert redact.MARK in json.dumps(manifest["cache_flush"])  # the reset's 401 echo
    assert "api_key=[REDACTED]" in manifest["config"]["target"]["url"]
    assert "api_key=[REDACTED]" in manifest["target"]["base_url"]
    assert "note: prefix cache not reset" in console  # the note printed the echo, redacted

    rcode, rconsole = await _cli("report", str(run_dir), "-o", str(tmp_path / "reports"),
                                 env=env, timeout=600)
    assert rcode == 0, rconsole
    report_files = _texts(tmp_path / "reports")
    assert any(name.endswith("report.html") for name in report_files)
    assert any(name.endswith(".ipynb") for name in report_files), sorted(report_files)
    outputs = {**{f"run/{k}": v for k, v in _texts(run_dir).items()},
               **{f"report/{k}": v for k, v in report_files.items()},
               "replay console": console, "report console": rconsole}
    assert {"run/records.jsonl", "run/records.parquet", "run/manifest.json",
            "run/summary.json"} <= set(outputs)
    for name, text in outputs.items():
        for secret in secrets:
            assert secret not in text, (name, secret)


def test_registration_rules_and_structure_safe_redaction(monkeypatch):
    """Which sent values are registered (docs/security.md), and a registered secret that
    occurs inside a number or a key cannot break a JSON line."""
    from workbench.config import RunConfig

    # this process's registry is restored afterwards (registrations are never removed)
    monkeypatch.setattr(redact, "_secrets", set(redact._secrets))
    monkeypatch.setattr(redact, "_secret_bytes", list(redact._secret_bytes))
    monkeypatch.setenv("REG_TEST_KEY", "abc1")  # short, but read from $ENV: a secret
    cfg = RunConfig.from_dict({
        "trace": SESSIONS,
        "target": {"url": "http://127.0.0.1:9/?key=q7Zt&api-version=2024-10-21&x=1"},
        "backend": {"options": {
            "headers": {"X-Api-Key": "k9x2", "x-priority": "high", "X-Tenant": "tenant-0042",
                        "X-From-Env": "$REG_TEST_KEY", "Cookie": "a=1; sid=cookievalue77"},
            "extra_body": {"model_hint": "llama-3-8b-instruct",
                           "auth": {"value": "tok-55e1"}}}},
    })
    cfg.register_secrets()
    text = redact.text("high k9x2 tenant-0042 abc1 cookievalue77 tok-55e1 q7Zt 2024-10-21 "
                       "llama-3-8b-instruct x=1")
    for secret in ("k9x2", "tenant-0042", "abc1", "cookievalue77", "tok-55e1", "q7Zt",
                   "2024-10-21"):
        assert secret not in text, (secret, text)
    # a short value under a plain name and body fields not named as credentials stay
    assert "high" in text and "llama-3-8b-instruct" in text and "x=1" in text
    assert redact.safe_url(cfg.target.url) == (
        "http://127.0.0.1:9/?key=[REDACTED]&api-version=[REDACTED]&x=[REDACTED]")
    # a credential-named query parameter in any echoed URL, registered or not
    assert "zz9" not in redact.text("GET /v1/models?access_token=zz9&a=b")
    # JSON-safe: a secret that is also part of a number or of a key leaves valid JSON
    redact.register("424242")
    line = b'{"t_ns":9424242000,"k424242":"v 424242","n":[1424242]}\n'
    out = json.loads(redact.line(line))
    assert out["t_ns"] == 9424242000 and out["n"] == [1424242]
    assert out["k[REDACTED]"] == "v [REDACTED]"


async def test_a_verbose_traceback_carries_no_credential(tmp_path):
    """``workbench -v`` logs the traceback of a failed command: the error line was
    redacted, the traceback under it (the exception's text once more, here a server's
    500 echoing the request's headers and URL) was not, and the log handler wrote to the
    console beneath the redacting stream."""
    from aiohttp import web
    from loopback import serve_app

    async def echo_500(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, text=f"failed for {dict(request.headers)!r} "
                                             f"at {request.url}")

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "GATEWAY_KEY": HEADER_ENV, "OPENAI_API_KEY": ENV_KEY}
    async with serve_app([web.post("/{tail:.*}", echo_500)]) as url:
        code, console = await _cli(
            "-v", "replay", "--trace", SESSIONS, "--max-items", "1",
            "--target", f"{url}/?api_key={QUERY_KEY}", "--preflight", "--no-flush-cache",
            "--header", "api-key=$GATEWAY_KEY", "-o", str(tmp_path / "runs"),
            "--no-progress", env=env, timeout=120)
    assert code == 1, console
    assert "Traceback" in console and "HTTP 500" in console, console  # the path under test
    for secret in (ENV_KEY, HEADER_ENV, QUERY_KEY):
        assert secret not in console, (secret, console)


@pytest.mark.parametrize("value", ["sk-proj-abc123DEF456ghi789", "Bearer abc123def456",
                                   "key with spaces 12345678", "3abc"])
def test_a_key_given_where_its_variable_name_goes_is_refused_unshown(tmp_path, value):
    """``api_key_env`` names the variable holding the key; a user who put the key itself
    there ran unauthenticated (401s) with the key written in the manifest's config (a
    key not shaped like ``sk-``/``Bearer`` is not redacted). Refused before anything is
    created, the value not shown: it may be the key."""
    from workbench.config import RunConfig
    from workbench.errors import ConfigError

    cfg = {"trace": SESSIONS, "target": "http://127.0.0.1:9", "out_dir": str(tmp_path),
           "backend": {"name": "openai", "api_key_env": value}}
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(cfg)
    assert str(info.value).startswith("backend.api_key_env: expected the name of an "
                                      "environment variable")
    assert value not in str(info.value) and not list(tmp_path.iterdir())
    for name in ("MY_KEY", "OPENAI_API_KEY", "_k2", None, ""):  # a name, or no key
        RunConfig.from_dict({**cfg, "backend": {"name": "openai", "api_key_env": name}})


#: a key with characters a JSON encoder escapes (``"``, ``\``; ``/`` by some) and a header
#: value with characters a URL or JSON encoder changes: their echo is not the bytes sent
ODD_KEY = 'oddkey-Zq8Quot"Zq9Bksl\\Zr1Slsh/Zr2Plus+end'
ODD_HEADER = "hdr/Zs4Slsh\"Zs5Quot+Zs6Plus"


async def test_a_secret_echoed_json_escaped_is_redacted_whole(tmp_path):
    """A server (a gateway, a debugging proxy) answering 500 with a JSON body that echoes
    the request's headers: a key holding ``"`` or ``\\`` arrives there escaped
    (``\\"``, ``\\\\``), not as the bytes registered. Before, only what the ``Bearer``
    pattern took of it was redacted, up to the first backslash: records, summary error
    samples and the report kept the key's tail (``"Zq9Bksl\\\\Zr1Slsh/...``), and the
    header read from ``$ENV`` whole but for the pattern."""
    from aiohttp import web
    from loopback import serve_app

    async def echo_json_500(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {"error": {"message": "upstream failed", "headers": dict(request.headers),
                       "url": str(request.url)}}, status=500,
            dumps=lambda o: json.dumps(o).replace("/", "\\/"))  # as PHP's json_encode does

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "GATEWAY_KEY": ODD_HEADER, "OPENAI_API_KEY": ODD_KEY}
    async with serve_app([web.post("/{tail:.*}", echo_json_500),
                          web.get("/{tail:.*}", echo_json_500)]) as url:
        code, console = await _cli(
            "replay", "--trace", SESSIONS, "--max-items", "2", "--target", url,
            "--arrival", "saturated", "--tool-wait-scale", "0", "--continue-on-error",
            "--no-preflight", "--no-flush-cache", "--max-error-rate", "1",
            "--header", "x-gateway=$GATEWAY_KEY", "-o", str(tmp_path / "runs"),
            "--run-id", "odd", "--no-progress", env=env, timeout=120)
        assert code == 0, console
    run_dir = tmp_path / "runs" / "odd"
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "error" for r in records), records
    assert all("Bearer [REDACTED]" in r["error"] for r in records), records[0]["error"]
    rcode, rconsole = await _cli("report", str(run_dir), "-o", str(tmp_path / "reports"),
                                 env=env, timeout=600)
    assert rcode == 0, rconsole
    outputs = {**{f"run/{k}": v for k, v in _texts(run_dir).items()},
               **{f"report/{k}": v for k, v in _texts(tmp_path / "reports").items()},
               "replay console": console, "report console": rconsole}
    # no part of either secret, in any form: each run of 5+ letters and digits of it
    parts = {p for s in (ODD_KEY, ODD_HEADER) for p in re.split(r"[^A-Za-z0-9]+", s)
             if len(p) >= 5 and p.startswith("Z")}
    assert len(parts) == 7, parts
    for name, text in outputs.items():
        for part in parts:
            assert part not in text, (name, part)
