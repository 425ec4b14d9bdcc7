"""Header names and values are checked with the config: exit 2, nothing sent
(docs/config-bounds.md, "Values with a grammar").

Before: ``--header 'X-Note=café 🙂'`` passed the config check and failed every request
(exit 4); ``Transfer-Encoding: chunked`` beside the client's ``Content-Length``, a second
``Content-Length`` or ``Host`` (request-smuggling shapes) were sent as given.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from echo_server import echo_server

from workbench.config.validation import check_header
from workbench.data import path as data_path
from workbench.errors import ConfigError, ExitCode

LARGE = str(data_path("tracelab/multi_session_large.csv"))
REPO = Path(__file__).resolve().parents[2]


async def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workbench", *args,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, out.decode("utf-8", "replace")


@pytest.mark.parametrize(("flag", "words"), [
    ("X-Note=café 🙂", ["ASCII", "'é' at character 4"]),
    ("Transfer-Encoding=chunked", ["'Transfer-Encoding'", "frames or routes"]),
    ("Content-Length=5", ["'Content-Length'", "frames or routes"]),
    ("Host=evil.example", ["'Host'", "frames or routes"]),
    ("connection=close", ["'connection'", "frames or routes"]),
    ("X-Key=$WB_TEST_HEADER_SECRET", ["from $WB_TEST_HEADER_SECRET", "character 3"]),
])
async def test_bad_header_is_exit_2_before_anything_is_sent(tmp_path, flag, words):
    async with echo_server() as server:
        code, out = await _cli(
            "replay", "--trace", LARGE, "--target", server.base_url, "--no-progress",
            "--arrival", "saturated", "-o", str(tmp_path / "runs"), "--header", flag,
            env={"WB_TEST_HEADER_SECRET": "s3\u00e9cret-value"})
        assert server.seen == []  # not even the reachability probe
    assert code == ExitCode.CONFIG_ERROR, out[-2000:]
    assert "Traceback" not in out and out.count("\n") == 1, out
    for word in words:
        assert word in out, out
    assert "cret-value" not in out  # an $ENV value is never shown


def test_the_routing_header_takes_the_same_rule():
    with pytest.raises(ConfigError, match="frames or routes"):
        check_header("backend.options.routing_header", "X-Request-Id", "")


def test_plain_ascii_values_pass():
    check_header("backend.options.headers", "Authorization", "Bearer abc.def-123")
    check_header("backend.options.headers", "X-Priority", 3)
    check_header("backend.options.headers", "X-Tab", "a\tb")
