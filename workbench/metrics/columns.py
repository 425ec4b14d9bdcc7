"""Column arrays of a run's records: what every run-level aggregate is computed over.

A ``Columns`` reads numpy arrays on demand from a ``to_frame`` DataFrame
(``Columns.of(df)``) or a stored ``records.parquet`` (``stored(run_dir)``, one column at
a time), so both paths give the same numbers (docs/metrics.md). ``convert`` /
``parquet_path`` derive the per-request columns for ``workbench.storage.columnar``.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench import safe_write as safe
from workbench.metrics.derive import FLOAT_COLUMNS, INT_COLUMNS, TokenRows, derive, int_rows
from workbench.metrics.frame import FLAGS, NS_COLUMNS, FrameStream, as_records, frame_of, is_frame
from workbench.records import RequestRecord
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
        return _flat_table(cols, times, counts, token_times, apart)
    except Exception:  # anything odd: the exact reading decides (and raises what it raised)
        return None


def _flat_table(cols: dict[str, Any], times: TokenRows, counts: TokenRows, token_times: bool,
                counts_flat: bool = True) -> Any:
    """``batch_table`` of rows whose token times (and counts, ``counts_flat``; else as
    lists in ``cols``) are flat ``TokenRows``, the other values as a line's parse gives them."""
    d = derive(cols, times, counts)
    sch = columnar.schema(DERIVED_TYPES, token_times)
    if token_times:  # the list columns over their flat values (counts left as lists
        pa = columnar.require()  # convert as they did: a bool among them raises)
        lists = (("token_times_ns", times), ("token_counts", counts))
        for name, flat in lists if counts_flat else lists[:1]:
            column = arrays.from_numpy(flat.values, pa.int64())
            cols[name] = arrays.list_array(flat.lens, column)
    return columnar.table(cols, d, sch, gaps=d["gaps"])


#: the Python types a stored field may hold for ``RecordTables`` to take its value as a
#: line's parse gives it (anything else: the file is read)
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    **dict.fromkeys(columnar.INT_FIELDS, frozenset((int, type(None)))),
    **dict.fromkeys(columnar.STR_FIELDS, frozenset((str, type(None)))),
    **dict.fromkeys(columnar.BOOL_FIELDS, frozenset((bool, type(None)))),
}
#: values of ``extra``'s worker fields whose JSON reads back as the same int, or as a value
#: ``raw_columns`` nulls the same way (a numpy or other int-like would read as an int)
_EXTRA_TYPES = frozenset((int, type(None), bool, float, str, list, dict, tuple))
_TAKE_RECORD = operator.attrgetter(*columnar.STORED)
_W0, _W1, _W2 = columnar.EXTRA_INT_FIELDS


