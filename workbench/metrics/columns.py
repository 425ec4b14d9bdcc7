"""Column arrays of a run's records: what every run-level aggregate is computed over.

A ``Columns`` reads numpy arrays on demand from a ``to_frame`` DataFrame
(``Columns.of(df)``) or a stored ``records.parquet`` (``stored(run_dir)``, one column at
a time), so both paths give the same numbers (docs/metrics.md). ``convert`` /
``parquet_path`` derive the per-request columns for ``workbench.storage.columnar``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.metrics.derive import FLOAT_COLUMNS, INT_COLUMNS, TokenRows, derive, int_rows
from workbench.metrics.frame import FLAGS, NS_COLUMNS, FrameStream, frame_of, to_frame
from workbench.storage import arrays, columnar
from workbench.storage.rundir import RECORDS, resolve_run_dir

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: the derived columns of ``records.parquet`` with their Arrow types, in file order
DERIVED_TYPES: dict[str, str] = {
    **dict.fromkeys(INT_COLUMNS, "int64"),
    **dict.fromkeys(FLOAT_COLUMNS, "float64"),
}


def available() -> bool:
    """True when pyarrow is importable (``pip install 'workbench[large]'``)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- writing records.parquet
def batch_table(rows: list[Mapping[str, Any]], *, token_times: bool = False) -> Any:
    """One Arrow table of ``records.parquet``'s schema from record dicts; a batch with a value
    no int64 can take is converted again with it nulled (``columnar.sanitized``)."""
    pa = columnar.require()
    try:
        return _batch_table(rows, token_times)
    except (*columnar.BAD_VALUE_ERRORS, pa.ArrowException):
        return _batch_table(columnar.sanitized(rows), token_times)


def _batch_table(rows: list[Mapping[str, Any]], token_times: bool) -> Any:
    cols = columnar.raw_columns(rows)
    d = derive(cols, cols["token_times_ns"], cols["token_counts"])
    return columnar.table(cols, d, columnar.schema(DERIVED_TYPES, token_times), gaps=d["gaps"])


def _plain_table(rows: list[tuple[Any, columnar.Times | None]], token_times: bool) -> Any:
    """``batch_table`` of ``iter_raw_batches``' rows (parsed by orjson alone, their token
    times apart), or None when they hold a value it must read exactly: token times not
    cut out (absent, or not canonical JSON ints: ``columnar.cut_times``), a float in a
    stored field or in the token counts (an integer out of range reads as one), a value
    that will not convert, a row that is not a record's. Otherwise the values are what
    ``loads_line`` reads (they differ only where orjson made a float), so the table is
    ``batch_table``'s; the token lists go in flat (``TokenRows``)."""
    try:
        cuts = [t for _, t in rows]
        if any(t is None for t in cuts):
            return None
        objs = [obj for obj, _ in rows]
        rows.clear()
        times = _flat([t.values for t in cuts])  # type: ignore[union-attr]  # no None: checked
        cut_counts = [t.counts for t in cuts]  # type: ignore[union-attr]
        cuts.clear()
        cols = columnar.raw_columns(objs)
        objs.clear()  # their values are in ``cols``
        apart = all(c is not None for c in cut_counts)  # every row's counts read apart
        if apart:
            counts: TokenRows | None = _flat(cut_counts)  # type: ignore[arg-type]
        else:  # some as lists: all as lists, as they read
            for i, c in enumerate(cut_counts):
                if c is not None:
                    cols["token_counts"][i] = c.tolist()
            counts = int_rows(cols["token_counts"])
        cut_counts.clear()
        if counts is None or columnar.has_float(cols):
            return None
        d = derive(cols, times, counts)
        sch = columnar.schema(DERIVED_TYPES, token_times)
        if token_times:  # the list columns over their flat values (counts left as lists
            pa = columnar.require()  # convert as they did: a bool among them raises)
            lists = (("token_times_ns", times), ("token_counts", counts))
            for name, flat in lists if apart else lists[:1]:
                column = arrays.from_numpy(flat.values, pa.int64())
                cols[name] = arrays.list_array(flat.lens, column)
        return columnar.table(cols, d, sch, gaps=d["gaps"])
    except Exception:  # anything odd: the exact reading decides (and raises what it raised)
        return None


