"""Reading a trace costs memory in proportion to the file, never to the bound on trace
files (docs/trace-bounds.md): traced by ``tracemalloc`` (allocations, not time)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from workbench.data import path as data_path
from workbench.traces import bounds
from workbench.traces._io import open_trace
from workbench.traces.load import load_trace

SAMPLE = Path(data_path("weka/cc_traces_sample.jsonl"))


def _peak(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_file_allocates_its_size_not_the_bound(tmp_path: Path) -> None:
    """A 2.4 MB trace was read with one ``read(1 GiB + 1)``: Python allocates the whole
    request before it reads, so every load asked for 1 GiB (a MemoryError under an
    address-space limit, or with overcommit off, for a file of any size)."""
    size = SAMPLE.stat().st_size
    assert _peak(lambda: open_trace(SAMPLE)) < 3 * size < bounds.MAX_TRACE_BYTES
    grown = tmp_path / "t.jsonl"  # read to its end, whatever its size said
    grown.write_bytes(b"x" * (3 << 20))
    assert len(open_trace(grown)) == 3 << 20


def test_a_weka_jsonl_loads_within_a_few_times_its_size() -> None:
    """The bundled JSONL of conversations loads with a peak of about 7 times its size
    (the text, and the rounds' block ids that stay: 2.5 times). It was 13 times once the
    1 GiB read was gone: each file was first given to ``orjson.loads`` whole, to see
    whether it is one document, and orjson sets aside memory for the whole text before
    it finds that the second line is another document; and the lines were split into a
    list of them all, and every conversation's read requests kept until the last
    conversation's rounds were made."""
    size = SAMPLE.stat().st_size
    peak = _peak(lambda: load_trace(SAMPLE))
    assert peak < 10 * size, (peak / size)
