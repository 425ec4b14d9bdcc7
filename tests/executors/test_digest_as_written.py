"""``simulate --digest`` makes its records' canonical bytes and the summary's frame as
``records.jsonl`` is written (``report.canonical.WrittenRecords``), not by reading the
file back: the digest is byte for byte the one read back (``run_digest`` without it) on
every case of ``bench/digest_matrix.py`` (compiled and ``WORKBENCH_COMPILED=0``) and on
odd records; what it cannot take exactly turns it off, and the file is read as before
(docs/virtual-time.md, "The digest streamed")."""

from __future__ import annotations

import dataclasses
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.twin import in_child
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.records import RequestRecord, RunManifest, RunResult
from workbench.report.canonical import (
    WrittenRecords,
    canonical_report,
    report_digest,
    run_digest,
)
from workbench.storage import columnar
from workbench.storage.rundir import RECORDS, RecordWriter

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "bench" / "digest_matrix.py"
TRACE = str(data_path("tracelab/multi_session_example.csv"))
MOON = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def on_disk(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    return {**cfg, "out_dir": str(out), "executor": {"keep_records": False}}


def both(result: RunResult, written: WrittenRecords) -> tuple[bool, str, str]:
    """(whether ``written`` was usable, its digest, the digest read back)."""
    usable = written.usable(result)
    return usable, run_digest(result, None, written), run_digest(result)


def matrix(out: str) -> list[list[Any]]:
    """Every case of ``bench/digest_matrix.py`` run with its records on disk, told as
    written: ``[name, usable, as written, read back]``."""
    m = runpy.run_path(str(MATRIX))
    rows = []
    for name in [*m["CASES"], "synthetic"]:
        wl = None
        if name == "synthetic":
            cfg, engine, wl = m["synthetic_case"]()
            wl = dataclasses.replace(wl, source=MOON)
        else:
            cfg, engine = m["CASES"][name]
        written = WrittenRecords()
        result = simulate(on_disk(cfg, Path(out) / name), engine=engine, workload=wl,
                          mirror=written)
        assert result.records_on_disk and written.count == len(
            (Path(result.run_dir or "") / RECORDS).read_bytes().splitlines())
        rows.append([name, *both(result, written)])
    return rows


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_every_matrix_case_digests_the_same_as_written(tmp_path: Path, compiled: bool) -> None:
    rows = in_child(__file__, f"matrix({str(tmp_path)!r})", compiled)
    assert len(rows) == 15
    for name, usable, written, read in rows:
        assert usable, name
        assert written == read, name


def test_the_report_s_digest_as_written(tmp_path: Path) -> None:
    """And both are the whole report's digest, with an SLO too."""
    cfg = {"trace": TRACE, "context": "prefix-preserving",
           "target": {"url": "sim", "engine": {"num_blocks": 512}}}  # fmt: skip
    written = WrittenRecords()
    result = simulate(on_disk(cfg, tmp_path), mirror=written)
    want = report_digest(canonical_report(result, {"ttft_ms": 1.0}))
    assert written.usable(result)
    assert run_digest(result, {"ttft_ms": 1.0}, written) == want == run_digest(
        result, {"ttft_ms": 1.0})
    assert not written.on  # used up


def _record(i: int, **changes: Any) -> RequestRecord:
    t0 = 1_000_000_000 + i * 10_000_000
    rec = RequestRecord(
        run_id="r", request_id=f"q{i}", unit_ordinal=i, session_id=f"s{i % 3}", round_idx=i % 2,
        backend="openai", policy=None, planned_prefix_tokens=16, planned_input_tokens=32,
        planned_output_tokens=3, derived_prefix=16, sent_prompt_tokens=48, scheduled_ns=t0,
        released_ns=t0, admitted_ns=t0, dispatch_ns=t0, first_token_ns=t0 + 5_000_000,
        last_token_ns=t0 + 9_000_000, end_ns=t0 + 9_000_000,
        token_times_ns=[t0 + 5_000_000, t0 + 7_000_000, t0 + 9_000_000],
        token_counts=[1, 2, 1], http_status=200, prompt_tokens=48, completion_tokens=4,
        cached_tokens=16 if i % 4 else None, cached_tokens_reported=i % 4 != 0,
        finish_reason="length", routing_slot=i, warmup=i == 0,
        extra={"input_sequence_hashes": [2**64 - 1, 12], "worker": i % 2,
               "worker_waiting": 0, "tool_wait_ms": 1.5},
    )  # fmt: skip
    for k, v in changes.items():
        setattr(rec, k, v)
    return rec


def _failed(i: int) -> RequestRecord:
    return _record(i, status="error", error="HTTP 500: 東京 ✓ overloaded", http_status=500,
                   first_token_ns=None, last_token_ns=None, token_times_ns=[],
                   token_counts=[], completion_tokens=None, finish_reason=None)


class Sub(RequestRecord):
    __slots__ = ()


#: odd records, and whether the written bytes take them (False: the file is read back)
ODD: dict[str, tuple[list[RequestRecord], bool]] = {
    "plain": ([_record(i) for i in range(6)], True),
    "failed, unicode ids": ([_record(0), _failed(1), _record(2, request_id="réq-東京-✓",
                                                              session_id="séance 🚀")], True),
    "None and NaN outside the summary": ([_record(1, cached_tokens=None, error=None, extra={
        "tool_wait_ms": float("nan"), "worker": None, "nested": {"b": [1.5, None], "a": ()}}),
        _record(2, extra={"input_sequence_hashes": (5, 2**63), "x": np.float32(0.1)})], True),
    "tuples as token lists": ([_record(1, token_times_ns=(1, 2), token_counts=(1, 1))], True),
    "no records": ([], True),
    "NaN in a stored field": ([_record(1), _record(2, cached_tokens=float("nan"))], False),
    "a float in a stored field": ([_record(1, prompt_tokens=48.0)], False),
    "a numpy worker": ([_record(1, extra={"worker": np.int64(1)})], False),
    "an escaped control character": ([_record(1, error="a\x01b")], False),
    "a secret redacted": ([_record(1, error="Authorization: Bearer abcdefghijklmnop1234")],
                          False),
    "a subclass": ([_record(0), Sub(**_record(1).to_dict())], False),
    "a value orjson writes by default": ([_record(1, extra={"s": {3}})], False),
}


def _written_run(run_dir: Path, recs: list[RequestRecord]) -> tuple[RunResult, WrittenRecords]:
    """``recs`` written as a run writes them (``RecordSinks.on_record``), told to a
    ``WrittenRecords``; the result of a run with its records on disk."""
    written = WrittenRecords()
    with RecordWriter(run_dir / RECORDS) as w:
        for rec in recs:
            line = w.write_line(rec)
            written.add(rec, line, columnar.cut_tokens(line))
    manifest = RunManifest("r", records_kept=False)
    return RunResult("r", [], manifest=manifest, run_dir=str(run_dir)), written


@pytest.mark.parametrize("name", list(ODD))
def test_odd_records_digest_as_they_read_back(tmp_path: Path, name: str) -> None:
    recs, taken = ODD[name]
    result, written = _written_run(tmp_path, recs)
    assert written.usable(result) is taken
    got = run_digest(result, None, written)
    assert got == run_digest(result) == report_digest(canonical_report(result))


def test_lines_changed_after_the_run_are_read(tmp_path: Path) -> None:
    """The file is the written lines' only while as long as them: a line lost (a failed
    write) or one more, and it is read back."""
    for change in (lambda b: b[: b.rindex(b"\n", 0, -1) + 1], lambda b: b + b.splitlines(True)[0]):
        result, written = _written_run(tmp_path, [_record(i) for i in range(4)])
        path = tmp_path / RECORDS
        path.write_bytes(change(path.read_bytes()))
        assert not written.usable(result)
        assert run_digest(result, None, written) == run_digest(result)
        path.unlink()


GRAPH = """\
session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,\
parent_session_id,spawn_round,spawn_trigger,spawn_delay_ms,join_round
p,0,0,64,8,2,,,,,
p,1,72,32,8,1,,,,,
c1,0,0,48,6,1,p,0,,,
c2,0,0,40,4,0,p,0,,0,1
"""


def test_a_session_graph_reads_its_records_back(tmp_path: Path) -> None:
    """Its summary's tasks need the records: read back, the written bytes let go."""
    graph = tmp_path / "graph.csv"
    graph.write_text(GRAPH)
    written = WrittenRecords()
    result = simulate(on_disk({"trace": {"path": str(graph)}, "arrival": {"mode": "saturated"},
                               "backend": "openai",
                               "target": {"url": "sim", "engine": {"num_blocks": 512}}},
                              tmp_path / "out"), mirror=written)
    assert written.usable(result) and result.lifecycle == []
    assert run_digest(result, None, written) == run_digest(result) == report_digest(
        canonical_report(result))
    assert not written.on


def test_records_kept_in_memory_are_not_told(tmp_path: Path) -> None:
    written = WrittenRecords()
    result = simulate({"trace": TRACE, "context": "prefix-preserving", "out_dir": str(tmp_path),
                       "target": {"url": "sim", "engine": {"num_blocks": 512}}}, mirror=written)
    assert result.records and not written.on and written.count == 0
    assert run_digest(result, None, written) == run_digest(result)


class StopAfter(WrittenRecords):
    """Sends this process SIGINT as its ``n``-th record is told (the run's handler stops it)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def add(self, rec: RequestRecord, line: bytes | None, cut: Any) -> None:
        super().add(rec, line, cut)
        if self.count == self.n:
            os.kill(os.getpid(), signal.SIGINT)


def test_a_run_stopped_by_a_signal_digests_what_it_wrote(tmp_path: Path) -> None:
    written = StopAfter(40)
    saved: list[RunResult] = []
    with pytest.raises(KeyboardInterrupt):
        simulate(on_disk({"trace": {"path": MOON, "max_items": 300}}, tmp_path),
                 on_cancelled=saved.append, mirror=written)
    (result,) = saved
    n = len((Path(result.run_dir or "") / RECORDS).read_bytes().splitlines())
    assert result.cancelled and 40 <= n == written.count < 300
    assert written.usable(result)
    assert run_digest(result, None, written) == run_digest(result)


def test_the_command_s_digest_is_the_read_back_one(tmp_path: Path) -> None:
    """``workbench simulate --digest`` with its records on disk prints the digest that
    reading them back gives."""
    config = tmp_path / "c.yaml"
    config.write_text("executor:\n  keep_records: false\n")
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", TRACE, "--policy",
           "prefix-preserving", "--engine", "num_blocks=512", "--config", str(config),
           "-o", str(tmp_path / "cli"), "--digest"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    printed = next(ln for ln in done.stdout.splitlines() if ln.startswith("digest: "))
    cfg = {"trace": TRACE, "context": "prefix-preserving",
           "target": {"url": "sim", "engine": {"num_blocks": 512}}}  # fmt: skip
    assert printed == "digest: " + run_digest(simulate(on_disk(cfg, tmp_path / "api")))


def test_a_full_temporary_disk_reads_the_file_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes spill to the temporary directory; when it is full (here a 64 KiB tmpfs)
    the mirror turns off, the run goes on, and the file is read back."""
    from tests.small_disk import small_disk

    long = [_record(i, token_times_ns=list(range(10**9, 10**9 + 4000)),
                    token_counts=[1] * 4000) for i in range(40)]  # ~2 MB of lines
    with small_disk(tmp_path / "tmp", "64k") as tmp:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        result, written = _written_run(run_dir, long)
        assert not written.on and not written.usable(result)
        assert run_digest(result, None, written) == run_digest(result)


def test_a_record_s_exclusions_are_fields() -> None:
    """``WrittenRecords`` drops them from a record's row by name (no nested path)."""
    from workbench.report.canonical import _RECORD_EXCLUDED

    assert _RECORD_EXCLUDED and set(_RECORD_EXCLUDED) <= set(RequestRecord.__dataclass_fields__)
