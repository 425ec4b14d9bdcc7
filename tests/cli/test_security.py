"""No secret in any file or log a run writes; no run id escapes out_dir or into live HTML."""

import asyncio
import base64
import json
import logging
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pyarrow.parquet as pq
import pytest

from workbench import redact
from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import ConfigError, ExitCode
from workbench.executors.dispatch import run_async
from workbench.report import tables
from workbench.report.render import render_report
from workbench.sim.server import serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))
KEY = "sk-test-0123456789abcdefSECRET"
URL_PASSWORD = "urlpass-S3CRET-987"


def _every_text(run_dir: Path) -> dict[str, str]:
    """Every file of the run directory as text (Parquet: every value of every row)."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and p.suffix == ".parquet":
            out[p.name] = json.dumps(pq.read_table(p).to_pylist(), default=str)
        elif p.is_file():
            out[p.name] = p.read_bytes().decode("utf-8", "replace")
    return out


async def _run_with_echoing_errors(tmp_path, target_of, run_id):
    async with serve_sim(speedup=50.0, error_rate=0.5, error_echo_auth=True) as sim:
        cfg = RunConfig.from_dict({
            "trace": {"path": SESSIONS, "max_items": 6},
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0,
                        "stop_session_on_error": False},
            "backend": {"name": "openai", "preflight": True, "scrape_interval_s": 0.05},
            "target": target_of(sim.base_url), "out_dir": str(tmp_path), "run_id": run_id,
        })
        async with asyncio.timeout(60):
            return await run_async(cfg)


@pytest.mark.parametrize("with_url_credentials", [False, True])
async def test_no_secret_in_any_file_or_log(tmp_path, monkeypatch, caplog, with_url_credentials):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # also set with URL credentials: no crash

    def target_of(base):
        return base.replace("http://", f"http://bench:{URL_PASSWORD}@") if with_url_credentials \
            else base

    with caplog.at_level(logging.DEBUG):
        result = await _run_with_echoing_errors(tmp_path, target_of, "sec")
    errors = [r.error for r in result.records if r.status == "error"]
    assert errors and all(redact.MARK in e for e in errors), errors[:2]  # the echo happened
    basic = base64.b64encode(f"bench:{URL_PASSWORD}".encode()).decode()
    files = _every_text(tmp_path / "sec")
    assert {"records.jsonl", "records.parquet", "manifest.json", "summary.json",
            "lifecycle.jsonl", "metrics_timeline.jsonl"} <= set(files)
    for name, text in files.items():
        for secret in (KEY, URL_PASSWORD, basic):
            assert secret not in text, (name, secret)
    for secret in (KEY, URL_PASSWORD, basic):
        assert secret not in caplog.text
        assert all(secret not in (r.error or "") for r in result.records)
    manifest = json.loads(files["manifest.json"])
    assert "@" not in manifest["config"]["target"]["url"]
    assert "@" not in manifest["target"]["base_url"]


def test_redaction_patterns():
    text = ("echo Authorization: Bearer abc.DEF-123_xyz and sk-proj-ABCDEF123456 "
            "at http://alice:pw1234@h:8/x and basic QWxhZGRpbjpPcGVu")
    clean = redact.text(text)
    for secret in ("abc.DEF-123_xyz", "sk-proj-ABCDEF123456", "pw1234", "QWxhZGRpbjpPcGVu"):
        assert secret not in clean
    assert "http://[REDACTED]@h:8/x" in clean
    assert redact.strip_url_credentials("http://u:p@[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_run_id_cannot_leave_out_dir(tmp_path):
    out = tmp_path / "runs"
    for bad in ("../../../../x", "../x", "a/../../x", "..", "/abs", "a\\b"):
        with pytest.raises(ConfigError, match="run_id"):
            RunConfig.from_dict({"trace": SESSIONS, "out_dir": str(out), "run_id": bad})
        with pytest.raises(ConfigError, match="run_id"):
            render_report("replay", {"run_id": bad}, tmp_path / "reports")
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "replay", "--trace", SESSIONS, "--target", "sim",
         "-o", str(out), "--run-id", "../../escaped", "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == ExitCode.CONFIG_ERROR, proc.stderr
    assert "run_id" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("escaped*"))


def test_table_html_escapes_cells_labels_and_caption():
    evil = "<img src=x onerror=alert(1)>"
    df = pd.DataFrame({evil: [evil, 1.5]}, index=[evil, "b"])
    html = tables.show(df, caption=f"Run {evil}").html()
    assert evil not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") == 4


def test_a_record_line_is_redacted_however_many_numbers_surround_the_secret():
    """``redact.line`` looks for its triggers with the digits and number punctuation
    deleted: a secret among thousands of token times is still found, and a line whose
    digits only *join* into a trigger ("s1k-") comes back as it was (no secret in it)."""
    times = list(range(10**9, 10**9 + 3000))
    for said, secret in (("sk-abcdefghijklmnop1234", "abcdefghijklmnop1234"),
                         ("Bearer abc.def-123", "abc.def-123"),
                         ("http://user:pw9876@host/x", "pw9876")):  # fmt: skip
        raw = orjson.dumps({"token_times_ns": times, "error": f"HTTP 401 {said}",
                            "extra": {"h": [2**64 - 1] * 40}}) + b"\n"  # fmt: skip
        out = redact.line(raw)
        assert secret.encode() not in out, said
        assert orjson.loads(out)["token_times_ns"] == times
    joined = orjson.dumps({"error": "s1k-2 and b1earer", "t": times}) + b"\n"
    assert redact.line(joined) == joined
    clean = orjson.dumps({"t": times, "id": "run-1"}) + b"\n"
    assert redact.line(clean) is clean  # a clean line is not copied


def test_the_named_trigger_scan_finds_what_the_substring_searches_find():
    """``redact._named`` (each ``-`` and ``b`` looked at, then the searches past
    ``_SCAN_MAX``) answers as ``sk-``/``bearer``/``basic`` in the line do, triggers at
    any place among many dashes and b's, at the line's ends, and none."""
    import random

    rng = random.Random(44)
    alphabet = b"-bkseaicr_\"{}:x"
    for n in range(3000):
        size = rng.choice((0, 1, 3, 8, 40, 200))
        low = bytes(rng.choice(alphabet) for _ in range(size))
        if n % 3 == 0:  # a trigger planted somewhere, after up to 100 dashes and b's
            cut = rng.randrange(len(low) + 1)
            pad = b"-b" * rng.randrange(50)
            low = low[:cut] + pad + rng.choice((b"sk-", b"bearer", b"basic")) + low[cut:]
        want = b"sk-" in low or b"bearer" in low or b"basic" in low
        assert redact._named(low) == want, low
