"""The summary of records streamed into a frame (``frame_of_stream``: what ``run_digest``
summarizes a run whose records stayed on disk from) is the in-memory one, byte for byte,
and so are the per-request metrics it derives."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson

from workbench.metrics import summarize
from workbench.metrics.frame import DERIVED_COLUMNS, LIST_COLUMNS, frame_of_stream, to_frame
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
