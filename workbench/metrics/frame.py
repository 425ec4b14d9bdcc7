"""Per-request metrics: ``RequestRecord`` → one DataFrame row (names: docs/metrics.md).

Records keep raw integer-ns timestamps; the derived columns come from
``workbench.metrics.derive``, as those of ``records.parquet`` do.
"""

from __future__ import annotations

import dataclasses
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

import workbench.catalogs.requests as catalog
from workbench.errors import ConfigError
from workbench.metrics.derive import (
    INPUTS,
    TokenRows,
    all_ones,
    append_ints,
    derive,
    int64_view,
    split_gaps,
)
from workbench.records import RequestRecord, RunResult
from workbench.storage.rundir import load_records

if TYPE_CHECKING:  # pandas is imported by what builds a frame, not with the module
    import pandas as pd

RAW_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestRecord))
NS_COLUMNS: tuple[str, ...] = tuple(
    c for c in RAW_COLUMNS if c.endswith("_ns") and c != "token_times_ns"
)
#: the per-request metrics of a frame: the catalog's ``in_frame`` rows, in its order
DERIVED_COLUMNS: tuple[str, ...] = catalog.FRAME_COLUMNS
LIST_COLUMNS: tuple[str, ...] = catalog.names(kind="list")
COLUMNS: tuple[str, ...] = RAW_COLUMNS + DERIVED_COLUMNS

Data: TypeAlias = "RunResult | Iterable[RequestRecord | Mapping[str, Any]] | pd.DataFrame"


def as_records(
    data: RunResult | Iterable[RequestRecord | Mapping[str, Any]],
) -> list[RequestRecord]:
    """Records from a RunResult (read back from ``records.jsonl`` when they stayed on disk),
    a list of records, or a list of record dicts."""
    if isinstance(data, RunResult) and data.records_on_disk:
        return load_records(data.run_dir or "")
    if not isinstance(data, RunResult) and (
            isinstance(data, str | bytes | Mapping) or not isinstance(data, Iterable)):
        raise ConfigError(f"{EXPECTED}, got {_kind(data)}")
    items = data.records if isinstance(data, RunResult) else data
    out = []
    for i, r in enumerate(items):
        if isinstance(r, RequestRecord):
            out.append(r)
            continue
        if not isinstance(r, Mapping):
            raise ConfigError(f"{EXPECTED}; item {i} is {_kind(r)}")
        try:
            out.append(RequestRecord.from_dict(r))
        except (TypeError, ValueError, KeyError) as exc:
            raise ConfigError(f"record {i}: not a request record ({type(exc).__name__}: "
                              f"{exc})") from None
    return out


#: what the metrics functions take (``wb.to_frame``, ``wb.summarize``, ...)
EXPECTED = ("expected a RunResult, a list of RequestRecords or record dicts, or a "
            "DataFrame (wb.to_frame, wb.summarize)")


def _kind(value: Any) -> str:
    """A value's type in a message (never its content: it may be large, or a secret)."""
    return type(value).__name__


def _derived(recs: Sequence[RequestRecord]) -> dict[str, Any]:
    raw = {k: [getattr(r, k) for r in recs] for k in INPUTS}
    return derive(raw, [r.token_times_ns for r in recs], [r.token_counts for r in recs])


def output_token_counts(recs: Sequence[RequestRecord]) -> list[int]:
    """``output_tokens`` of many records at once (one ``derive`` call, not one per record)."""
    return [int(n) for n in _derived(recs)["output_tokens"]]


def is_frame(data: Any) -> bool:
    """Whether ``data`` is a DataFrame, without importing pandas (none can exist before)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(data, pd.DataFrame)


def to_frame(data: Data) -> pd.DataFrame:
    """One row per request: the raw record fields plus the derived metrics; ``*_ns`` columns
    nullable ``Int64`` (exact). A DataFrame is returned unchanged."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data
    recs = as_records(data)
    raw = {name: [getattr(r, name) for r in recs] for name in RAW_COLUMNS}
    raw["extra"] = [dict(e) for e in raw["extra"]]
    raw["token_times_ns"] = [list(t) for t in raw["token_times_ns"]]
    raw["token_counts"] = [list(c) for c in raw["token_counts"]]
    return _frame(raw)


_TOKENS = ("token_times_ns", "token_counts")
_KEPT: tuple[str, ...] = tuple(name for name in RAW_COLUMNS if name not in _TOKENS)