def _flat(rows: list[np.ndarray]) -> TokenRows:
    """int64 rows as one flat array and their lengths (the list is emptied)."""
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    values = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    rows.clear()
    return TokenRows(values, lens)


def convert(
    run_dir: str | Path,
    *,
    token_times: bool = False,
    batch_rows: int = columnar.BATCH_ROWS,
    batch_bytes: int = columnar.BATCH_BYTES,
    out: str | Path | None = None,
) -> Path:
    """``run_dir/records.jsonl`` → ``run_dir/records.parquet`` in streaming batches (of
    ``batch_rows`` records or ``batch_bytes`` of JSON, whichever is reached first)."""
    d = resolve_run_dir(run_dir)
    target = Path(out) if out is not None else d / columnar.PARQUET
    batches = columnar.iter_raw_batches(d / RECORDS, batch_rows, batch_bytes)
    tables = (_table_of(rows, lines, token_times, d / RECORDS) for rows, lines in batches)
    n = columnar.write_tables(tables, target, columnar.schema(DERIVED_TYPES, token_times))
    log.info("%s: %d records → %s", d, n, target.name)
    return target


def _table_of(rows: list[Any], lines: columnar.Lines, token_times: bool, path: Path) -> Any:
    """A batch's table: from its rows as orjson read them, else from its lines read
    exactly (``loads_line``, the rows dropped first). Both lists are emptied: the caller's
    names for them live on while the next batch is read, one batch in memory, not two."""
    table = _plain_table(rows, token_times)
    rows.clear()
    if table is None:
        table = batch_table(lines.exact(path), token_times=token_times)
    lines.clear()
    lines.numbers.clear()
    return table


def parquet_path(run_dir: str | Path, *, token_times: bool | None = None) -> Path:
    """The run's ``records.parquet``, (re)built first when missing or older than the JSONL
    (or, with ``token_times``, written without the token lists)."""
    path, old = columnar.stale(run_dir, token_times=token_times)
    if old:
        convert(path.parent, token_times=bool(token_times))
    return path


# ---------------------------------------------------------------- reading: Columns
#: ``records.parquet``'s per-request ITL statistics, reduced from a frame's ``itl_ms`` lists
_FROM_GAPS: dict[str, Any] = {
    "itl_count": len,
    "itl_sum_ms": lambda g: float(sum(g)),
    "itl_min_ms": lambda g: min(g) if g else None,
    "itl_max_ms": lambda g: max(g) if g else None,
}


