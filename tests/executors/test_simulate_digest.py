"""Portable canonical digests: the same trace content and engine config give the same digest
whatever the output folder, the trace's path, the host, the time and the process.

The canonical report leaves out exactly ``CANONICAL_EXCLUDED`` (wall clock, the host,
paths); every other field is in, so changing any measured number changes the digest.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.report.canonical import (
    CANONICAL_EXCLUDED,
    canonical_report,
    report_digest,
    run_digest,
)

TRACE = data_path("tracelab/multi_session_example.csv")
ENGINE = ["--engine", "num_blocks=512"]


def cli_digest(trace: Path, out: Path, cwd: Path, hash_seed: str) -> str:
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", str(trace), *ENGINE,
           "--policy", "prefix-preserving", "-o", str(out), "--digest"]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return next(ln for ln in done.stdout.splitlines() if ln.startswith("digest:"))


def test_digest_equal_across_output_folders_a_copied_trace_and_two_processes(
    tmp_path: Path,
) -> None:
    copied = tmp_path / "elsewhere" / "renamed-trace.csv"
    copied.parent.mkdir()
    shutil.copy(TRACE, copied)
    a = cli_digest(Path(TRACE), tmp_path / "a", tmp_path, "1")
    b = cli_digest(copied, tmp_path / "b" / "deeper", copied.parent, "2")
    assert a == b
    # and in this process, with no output folder at all, under another run id
    cfg = {"trace": str(copied), "context": "prefix-preserving", "run_id": "another-name",
           "target": {"url": "sim", "engine": {"num_blocks": 512}}}  # fmt: skip
    assert "digest: " + report_digest(canonical_report(simulate(cfg))) == a


def _changed(report: dict, edit) -> str:
    doc = copy.deepcopy(report)
    edit(doc)
    return report_digest(doc)


def test_every_measured_field_is_in_and_only_the_list_is_out() -> None:
    result = simulate({"trace": str(TRACE), "context": "prefix-preserving"})
    report = canonical_report(result)
    digest = report_digest(report)
    rec = report["records"][1]
    assert {"cached_tokens", "token_times_ns", "first_token_ns", "prompt_tokens"} <= set(rec)
    assert "run_id" not in rec and "run_id" not in report["manifest"]
    assert "path" not in report["manifest"]["trace"] and "sha256" in report["manifest"]["trace"]
    assert "vllm:num_preemptions_total" in report["metrics_timeline"][-1]
    for edit in (
        lambda d: d["records"][1].update(cached_tokens=d["records"][1]["cached_tokens"] + 16),
        lambda d: d["records"][1]["token_times_ns"].__setitem__(0, 1),
        lambda d: d["metrics_timeline"][-1].update({"vllm:num_preemptions_total": 99}),
        lambda d: d["manifest"]["engine"].update(num_blocks=1),
        lambda d: d["manifest"]["trace"].update(sha256="0" * 64),
    ):
        assert _changed(report, edit) != digest
    # the list is closed: each entry names its reason, and only those paths are dropped
    assert all(CANONICAL_EXCLUDED.values())
    full = {"manifest": result.manifest.to_dict(), "records": [r.to_dict() for r in result.records]}
    assert "run_id" in full["manifest"] and "run_id" in full["records"][0]


GRAPH = """\
session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,\
parent_session_id,spawn_round,spawn_trigger,spawn_delay_ms,join_round
p,0,0,64,8,2,,,,,
p,1,72,32,8,1,,,,,
c1,0,0,48,6,1,p,0,,,
c2,0,0,40,4,0,p,0,,0,1
"""


def test_the_streamed_digest_is_the_report_s_in_memory_and_on_disk(tmp_path: Path) -> None:
    """``run_digest`` hashes the canonical report's bytes as it makes them: the same sha256
    as ``report_digest(canonical_report(...))``, records kept or on disk (read back line by
    line, summarized from records.parquet), a session graph's lifecycle and tasks too."""
    graph = tmp_path / "graph.csv"
    graph.write_text(GRAPH)
    cases = [
        {"trace": str(TRACE), "context": "prefix-preserving"},
        {"trace": {"path": str(graph)}, "arrival": {"mode": "saturated"}, "backend": "openai"},
    ]
    for i, base in enumerate(cases):
        kept = simulate({**base, "target": {"url": "sim", "engine": {"num_blocks": 512}}})
        disk = simulate({**base, "out_dir": str(tmp_path / f"out{i}"),
                         "executor": {"keep_records": False},
                         "target": {"url": "sim", "engine": {"num_blocks": 512}}})
        assert not kept.records_on_disk and disk.records_on_disk
        want = report_digest(canonical_report(kept))
        assert run_digest(kept) == want
        # (the config differs: executor.keep_records is in the canonical manifest)
        assert run_digest(disk) == report_digest(canonical_report(disk)) != want
        if i == 1:
            assert kept.lifecycle and "agent_tasks" in canonical_report(kept)["summary"]
        slo = {"ttft_ms": 1.0}
        assert run_digest(kept, slo) == report_digest(canonical_report(kept, slo)) != want