def frame_of_stream(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """``to_frame`` of records read once and let go (``records.jsonl`` line by line): the
    same numbers, no record held. Token times and counts go into one flat int64 buffer
    each (8 B a token); the rows' token lists are empty, their ``itl_ms`` views of one
    gaps array."""
    stream = FrameStream()
    for r in records:
        stream.add(r)
    return stream.frame()


class FrameStream:
    """``frame_of_stream`` fed a record at a time: ``add`` a ``RequestRecord``, or
    ``add_row`` a record's dict with every field of one (``RequestRecord.to_dict``'s keys:
    a line of ``records.jsonl`` read back), then ``frame``."""

    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        self.raw: dict[str, list[Any]] = {name: [] for name in _KEPT}
        self._appends = [(name, self.raw[name].append) for name in _KEPT]
        self._times, self._counts = array("q"), array("q")
        self._n_times: list[int] = []
        self._n_counts: list[int] = []
        #: how many counts so far while every one is 1 (a virtual run's: one token an
        #: event), held as that number, not 8 B each; None once one is not
        self._ones: int | None = 0

    def add(self, r: RequestRecord) -> None:
        for name, append in self._appends:
            append(getattr(r, name))
        self._tokens(r.token_times_ns, r.token_counts)

    def add_row(self, row: Mapping[str, Any]) -> None:
        for name, append in self._appends:
            append(row[name])
        self._tokens(row["token_times_ns"], row["token_counts"])

    def _tokens(self, times: Sequence[int], counts: Sequence[int]) -> None:
        append_ints(self._times, times)
        if self._ones is not None and all_ones(counts):
            self._ones += len(counts)
        else:
            if self._ones is not None:  # the ones so far, then this row's counts
                self._counts = array("q", [1]) * self._ones
                self._ones = None
            append_ints(self._counts, counts)
        self._n_times.append(len(times))
        self._n_counts.append(len(counts))

    def frame(self) -> pd.DataFrame:
        """The frame, once: the buffers are handed over (let go with the derivation's
        temporaries, not held while the frame is summarized)."""
        return frame_of(self.columns()[0])

    def columns(self) -> tuple[dict[str, Any], np.ndarray]:
        """What ``frame`` makes its frame of, once, without pandas: ``frame_columns``."""
        n_times, ones = self._n_times, self._ones
        # every count 1: one read-only int64 1 seen as the whole row (no memory a token)
        counts = int64_view(self._counts) if ones is None else np.broadcast_to(np.int64(1), ones)
        tokens = (TokenRows(int64_view(self._times), np.array(n_times, dtype=np.int64)),
                  TokenRows(counts, np.array(self._n_counts, dtype=np.int64)))
        raw: dict[str, Any] = dict(self.raw)
        raw["token_times_ns"] = [[] for _ in n_times]
        raw["token_counts"] = [[] for _ in n_times]
        self._empty()  # nothing held twice
        return frame_columns(raw, tokens=tokens)


def frame_columns(raw: dict[str, Any], *, tokens: tuple[TokenRows, TokenRows] | None = None,
                  ) -> tuple[dict[str, Any], np.ndarray]:  # fmt: skip
    """The columns of the frame of ``raw`` (a list per raw field; ``tokens``:
    ``frame_of_stream``'s flat token rows, derived from instead of ``raw``'s lists) before
    pandas: the raw lists, the derived arrays and ``itl_ms`` (each row's gaps), with every
    gap in one array (the rows' ``itl_ms`` are its views when ``tokens`` are given)."""
    times, counts = tokens or (raw["token_times_ns"], raw["token_counts"])
    d = derive(raw, times, counts)
    cols: dict[str, Any] = {name: raw[name] for name in RAW_COLUMNS}
    cols.update({name: d[name] for name in DERIVED_COLUMNS if name not in LIST_COLUMNS})
    if tokens is None:
        cols["itl_ms"] = split_gaps(d["gaps"], d["itl_count"])
    else:  # views of the one gaps array, row by row
        cols["itl_ms"] = np.split(d["gaps"], np.cumsum(d["itl_count"])[:-1]) if len(
            d["itl_count"]) else []
    return cols, d["gaps"]


def frame_of(cols: dict[str, Any]) -> pd.DataFrame:
    """The frame of ``frame_columns``: ``*_ns`` columns nullable ``Int64``, the flags bool."""
    import pandas as pd

    df = pd.DataFrame(cols, columns=list(COLUMNS))
    for col in NS_COLUMNS:
        df[col] = df[col].astype("Int64")
    for col in FLAGS:
        df[col] = df[col].astype(bool)
    return df


#: the raw columns a frame holds as bool
FLAGS: tuple[str, ...] = ("warmup", "cached_tokens_reported")


def _frame(raw: dict[str, Any]) -> pd.DataFrame:
    """The frame of ``raw`` (a list per raw field)."""
    return frame_of(frame_columns(raw)[0])


def run_rows(data: Data, *, warmup: bool = False) -> pd.DataFrame:
    """The frame with warmup records dropped unless ``warmup`` (they are not the run)."""
    df = to_frame(data)
    return df if warmup else df[~df["warmup"]]


def ok_rows(data: Data) -> pd.DataFrame:
    """The rows the latency metrics are over: the run's (no warmup) that ended ``ok``."""
    df = run_rows(data)
    return df[df["status"] == "ok"]