class RecordTables:
    """``records.parquet`` (``out``) written while the run writes ``records.jsonl`` (``add``:
    each record with the line written for it), so ``convert`` need not read the file back
    (docs/virtual-time.md, "The run's own records are not read back"). The values are the
    record's own, which a line that is orjson's serialisation of it
    (``RecordWriter.write_line``) reads back as, checked a batch at a time (plain ints,
    strings, flags); its token times and counts are cut from the line as
    ``columnar.cut_times`` cuts them; batches end where ``convert``'s reading ends them
    (``batch_rows`` lines or ``batch_bytes`` of JSON) and each is written as a row group
    when cut, into ``out``'s temporary, so the file is ``convert``'s and memory holds one
    batch. Whatever it cannot mirror so (another line, another type, a failed conversion
    or write) turns it off, the temporary removed: ``finish`` says so (False) and
    ``convert`` reads the file."""

    def __init__(self, out: Path, *, batch_rows: int = columnar.BATCH_ROWS,
                 batch_bytes: int = columnar.BATCH_BYTES) -> None:
        self.out, self.batch_rows, self.batch_bytes = Path(out), batch_rows, batch_bytes
        self.on = True
        self.written = 0  # rows in the row groups written
        self._parquet: tuple[Any, Any] | None = None  # (file, ParquetWriter) once opened
        self._rows: list[tuple[Any, ...]] = []
        self._workers: list[tuple[Any, ...]] = []
        self._times: list[bytes] = []
        self._counts: list[bytes] = []
        self._size = 0

    def add(self, rec: RequestRecord, line: bytes | None) -> None:
        if not self.on:
            return
        if line is None or type(rec) is not RequestRecord or type(rec.extra) is not dict:
            self.off()
            return
        get = rec.extra.get
        times = columnar.cut_ints(line, columnar.TIMES_KEY)
        counts = columnar.cut_ints(line, columnar.COUNTS_KEY)
        workers = (get(_W0), get(_W1), get(_W2))  # (columnar.EXTRA_INT_FIELDS)
        if times is None or counts is None or not _EXTRA_TYPES.issuperset(map(type, workers)):
            self.off()
            return
        self._rows.append(_TAKE_RECORD(rec))
        self._workers.append(workers)
        self._times.append(times[2])
        self._counts.append(counts[2])
        self._size += len(line)
        if len(self._rows) >= self.batch_rows or self._size >= self.batch_bytes:
            self._cut()

    def off(self) -> None:
        """Stop: nothing more is taken, the temporary is removed."""
        self.on = False
        self._rows, self._workers, self._times, self._counts = [], [], [], []
        if self._parquet is not None:
            fh, writer = self._parquet
            self._parquet = None
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(OSError):
                fh.close()
            with contextlib.suppress(OSError):
                os.unlink(safe.temp_of(self.out))

    def _cut(self) -> None:
        """The batch so far as one row group (``_flat_table``), or off."""
        rows, workers = self._rows, self._workers
        self._rows, self._workers, self._size = [], [], 0
        times, counts = _flat_bytes(self._times), _flat_bytes(self._counts)
        self._times, self._counts = [], []
        try:
            cols = dict(zip(columnar.STORED, map(list, zip(*rows, strict=True)), strict=True))
            rows.clear()
            if any(not _PLAIN_TYPES[k].issuperset(map(type, v)) for k, v in cols.items()):
                raise TypeError("a stored value that is not a plain int, string or flag")
            for name, values in zip(columnar.EXTRA_INT_FIELDS, zip(*workers, strict=True),
                                    strict=True):
                cols[name] = [v if columnar.sound_int(v) else None for v in values]
            table = _flat_table(cols, times, counts, token_times=False)
            self._open()[1].write_table(table)
        except Exception:  # anything odd (or a failed write): the file is read (and decides)
            self.off()
            return
        self.written += table.num_rows

    def _open(self) -> tuple[Any, Any]:
        """The temporary and its Parquet writer, as ``columnar.write_tables`` opens them."""
        if self._parquet is None:
            columnar.require()
            import pyarrow.parquet as pq

            # NAME.tmp created exclusively, never through a link (safe_write.py)
            fh = os.fdopen(safe.open_fd(safe.temp_of(self.out)), "wb")
            try:
                writer = pq.ParquetWriter(fh, columnar.schema(DERIVED_TYPES), compression="zstd")
            except BaseException:
                fh.close()
                raise
            self._parquet = (fh, writer)
        return self._parquet

    def finish(self) -> bool:
        """The last batch written and the file renamed into place: True, or False when
        off (nothing in place: ``convert`` reads the JSONL)."""
        if self.on and self._rows:
            self._cut()
        if not self.on:
            return False
        try:
            fh, writer = self._open()  # (no record: the schema alone, as convert writes it)
            writer.close()
            fh.close()
            safe.commit(safe.temp_of(self.out), self.out)
        except Exception:
            self.off()
            return False
        self._parquet = None
        self.on = False
        log.info("%s: %d records → %s", self.out.parent, self.written, self.out.name)
        return True


def _flat_bytes(rows: list[bytes]) -> TokenRows:
    """``TokenRows`` of rows of native int64 bytes (``cut_ints``' values), joined once
    (no array a row: ~2x faster on a batch of 6,000 Mooncake-like rows; the list is emptied)."""
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)) // 8
    values = np.frombuffer(bytearray().join(rows), dtype=np.int64)  # writable, as before
    rows.clear()
    return TokenRows(values, lens)


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
    "itl_min_ms": lambda g: min(g) if len(g) else None,  # g: a list, or an array view
    "itl_max_ms": lambda g: max(g) if len(g) else None,
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

    def texts(self, name: str) -> list[Any]:
        if name not in self.df.columns:
            return [None] * self.n
        return [None if v is None or v != v else v for v in self.df[name].tolist()]

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

    def texts(self, name: str) -> list[Any]:
        return self._strings(name).to_pylist() if name in self.names else [None] * self.n

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

    def texts(self, name: str) -> list[Any]:
        col = self._texts(name)
        return col if col is not None else self._frame().texts(name)

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
        """``data`` itself when it is a ``Columns``; a DataFrame's columns; else the columns
        of ``to_frame(data)``'s records read as that frame's without making it
        (``streamed``: pandas is not imported for what a summary reads; docs/virtual-time.md,
        "Start-up")."""
        if isinstance(data, Columns):
            return data
        if is_frame(data):
            return cls(_FrameSource(data))
        stream = FrameStream()
        for r in as_records(data):
            stream.add(r)
        return cls.streamed(stream)

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

    def texts(self, name: str) -> list[Any]:
        """A text column's values (None where absent) of the selected rows."""
        values = self._get(("texts", name), lambda: self._src.texts(name))
        return values if self._rows is None else [values[i] for i in self._rows]

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