def test_the_streamed_digest_reads_lines_that_are_not_exactly_a_record(tmp_path: Path) -> None:
    """A line with exactly a record's fields is hashed as read; one with a field absent (its
    default) or an unknown one (dropped) goes through ``RequestRecord``, as the report's
    records do: the digest is still ``report_digest(canonical_report(...))``'s."""
    from workbench.storage.rundir import RECORDS

    disk = simulate({"trace": str(TRACE), "context": "prefix-preserving",
                     "out_dir": str(tmp_path), "executor": {"keep_records": False},
                     "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
    path = Path(disk.run_dir or "") / RECORDS
    lines = path.read_bytes().splitlines()
    before = run_digest(disk)
    first, second = orjson.loads(lines[0]), orjson.loads(lines[1])
    del first["echoed_prompt_tokens"], first["schema"]  # their defaults: 0 and 1
    second["not_a_record_field"] = [1, 2]
    lines[0], lines[1] = orjson.dumps(first), orjson.dumps(second)
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert run_digest(disk) == report_digest(canonical_report(disk)) == before
    third = orjson.loads(lines[2])
    third["cached_tokens"] = (third["cached_tokens"] or 0) + 1
    lines[2] = orjson.dumps(third)
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert run_digest(disk) == report_digest(canonical_report(disk)) != before


def test_the_streamed_digest_reads_token_times_written_otherwise(tmp_path: Path) -> None:
    """A line's token times are read apart only when they are the digits orjson writes;
    written otherwise (spaces, a key spelled with an escape, the key nested too, "-0"),
    the line is read whole: the digest stays the report's either way."""
    disk = simulate({"trace": str(TRACE), "context": "prefix-preserving",
                     "out_dir": str(tmp_path), "executor": {"keep_records": False},
                     "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
    path = Path(disk.run_dir or "") / "records.jsonl"
    lines = path.read_bytes().splitlines()
    assert len(lines) >= 6 and all(b'"token_times_ns":[' in ln for ln in lines[:6])
    before = run_digest(disk)
    key = b'"token_times_ns":['
    lines[0] = lines[0].replace(key, b'"token_times_ns": [ ')
    lines[1] = lines[1].replace(key, b'"token\\u005ftimes_ns":[')
    lines[2] = lines[2].replace(b'"extra":{', b'"extra":{"token_times_ns":[1],')
    lines[3] = lines[3].replace(key, key + b"-0,")
    lines[4] = lines[4].replace(key, key + b"7 ,")
    lines[5] = lines[5].replace(key, key + b"0001,")  # not JSON: refused as before
    path.write_bytes(b"\n".join(lines[:5] + lines[6:]) + b"\n")
    got = run_digest(disk)
    assert got == report_digest(canonical_report(disk)) != before
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ValueError, match=r"records.jsonl:6: invalid JSON line"):
        run_digest(disk)


def test_the_streamed_digest_reads_token_counts_written_otherwise(tmp_path: Path) -> None:
    """The token counts are read apart too when they are the digits orjson writes; written
    otherwise (a space, a float, the key nested too, "-0", a bool), the row keeps them as
    the line reads: the digest stays the report's either way."""
    disk = simulate({"trace": str(TRACE), "context": "prefix-preserving",
                     "out_dir": str(tmp_path), "executor": {"keep_records": False},
                     "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
    path = Path(disk.run_dir or "") / "records.jsonl"
    lines = path.read_bytes().splitlines()
    key = b'"token_counts":['
    assert len(lines) >= 6 and all(key + b"1" in ln for ln in lines[:6])
    before = run_digest(disk)
    lines[0] = lines[0].replace(key, b'"token_counts": [ ')
    lines[1] = lines[1].replace(key + b"1", key + b"1.0")
    lines[2] = lines[2].replace(b'"extra":{', b'"extra":{"token_counts":[1],')
    lines[3] = lines[3].replace(key + b"1", key + b"-0,2")
    lines[4] = lines[4].replace(key + b"1", key + b"true")
    lines[5] = lines[5].replace(key + b"1", key + b"3")  # as orjson writes: read apart
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert run_digest(disk) == report_digest(canonical_report(disk)) != before