class _FrameSource:
    """Columns of a ``to_frame`` DataFrame."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self.n = len(df)

    def has(self, name: str) -> bool:
        extra = name in columnar.EXTRA_INT_FIELDS and "extra" in self.df.columns
        gaps = name in _FROM_GAPS and "itl_ms" in self.df.columns
        return name in self.df.columns or extra or gaps

    def load(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        import pandas as pd

        if name in _FROM_GAPS and name not in self.df.columns:
            reduce = _FROM_GAPS[name]
            col = pd.Series([reduce(g) for g in self.df["itl_ms"]], dtype=object)
        elif name in columnar.EXTRA_INT_FIELDS and name not in self.df.columns:
            col = pd.Series([e.get(name) if isinstance(e, dict) else None
                             for e in self.df["extra"]], dtype=object)  # fmt: skip
        else:
            col = self.df[name]
        valid = col.notna().to_numpy(dtype=bool)
        if col.dtype == object:
            values = np.where(valid, col.to_numpy(), 0)
            kind = {type(v) for v in values[valid]}
            if kind <= {bool, np.bool_}:
                values = values.astype(bool)
            elif kind <= {int, bool, np.int64, np.bool_}:
                values = values.astype(np.int64)
            elif kind <= {int, float, np.int64, np.float64}:
                values = values.astype(float)
            return values, valid
        if isinstance(col.dtype, pd.api.extensions.ExtensionDtype):
            return col.to_numpy(dtype=np.int64, na_value=0), valid
        return col.to_numpy(), valid

    def equals(self, name: str, value: str) -> np.ndarray:
        return (self.df[name] == value).to_numpy(dtype=bool)

    def rank(self, name: str) -> np.ndarray:
        return np.unique(self.df[name].astype(str).to_numpy(), return_inverse=True)[1]

    def gaps(self, rows: np.ndarray | None) -> np.ndarray:
        lists = self.df["itl_ms"] if rows is None else self.df["itl_ms"].iloc[rows]
        if not len(lists):
            return np.empty(0)
        return np.concatenate([np.asarray(g, dtype=float) for g in lists])  # views: no copy


class _ParquetSource:
    """Columns of a ``records.parquet`` file, one column read at a time."""

    def __init__(self, path: Path):
        columnar.require()
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(path)
        self.names = set(self.file.schema_arrow.names)
        self.n = self.file.metadata.num_rows
        self._text: dict[str, Any] = {}  # string columns stay Arrow arrays, read once

    def _read(self, name: str) -> Any:
        return self.file.read(columns=[name]).column(name).combine_chunks()

    def _strings(self, name: str) -> Any:
        if name not in self._text:
            self._text[name] = self._read(name)
        return self._text[name]

    def has(self, name: str) -> bool:
        return name in self.names

    def load(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self.names:  # a file from before the column existed: all absent
            return np.zeros(self.n, dtype=np.int64), np.zeros(self.n, dtype=bool)
        arr = self._read(name)
        if str(arr.type) in arrays.READABLE:  # from its buffers: pandas not imported
            return arrays.filled(arr)
        import pyarrow as pa  # another type (a file of another writer): the compute way
        import pyarrow.compute as pc

        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_floating(arr.type):
            return arr.to_numpy(zero_copy_only=False), valid
        fill: Any = False if pa.types.is_boolean(arr.type) else 0
        return pc.fill_null(arr, fill).to_numpy(zero_copy_only=False), valid

    def equals(self, name: str, value: str) -> np.ndarray:
        arr = self._strings(name)
        if str(arr.type) == "string":  # compared in its buffers: pandas not imported
            return arrays.equal_text(arr, value)
        import pyarrow.compute as pc

        return pc.fill_null(pc.equal(arr, value), False).to_numpy(zero_copy_only=False)

    def rank(self, name: str) -> np.ndarray:
        arr = self._strings(name)
        if str(arr.type) == "string":
            return arrays.dense_rank(arrays.texts(arr))
        import pyarrow.compute as pc

        ranks = pc.rank(arr, sort_keys="ascending", tiebreaker="dense")
        return ranks.to_numpy().astype(np.int64)

    def gaps(self, rows: np.ndarray | None) -> np.ndarray:
        arr = self._read("itl_ms")  # not kept: only the pooled gaps of ``rows`` are
        offsets = arrays.filled(arr.offsets)[0]
        values = arrays.filled(arr.values)[0][offsets[0] : offsets[-1]]
        if rows is None:
            return values.copy()  # Arrow's buffer is read-only; the caller may reorder it
        sel = np.zeros(len(offsets) - 1, dtype=bool)
        sel[rows] = True
        return values[np.repeat(sel, np.diff(offsets))]  # one new array, in row order


_NONE = type(None)
_INTS = frozenset({int, _NONE})
_NUMBERS = frozenset({int, float, _NONE})
_TEXTS = frozenset({str, _NONE})


def _in_int64(values: list[Any]) -> bool:
    """Whether the ints among ``values`` all fit int64 (pandas infers another dtype else)."""
    try:
        np.array([v for v in values if type(v) is int], dtype=np.int64)
    except OverflowError:
        return False
    return True


def _floats(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """ints, floats and None as float64 (None: NaN), as pandas infers such a column."""
    out = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return out, ~np.isnan(out)


def _objects(values: list[Any], kinds: frozenset[type]) -> tuple[np.ndarray, np.ndarray]:
    """``_FrameSource.load`` of an object column of ints or text (and None): absent as 0,
    then cast by the kinds present (none: bool; ints: int64; text: left as objects)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    out = np.where(valid, arr, 0)
    if not kinds - {_NONE}:
        return out.astype(bool), valid
    return (out.astype(np.int64) if kinds <= _INTS else out), valid


