"""QA: tracegen never replaces something that is not a regular file with its output.

Found by the independent check: ``tracegen -o`` writes ``OUT.tmp`` and renames it
over ``OUT``, so ``-o fifo.csv`` replaced a named pipe with a CSV, and as root
``-o /dev/full`` replaced the device node itself (exit 0).
"""

import os

import pytest

from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.workloads.materialize import tracegen

RAW = data_path("tracelab/multi_session_example.csv")


def test_an_output_that_is_a_fifo_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        tracegen(RAW, fifo)
    assert fifo.is_fifo()
    assert not (tmp_path / "out.manifest.json").exists()


def test_a_sidecar_that_is_not_a_regular_file_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "out.plan.json").mkdir()
    with pytest.raises(ConfigError, match="not a regular file"):
        tracegen(RAW, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_an_existing_regular_output_is_still_replaced(tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("old\n")
    tracegen(RAW, out)
    assert out.read_text().startswith("request_id,")


@pytest.mark.parametrize("name", [
    "batchbench/trajectories_v1.jsonl",  # ids `{trajectory}_request_{k}`: once written as-is
    "tracelab/multi_session_example.csv",
    "tracelab/round_trace.sanitized.jsonl",
    "request-factory/session_rounds_v2_example.csv",
])
def test_what_tracegen_writes_reads_back_round_for_round(tmp_path, name):
    """Every session trace bundled: tracegen's CSV loads as session-execution-v2 with the
    rounds the generator planned (canonical request ids, same lengths and waits)."""
    from workbench.traces.canonical import request_id
    from workbench.traces.load import load_trace

    src = {u.unit_id: u for u in load_trace(data_path(name)).units}
    back = load_trace(tracegen(data_path(name), tmp_path / "out.csv").csv_path)
    assert back.meta["detected_format"] == "session-execution-v2"
    assert sorted(u.unit_id for u in back.units) == sorted(src)
    for unit in back.units:
        orig = src[unit.unit_id].rounds
        assert [r.request_id for r in unit.rounds] == [
            request_id(unit.unit_id, k) for k in range(len(orig))]
        assert [r.output_len for r in unit.rounds] == [r.output_len for r in orig]
        assert [r.tool_wait_after_ms for r in unit.rounds] == [
            r.tool_wait_after_ms for r in orig]


@pytest.mark.parametrize("how", ["same path", "hard link", "symlink", "sidecar"])
def test_an_output_that_is_the_source_is_refused_and_the_source_kept(tmp_path, how):
    """``tracegen raw.csv -o raw.csv`` replaced the user's raw trace with its plan (exit
    0): the source is lost. The output and both sidecars must be other files."""
    raw = tmp_path / "raw.csv"
    raw.write_bytes(RAW.read_bytes())
    out = {"same path": raw, "hard link": tmp_path / "link.csv",
           "symlink": tmp_path / "sym.csv", "sidecar": tmp_path / "raw.csv"}[how]
    if how == "hard link":
        os.link(raw, out)
    elif how == "symlink":
        out.symlink_to(raw)
    src = raw
    if how == "sidecar":  # a source named like the output's manifest
        src = tmp_path / "t.manifest.json"
        src.write_bytes(data_path("batchbench/trajectories_v1.jsonl").read_bytes())
        out = tmp_path / "t.csv"
    before = src.read_bytes()
    with pytest.raises(ConfigError, match="is the source trace"):
        tracegen(src, out)
    assert src.read_bytes() == before
