"""Server faults over real HTTP (the embedded engine's fault switches): each ends as a
recorded request error with the server's own words, the run finishes and writes every file."""

import asyncio
import json
import logging
import math

import aiohttp
import pyarrow.parquet as pq
import pytest

from workbench.config import ArrivalSpec, RunConfig
from workbench.data import path as data_path
from workbench.executors.dispatch import run_async
from workbench.metrics import columns
from workbench.sim.server import MAX_REQUEST_ID, serve_sim

SESSIONS = str(data_path("tracelab/multi_session_example.csv"))


async def _run(tmp_path, knobs, backend="openai", run_id="r"):
    async with serve_sim(speedup=50.0, **knobs) as sim:
        cfg = RunConfig.from_dict({
            "trace": {"path": SESSIONS, "max_items": 4},
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.0,
                        "stop_session_on_error": False},
            "backend": {"name": backend, "preflight": False},
            "target": sim.base_url, "out_dir": str(tmp_path), "run_id": run_id,
        })
        async with asyncio.timeout(60):
            return await run_async(cfg)


def _files(run_dir):
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    table = pq.read_table(run_dir / "records.parquet")
    return records, summary, manifest, table


@pytest.mark.parametrize(("fault", "field", "value"), [
    ("string", "prompt_tokens", "'many'"),
    ("huge", "cached_tokens", "1e+30"),  # orjson reads ints past 64 bits as floats
    ("negative", "prompt_tokens", "-5"),
])
@pytest.mark.parametrize("backend", ["openai", "vllm-tokens", "sglang-tokens", "openai-chat"])
async def test_bad_usage_is_a_request_error_and_the_run_ends_whole(
    tmp_path, fault, field, value, backend
):
    result = await _run(tmp_path, {"usage_fault": fault}, backend)
    records, summary, manifest, table = _files(tmp_path / "r")
    assert manifest["status"] == "completed"
    assert records and all(r["status"] == "error" for r in records)
    assert all(f"usage {field}={value}" in r["error"] for r in records), records[0]["error"]
    assert summary["errors"] == len(records) == table.num_rows
    assert result.records[0].prompt_tokens is None  # never a value no step can trust


async def test_a_200_with_a_json_error_body_keeps_the_servers_message(tmp_path):
    await _run(tmp_path, {"error_rate": 1.0, "error_status": 200})
    records, summary, _, _ = _files(tmp_path / "r")
    assert summary["errors"] == len(records) > 0
    for r in records:
        assert r["http_status"] == 200
        assert "server error (HTTP 200, JSON body): injected fault: error_rate" in r["error"]


async def test_cumulative_chat_text_fails_the_request_naming_the_cause(tmp_path):
    await _run(tmp_path, {"text_cumulative": True}, "openai-chat")
    records, _, _, _ = _files(tmp_path / "r")
    long_enough = [r for r in records if r["planned_output_tokens"] >= 3]
    assert long_enough and all("content is cumulative" in r["error"] for r in long_enough)


async def test_delta_chat_text_is_not_mistaken_for_cumulative(tmp_path):
    await _run(tmp_path, {}, "openai-chat")
    records, summary, _, _ = _files(tmp_path / "r")
    assert summary["errors"] == 0 and summary["ok"] == len(records)


def test_columnar_nulls_values_an_older_file_may_hold(tmp_path, caplog):
    """records.jsonl written by another tool with bad counts still converts, row kept."""
    good = {"run_id": "x", "request_id": "a", "unit_ordinal": 0, "session_id": "s",
            "round_idx": 0, "backend": "openai", "policy": None, "planned_prefix_tokens": 0,
            "planned_input_tokens": 4, "planned_output_tokens": 2, "status": "ok"}
    bad = {**good, "request_id": "b", "prompt_tokens": "many", "cached_tokens": 10**30,
           "token_times_ns": [1, "x"], "token_counts": [1, 1], "error": {"nested": 1}}
    (tmp_path / "records.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with caplog.at_level(logging.WARNING):
        table = pq.read_table(columns.convert(tmp_path)).to_pylist()
    assert [r["request_id"] for r in table] == ["a", "b"]
    assert table[1]["prompt_tokens"] is None and table[1]["cached_tokens"] is None
    assert "record b" in caplog.text


async def test_a_100k_character_request_id_gets_a_4xx_and_no_traceback(caplog):
    rid = "x" * 100_000
    body = {"prompt": [1, 2, 3], "max_tokens": 2, "stream": True}
    with caplog.at_level(logging.DEBUG):
        async with serve_sim() as sim, aiohttp.ClientSession() as http:
            url = f"{sim.base_url}/v1/completions"
            async with http.post(url, json={**body, "rid": rid}) as resp:
                assert resp.status == 400
                assert f"at most {MAX_REQUEST_ID}" in (await resp.json())["error"]["message"]
            async with http.post(url, json=body, headers={"x-request-id": rid}) as resp:
                assert 400 <= resp.status < 500
            async with http.post(url, json={**body, "rid": {"a": 1}}) as resp:
                assert resp.status == 400
            async with http.post(url, json={**body, "rid": "ok-id"}) as resp:
                assert resp.status == 200  # the server is still serving
                await resp.read()
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]


def test_the_default_request_timeout_is_finite():
    a = ArrivalSpec()
    assert a.request_timeout_s is not None and math.isfinite(a.request_timeout_s)
    assert a.stream_idle_timeout_s is not None and math.isfinite(a.stream_idle_timeout_s)