class _StreamSource:
    """Columns of ``frame_columns`` (a streamed run's: ``Columns.streamed``) as
    ``_FrameSource`` reads the frame pandas makes of them, without pandas: a column of
    one plain kind (a derived array; ints, floats, bools or text, with None) is read as
    pandas infers it (ints with None: float64; text: objects), any other (``extra``'s
    dicts, a value out of int64, a name the frame reduces from its gaps) from that frame,
    made the first time one is asked for (docs/virtual-time.md, "The digest streamed")."""

    def __init__(self, cols: dict[str, Any], gaps: np.ndarray):
        self.cols = cols
        self._gaps = gaps
        self.n = len(cols["request_id"])
        self._df: _FrameSource | None = None

    def _frame(self) -> _FrameSource:
        if self._df is None:
            self._df = _FrameSource(frame_of(self.cols))
        return self._df

    def has(self, name: str) -> bool:
        return name in self.cols or name in columnar.EXTRA_INT_FIELDS or name in _FROM_GAPS

    def load(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        got = self._plain(name)
        return got if got is not None else self._frame().load(name)

    def _plain(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        if name not in self.cols:
            if name not in columnar.EXTRA_INT_FIELDS:
                return None  # reduced from the gaps: the frame's way
            values = [e.get(name) if isinstance(e, dict) else None for e in self.cols["extra"]]
            kinds = frozenset(map(type, values))
            return _objects(values, kinds) if kinds <= _INTS and _in_int64(values) else None
        col = self.cols[name]
        if isinstance(col, np.ndarray):  # a derived column: its dtype kept
            if col.dtype.kind not in "ifb":
                return None
            return col, ~np.isnan(col) if col.dtype.kind == "f" else np.ones(len(col), bool)
        kinds = frozenset(map(type, col))
        if not col or (kinds <= _NUMBERS and not _in_int64(col)):
            return None
        if name in NS_COLUMNS:  # nullable Int64 (ints and None through float64 first)
            if not kinds <= _INTS:
                return None
            if _NONE not in kinds:
                return np.array(col, dtype=np.int64), np.ones(len(col), dtype=bool)
            exact, valid = _floats(col)
            return np.where(valid, exact, 0).astype(np.int64), valid
        if name in FLAGS:
            return (np.array(col, dtype=bool), np.ones(len(col), bool)) if kinds == {bool} \
                else None
        if kinds == {int}:
            return np.array(col, dtype=np.int64), np.ones(len(col), dtype=bool)
        if kinds == {bool}:
            return np.array(col, dtype=bool), np.ones(len(col), dtype=bool)
        if kinds <= _NUMBERS and kinds - {_NONE}:
            return _floats(col)
        if kinds == {_NONE}:
            return _objects(col, kinds)
        return None  # text (pandas' own string dtype, by its version), dicts, lists

    def _texts(self, name: str) -> list[Any] | None:
        col = self.cols.get(name)
        return col if isinstance(col, list) and frozenset(map(type, col)) <= _TEXTS else None

    def equals(self, name: str, value: str) -> np.ndarray:
        col = self._texts(name)
        if col is None:
            return self._frame().equals(name, value)
        return np.fromiter((v == value for v in col), dtype=bool, count=len(col))

    def rank(self, name: str) -> np.ndarray:
        col = self._texts(name)
        if col is None or None in col:  # None: its string by pandas' version
            return self._frame().rank(name)
        arr = np.empty(len(col), dtype=object)
        arr[:] = col
        return np.unique(arr, return_inverse=True)[1]

    def gaps(self, rows: np.ndarray | None) -> np.ndarray:
        lists = self.cols["itl_ms"]
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        if lens.sum() != len(self._gaps) or self._gaps.dtype != np.float64:
            return self._frame().gaps(rows)
        if rows is None:
            return self._gaps.copy()  # the rows' views joined: the one array, copied
        if len(rows) and not (np.diff(rows) > 0).all():  # not in row order: row by row
            return self._frame().gaps(rows)
        sel = np.zeros(len(lens), dtype=bool)
        sel[rows] = True
        return self._gaps[np.repeat(sel, lens)]


_Source = _FrameSource | _ParquetSource | _StreamSource


class Columns:
    """The rows of a run (or a selection: ``where``) as numpy arrays, loaded on first use:
    ``ints`` (values, validity), ``floats`` (NaN where absent), ``bools`` (absent: False);
    ``equals`` and ``rank`` for string columns; ``gaps`` pools the inter-token gaps."""

    def __init__(self, source: _Source, rows: np.ndarray | None = None,
                 cache: dict[Any, Any] | None = None):  # fmt: skip
        self._src = source
        self._rows = rows
        self._cache: dict[Any, Any] = {} if cache is None else cache

    @classmethod
    def of(cls, data: Any) -> Columns:
        """``data`` itself when it is a ``Columns``, else the columns of ``to_frame(data)``."""
        if isinstance(data, Columns):
            return data
        return cls(_FrameSource(to_frame(data)))

    @classmethod
    def streamed(cls, stream: FrameStream) -> Columns:
        """The columns of a ``FrameStream``'s records (its buffers handed over), the
        frame's numbers without the frame (``_StreamSource``)."""
        return cls(_StreamSource(*stream.columns()))

    def __len__(self) -> int:
        return self._src.n if self._rows is None else len(self._rows)

    def has(self, name: str) -> bool:
        return self._src.has(name)

    def _get(self, key: Any, make: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _pick(self, arr: np.ndarray) -> np.ndarray:
        return arr if self._rows is None else arr[self._rows]

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        values, valid = self._get(("raw", name), lambda: self._src.load(name))
        if values.dtype.kind == "f":
            values = np.where(valid, values, 0).astype(np.int64)
        return self._pick(values.astype(np.int64, copy=False)), self._pick(valid)

    def floats(self, name: str) -> np.ndarray:
        values, valid = self._get(("raw", name), lambda: self._src.load(name))
        out = values.astype(float)
        out[~valid] = np.nan
        return self._pick(out)

    def bools(self, name: str) -> np.ndarray:
        values, valid = self._get(("raw", name), lambda: self._src.load(name))
        return self._pick(values.astype(bool) & valid)

    def equals(self, name: str, value: str) -> np.ndarray:
        return self._pick(self._get(("eq", name, value), lambda: self._src.equals(name, value)))

    def rank(self, name: str) -> np.ndarray:
        return self._pick(self._get(("rank", name), lambda: self._src.rank(name)))

    def where(self, mask: np.ndarray) -> Columns:
        if mask.all():  # e.g. no warm-up rows: the same rows, nothing to pick
            return Columns(self._src, self._rows, self._cache)
        picked = np.flatnonzero(mask)
        rows = picked if self._rows is None else self._rows[picked]
        return Columns(self._src, rows, self._cache)

    def gaps(self) -> np.ndarray | None:
        """Every inter-token gap of the selected rows, row after row (a fresh array the
        caller may reorder), or None when the source did not keep them."""
        return self._src.gaps(self._rows) if self._src.has("itl_ms") else None


def stored(run_dir: str | Path, *, token_times: bool | None = None) -> Columns:
    """The columns of a stored run's ``records.parquet`` (built first when stale)."""
    return Columns(_ParquetSource(parquet_path(run_dir, token_times=token_times)))
