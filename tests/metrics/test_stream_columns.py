"""``Columns.streamed`` (a ``FrameStream``'s columns read without pandas: what
``run_digest`` summarizes records on disk from) reads every column, comparison, rank and
gap selection as ``Columns.of`` the frame pandas makes of the same records does, and
the summary over it is the in-memory one byte for byte."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import orjson
import pytest

from workbench.data import path as data_path
from workbench.metrics import summarize
from workbench.metrics.columns import _FROM_GAPS, Columns
from workbench.metrics.frame import COLUMNS, FrameStream, frame_of_stream, to_frame
from workbench.records import RequestRecord, RunResult
from workbench.storage.columnar import EXTRA_INT_FIELDS

TRACE = str(data_path("tracelab/multi_session_example.csv"))


def _records(run: RunResult) -> list[RequestRecord]:
    """A copy of ``run``'s records, edited."""
    recs = list(run.records)
    r = recs
    # what other runs hold: errors (absent times and counts), huge and absent values,
    # warm-up rows, worker fields in extra, a cancelled request, text with no status
    recs[0] = dataclasses.replace(r[0], status="error", error="boom", first_token_ns=None,
                                  last_token_ns=None, token_times_ns=[], token_counts=[],
                                  completion_tokens=None, http_status=500)  # fmt: skip
    recs[1] = dataclasses.replace(r[1], warmup=True, extra={"worker": 3, "worker_waiting": 1})
    recs[2] = dataclasses.replace(r[2], cached_tokens=None, prompt_tokens=2**62 + 1,
                                  extra={"worker": 1, "dp_rank": 0})  # fmt: skip
    recs[3] = dataclasses.replace(r[3], end_ns=2**60 + 3, server_request_id="s-3",
                                  finish_reason=None, status="cancelled")  # fmt: skip
    return recs


def _both(recs: list[RequestRecord]) -> tuple[Columns, Columns]:
    stream = FrameStream()
    for rec in recs:
        stream.add(rec)
    return Columns.streamed(stream), Columns.of(frame_of_stream(iter(recs)))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


@pytest.mark.parametrize("edit", [False, True])
def test_every_column_reads_as_the_frames(edit: bool, tracelab_run: RunResult) -> None:
    result, recs = tracelab_run, _records(tracelab_run)
    if not edit:
        recs = list(result.records)
    got, want = _both(recs)
    names = [*COLUMNS, *EXTRA_INT_FIELDS, *_FROM_GAPS]
    for name in names:
        assert got.has(name) == want.has(name), name
        if name in ("itl_ms", "extra", "token_times_ns", "token_counts") or not want.has(name):
            continue
        try:
            w = want._src.load(name)
        except (TypeError, ValueError):  # a text column pandas will not load as numbers
            continue
        g = got._src.load(name)
        assert _same(g[1], w[1]), name
        assert _same(g[0], w[0]), (name, g[0][:5], w[0][:5])
    for value in ("ok", "error", "cancelled", ""):
        assert np.array_equal(got.equals("status", value), want.equals("status", value))
    assert np.array_equal(got.rank("request_id"), want.rank("request_id"))
    assert np.array_equal(got.rank("session_id"), want.rank("session_id"))
    assert _same(got.gaps(), want.gaps())
    some = np.arange(len(recs)) % 3 == 1
    assert _same(got.where(some).gaps(), want.where(some).gaps())


def test_the_summary_over_it_is_the_in_memory_one(tracelab_run: RunResult) -> None:
    result, recs = tracelab_run, _records(tracelab_run)
    run = RunResult(result.run_id, [], manifest=result.manifest, lifecycle=[],
                    metrics_timeline=result.metrics_timeline)  # fmt: skip
    stream = FrameStream()
    for rec in recs:
        stream.add(rec)
    cols = Columns.streamed(stream)
    got = summarize(run, frame=cols)
    assert cols._src._df is None  # every column the summary read was read without pandas
    held = RunResult(result.run_id, recs, manifest=result.manifest, lifecycle=[],
                     metrics_timeline=result.metrics_timeline)  # fmt: skip
    want = summarize(held, frame=to_frame(held))  # over the frame pandas makes
    assert orjson.dumps(got, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        want, option=orjson.OPT_SORT_KEYS)
    # records held in memory are read the streamed way too (no frame made)
    assert orjson.dumps(summarize(held), option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        want, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("kept", [False, True])
def test_a_simulated_run_imports_no_pandas(tmp_path, kept: bool) -> None:
    """``simulate`` in a process of its own, its records on disk (``--digest``:
    ``run_digest`` reads them back) or held (the summary reads them): neither imports
    pandas, nor the HTTP client or the notebook widgets (docs/virtual-time.md, "Start-up")."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"executor": {"keep_records": %s}}' % ("true" if kept else "false"))
    digest = "" if kept else "'--digest', "
    code = ("import sys\nfrom workbench.cli import main\n"
            f"sys.argv = ['workbench', 'simulate', '--trace', {TRACE!r}, {digest}\n"
            f"            '--config', {str(cfg)!r}, '-o', {str(tmp_path)!r}]\n"
            "status = main()\n"
            "print(status, [m for m in ('pandas', 'aiohttp', 'ipywidgets') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert ("digest: " in out) is not kept
    assert out.splitlines()[-1] == "0 []"
