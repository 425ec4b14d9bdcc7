"""A sweep's process reads a trace file once for all its points (``points._read_once``):
the points of the same trace share one workload, a file written over is read again, what
is not one file is read by each run, and a point's outcome is the one it has reading the
trace itself (docs/sweeps.md, "Points")."""

from __future__ import annotations

import os
import shutil

import orjson
import pytest

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.errors import TraceFormatError
from workbench.executors.virtual import simulate
from workbench.sweeps import points

TRACE = data_path("tracelab/multi_session_example.csv")


def _cfg(trace: str, tmp_path, **arrival) -> RunConfig:
    return RunConfig.from_dict({"trace": {"path": trace}, "arrival": arrival,
                                "out_dir": str(tmp_path)})  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh():
    points.forget_traces()
    yield
    points.forget_traces()


def test_points_of_one_trace_share_its_workload_a_rewritten_file_is_read_again(tmp_path):
    trace = tmp_path / "trace.csv"
    shutil.copy(TRACE, trace)
    first = points._read_once(_cfg(str(trace), tmp_path, rate=1.0))
    assert first is not None and not first.streamed
    assert points._read_once(_cfg(str(trace), tmp_path, rate=2.0)) is first
    other = points._read_once(_cfg(str(trace), tmp_path, rate=1.0, tool_wait_scale=0.5))
    assert other is first  # the arrival is not the trace
    windowed = RunConfig.from_dict({"trace": {"path": str(trace), "max_items": 2},
                                    "out_dir": str(tmp_path)})  # fmt: skip
    assert points._read_once(windowed) is not first  # another window: another workload
    trace.write_text(trace.read_text() + "\n")
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = points._read_once(_cfg(str(trace), tmp_path, rate=1.0))
    assert again is not first and again == first  # read again: the same units


def test_what_is_not_one_file_is_read_by_each_run(tmp_path):
    assert points._read_once(_cfg("synthetic:agentic,sessions=3", tmp_path)) is None
    assert points._read_once(_cfg(str(tmp_path / "missing.csv"), tmp_path)) is None
    with pytest.raises(TraceFormatError, match=r"missing\.csv:0: no such file"):  # its own
        simulate(_cfg(str(tmp_path / "missing.csv"), tmp_path))


def test_a_point_on_the_shared_workload_has_the_outcome_of_its_own_reading(tmp_path):
    trace = str(TRACE)
    shared = points._read_once(_cfg(trace, tmp_path / "a", rate=2.0))
    for rate in (2.0, 4.0):
        got = simulate(_cfg(trace, tmp_path / "a", rate=rate), workload=shared)
        want = simulate(_cfg(trace, tmp_path / "b", rate=rate))
        assert [r.to_dict() | {"run_id": ""} for r in got.records] == [
            r.to_dict() | {"run_id": ""} for r in want.records]
        assert orjson.dumps(got.summary, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
            want.summary, option=orjson.OPT_SORT_KEYS)
