"""The summary of records streamed into a frame (``frame_of_stream``: what ``run_digest``
summarizes a run whose records stayed on disk from) is the in-memory one, byte for byte,
and so are the per-request metrics it derives."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from workbench.metrics import summarize
from workbench.metrics.derive import all_ones, append_ints
from workbench.metrics.frame import (
    DERIVED_COLUMNS,
    LIST_COLUMNS,
    FrameStream,
    frame_of_stream,
    to_frame,
)
from workbench.records import RequestRecord, RunResult


def _records(run: RunResult) -> list[RequestRecord]:
    """A copy of ``run``'s records, edited."""
    recs = list(run.records)
    assert len(recs) > 4 and any(len(r.token_times_ns) > 2 for r in recs)
    r0, r1, r2, r3 = recs[:4]
    # what a live stream may hold and a virtual run does not: an empty (0-token) event,
    # counts longer than times, a record with no token event, a warm-up row
    recs[0] = dataclasses.replace(r0, token_counts=[0, *r0.token_counts[1:]])
    recs[1] = dataclasses.replace(r1, token_counts=[*r1.token_counts, 3])
    recs[2] = dataclasses.replace(r2, token_times_ns=[], token_counts=[])
    recs[3] = dataclasses.replace(r3, warmup=True)
    return recs


def _summary_bytes(result: RunResult, recs: list[RequestRecord], *, stream: bool) -> bytes:
    run = RunResult(result.run_id, [] if stream else recs, manifest=result.manifest,
                    lifecycle=[], metrics_timeline=result.metrics_timeline,
                    cancelled=result.cancelled)  # fmt: skip
    frame = frame_of_stream(iter(recs)) if stream else None
    return orjson.dumps(summarize(run, frame=frame), option=orjson.OPT_SORT_KEYS)


def test_summary_from_the_stream_is_the_in_memory_one(tracelab_run: RunResult) -> None:
    result, recs = tracelab_run, _records(tracelab_run)
    assert _summary_bytes(result, recs, stream=True) == _summary_bytes(result, recs, stream=False)


def test_streamed_frame_derives_what_to_frame_derives(tracelab_run: RunResult) -> None:
    recs = _records(tracelab_run)
    want, got = to_frame(recs), frame_of_stream(iter(recs))
    assert list(got.columns) == list(want.columns)
    for col in DERIVED_COLUMNS:
        if col in LIST_COLUMNS:
            continue
        assert np.array_equal(got[col].to_numpy(), want[col].to_numpy(), equal_nan=True), col
    assert [g.tolist() for g in got["itl_ms"]] == list(want["itl_ms"])
    # the token lists are derived from and let go: empty rows, as in a frame read back
    # from a records.parquet without them
    assert all(len(t) == 0 for t in got["token_times_ns"])
    assert all(len(c) == 0 for c in got["token_counts"])


def test_streamed_frame_of_no_records() -> None:
    assert len(frame_of_stream(iter([]))) == 0


def _ones_then(run: RunResult, at: int | None) -> list[RequestRecord]:
    """``run``'s records, a virtual run's (every token count 1), with record ``at``'s
    counts no longer all ones (None: none edited)."""
    recs = list(run.records)
    assert all(c == 1 for r in recs for c in r.token_counts) and len(recs) > 4
    if at is not None:
        r = recs[at]
        recs[at] = dataclasses.replace(r, token_counts=[2, *r.token_counts[1:]])
    return recs


@pytest.mark.parametrize("at", [None, 0, 3, -1], ids=["all-ones", "first", "fourth", "last"])
def test_counts_of_ones_are_not_stored_and_derive_the_same(tracelab_run: RunResult,
                                                           at: int | None) -> None:
    recs = _ones_then(tracelab_run, at)
    stream = FrameStream()
    for r in recs[:3]:
        stream.add(r)
    # a virtual run's counts (all ones) are held as their number: no 8 B a token
    held = 0 if at in (None, 3, -1) else sum(len(r.token_counts) for r in recs[:3])
    assert len(stream._counts) == held  # (from the first row not all ones on, every count)
    assert _summary_bytes(tracelab_run, recs, stream=True) == _summary_bytes(
        tracelab_run, recs, stream=False)
    want, got = to_frame(recs), frame_of_stream(iter(recs))
    for col in DERIVED_COLUMNS:
        if col not in LIST_COLUMNS:
            assert np.array_equal(got[col].to_numpy(), want[col].to_numpy(), equal_nan=True), col
    assert [g.tolist() for g in got["itl_ms"]] == list(want["itl_ms"])


def test_all_ones_is_what_append_ints_takes_as_ones() -> None:
    from array import array

    long_floats = [1.0] * (4096 + 1)
    with pytest.raises(TypeError):  # fromlist refuses a float: not ones, raises as before
        append_ints(array("q"), long_floats)
    assert not all_ones(long_floats)
    for ones in ([], [1, 1.0, True], [1] * 5000, [True] * 5000, np.ones(7, dtype=np.int64)):
        assert all_ones(ones)
        buf = array("q")
        append_ints(buf, ones)
        assert buf.tolist() == [1] * len(ones)
    for other in ([1, 2], [0], (1, 1), np.ones(3, dtype=np.int32), np.array([1, 0])):
        assert not all_ones(other)
