"""``records.parquet``, the run's records flattened beside ``records.jsonl`` (the source of
truth; docs/run-directory.md): schema, JSONL parsed in batches (memory: one batch), bad
values coerced, row groups written atomically, staleness. The derived columns come from
``workbench.metrics.columns.convert``; token lists and ``itl_ms`` only with ``token_times``.
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from workbench import safe_write as safe
from workbench.errors import ConfigError
from workbench.kernels import native as _kernels
from workbench.storage import arrays
from workbench.storage.rundir import RECORDS, iter_jsonl, loads_line, resolve_run_dir

log = logging.getLogger(__name__)

PARQUET = "records.parquet"
BATCH_ROWS = 8_192
# ...or fewer: a batch is cut at this many bytes of JSON, so large rows (a streamed request's
# token times: ~7 KB of JSON on the Mooncake trace) keep a row group's memory bounded
BATCH_BYTES = 8 << 20

INSTALL_HINT = "pip install 'workbench[large]'  (pyarrow)"

INT_FIELDS: tuple[str, ...] = (
    "unit_ordinal", "round_idx", "planned_prefix_tokens", "planned_input_tokens",
    "planned_output_tokens", "folded_prefix_tokens", "derived_prefix",
    "prefix_shortfall_tokens", "sent_prompt_tokens", "scheduled_ns", "released_ns",
    "admitted_ns", "dispatch_ns", "first_token_ns", "last_token_ns", "end_ns", "http_status",
    "prompt_tokens", "completion_tokens", "cached_tokens", "echoed_prompt_tokens",
    "routing_slot", "schema",
)  # fmt: skip
STR_FIELDS: tuple[str, ...] = (
    "run_id", "request_id", "session_id", "backend", "policy", "finish_reason",
    "server_request_id", "status", "error",
)  # fmt: skip
BOOL_FIELDS: tuple[str, ...] = ("cached_tokens_reported", "warmup")
DEFAULTS: dict[str, Any] = {
    "folded_prefix_tokens": 0, "derived_prefix": 0, "prefix_shortfall_tokens": 0,
    "sent_prompt_tokens": 0, "echoed_prompt_tokens": 0, "schema": 1, "status": "ok",
    "cached_tokens_reported": False, "warmup": False,
}  # fmt: skip
#: worker fields a simulated cluster puts in ``extra`` (docs/cluster.md), kept as int64 columns
#: (``dp_rank``: the attention-DP rank in the worker)
EXTRA_INT_FIELDS: tuple[str, ...] = ("worker", "worker_waiting", "dp_rank")
TOKEN_LISTS: tuple[str, ...] = ("token_times_ns", "token_counts")


def require() -> Any:
    """``pyarrow`` (and ``pyarrow.parquet``), or a ConfigError that says how to install it."""
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"large-run analysis needs pyarrow: {INSTALL_HINT}") from None
    return pa


def schema(derived: Mapping[str, str], token_times: bool = False) -> Any:
    """The Arrow schema of ``records.parquet``: the record's fields, then ``derived``
    (column name → ``"int64"`` or ``"float64"``, in order), then the token lists."""
    pa = require()
    fields = [pa.field(n, pa.string()) for n in STR_FIELDS[:4]]
    fields += [pa.field(n, pa.int64()) for n in INT_FIELDS]
    fields += [pa.field(n, pa.string()) for n in STR_FIELDS[4:]]
    fields += [pa.field(n, pa.bool_()) for n in BOOL_FIELDS]
    fields += [pa.field(n, pa.int64()) for n in EXTRA_INT_FIELDS]
    fields += [pa.field(n, getattr(pa, t)()) for n, t in derived.items()]
    if token_times:
        fields += [pa.field(n, pa.list_(pa.int64())) for n in TOKEN_LISTS]
        fields.append(pa.field("itl_ms", pa.list_(pa.float64())))
    return pa.schema(fields)


def raw_columns(rows: list[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """One list per stored field of the record dicts (defaults for absent fields), the
    worker fields taken from ``extra``, and the token lists (``[]`` when absent)."""
    cols = _stored_fields(rows)
    extras: list[Mapping[str, Any]] = [
        e if isinstance(e := r.get("extra"), Mapping) else {} for r in rows
    ]
    for name in EXTRA_INT_FIELDS:
        cols[name] = [e.get(name) if sound_int(e.get(name)) else None for e in extras]
    for name in TOKEN_LISTS:
        cols[name] = [r.get(name) or [] for r in rows]
    return cols


#: the record fields stored as they are, in ``raw_columns``' order
STORED: tuple[str, ...] = (*STR_FIELDS, *INT_FIELDS, *BOOL_FIELDS)
_TAKE_STORED = operator.itemgetter(*STORED)


def _stored_fields(rows: list[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """One list per stored field: every row's values taken at once and transposed in C
    when each row has them all (a record line does), else a default for each absent one."""
    try:
        if rows:
            values = zip(*map(_TAKE_STORED, rows), strict=True)  # a tuple per field
            return dict(zip(STORED, map(list, values), strict=True))
    except (KeyError, TypeError):  # a field absent (or a row that is not a mapping)
        pass
    return {name: [r.get(name, DEFAULTS.get(name)) for r in rows] for name in STORED}


INT64_MAX = 2**63 - 1


def sound_int(v: Any) -> bool:
    return v is None or (type(v) is int and -INT64_MAX <= v <= INT64_MAX)


def sanitized(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows whose integer fields are all ints in int64 range, others nulled with a warning
    (a file of an older version or another tool: this one fails such a request)."""
    out: list[Mapping[str, Any]] = []
    for i, r in enumerate(rows):
        bad = [k for k in INT_FIELDS if not sound_int(r.get(k))]
        bad += [k for k in ("token_times_ns", "token_counts")
                if not all(sound_int(x) and x is not None for x in r.get(k) or ())]
        texts = [k for k in STR_FIELDS if not isinstance(r.get(k), str | None)]
        flags = [k for k in BOOL_FIELDS if not isinstance(r.get(k), bool | None)]
        if not (bad or texts or flags):
            out.append(r)
            continue
        log.warning("record %s (batch row %d): %s of the wrong type or range; stored as "
                    "null (text: as its string)", r.get("request_id"), i,
                    ", ".join([*bad, *texts, *flags]))
        fixed = dict(r)
        fixed.update({k: str(r[k]) for k in texts})
        fixed.update({k: None for k in flags})
        for k in bad:
            fixed[k] = [] if k in ("token_times_ns", "token_counts") else None
        out.append(fixed)
    return out


def _none(values: Any) -> None:
    return None


#: the Arrow arrays of a stored field's plain values without ``pa.array`` (storage.arrays)
_PLAIN: dict[str, Callable[[list[Any]], Any]] = {
    "int64": arrays.int64, "string": arrays.strings, "bool": arrays.bools,
}  # fmt: skip

#: what a batch that holds a value no int64 can take raises while being converted
BAD_VALUE_ERRORS: tuple[type[Exception], ...] = (OverflowError, TypeError, ValueError)


def table(
    cols: Mapping[str, list[Any]],
    derived: Mapping[str, np.ndarray],
    sch: Any,
    *,
    gaps: np.ndarray | None = None,
) -> Any:
    """One Arrow table of schema ``sch`` from ``raw_columns`` and the derived arrays;
    ``gaps`` (every row's inter-token gaps, row after row, ``derived["itl_count"]``
    per row) fill the ``itl_ms`` list column when the schema has one."""
    pa = require()
    out = []  # made from buffers where they can be (storage.arrays: pandas not imported)
    for f in sch:
        if f.name == "itl_ms":  # the gaps are already grouped by row, in order
            flat = arrays.from_numpy(np.asarray(gaps, dtype=np.float64), pa.float64())
            out.append(arrays.list_array(derived["itl_count"], flat))
        elif f.name in derived:
            arr = arrays.from_numpy(derived[f.name], f.type, nan_is_null=True)
            out.append(arr if arr is not None
                       else pa.array(derived[f.name], type=f.type, from_pandas=True))
        elif isinstance(cols[f.name], pa.Array):  # a list column made over flat values
            out.append(cols[f.name])
        else:
            arr = _PLAIN.get(str(f.type), _none)(cols[f.name])
            out.append(arr if arr is not None else pa.array(cols[f.name], type=f.type))
    return pa.Table.from_arrays(out, schema=sch)


# ------------------------------------------------------------------ files
class Lines(list[bytes]):
    """A batch's lines as read, and the number of its first line's in the file."""

    def __init__(self, lines: Iterable[bytes] = (), numbers: Iterable[int] = ()) -> None:
        super().__init__(lines)
        self.numbers: list[int] = list(numbers)

    def exact(self, path: str | Path) -> list[Any]:
        """The lines read exactly (``loads_line``), a bad one raising as ``iter_jsonl``
        would (its file and line number)."""
        out = []
        for line, n in zip(self, self.numbers, strict=True):
            try:
                out.append(loads_line(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: invalid JSON line ({exc})") from None
        return out


def iter_raw_batches(
    path: str | Path, batch_rows: int = BATCH_ROWS, batch_bytes: int = BATCH_BYTES
) -> Iterator[tuple[list[Any], Lines]]:
    """A JSONL file's lines (``rundir.iter_jsonl``'s rules) in batches of ``batch_rows``
    lines or of about ``batch_bytes`` bytes of JSON, whichever comes first, each with its
    lines (``Lines``), a line parsed by ``orjson``
    alone and its token times apart (``cut_times``: ``(obj, times)`` rows): an integer
    out of [-2**63, 2**64) is a float to orjson (``loads_line`` reads it exactly), so a
    caller that finds a float where it reads re-reads the batch's lines."""
    return _batches(path, batch_rows, batch_bytes, cut_times)


#: a record line's token times member; never inside a JSON string (its quotes would be
#: escaped there), and a key spelled with escapes has a unicode escape
TIMES_KEY = b'"token_times_ns":['


#: a record line's token counts member: cut out of what is left the same way
COUNTS_KEY = b'"token_counts":['


class Times(NamedTuple):
    """A record line's token times as ``cut_times`` found them: the int64 values, and
    where their text is in the line (``line[start:end]``); its token counts the same
    way when they were cut too (else None: in the parsed row), ``line[cstart:cend]``."""

    values: np.ndarray
    start: int
    end: int
    counts: np.ndarray | None = None
    cstart: int = 0
    cend: int = 0


def cut_ints_py(line: bytes, key: bytes = TIMES_KEY) -> tuple[int, int, bytes] | None:
    """``(start, end, values)``: the one array after ``key`` in ``line`` (``key`` ends
    with ``[``; ``line[start:end]`` its text, ``end`` at its ``]``) and its values as
    native int64 bytes, when that text is exactly the JSON orjson writes for them
    (``token_times``' rule), ``key`` is not found again and the line has no unicode
    escape; else None. The reference of ``kernels.c``'s ``cut_ints``, which runs where
    built (one pass in C; tests/storage/test_cut_ints.py holds the two equal)."""
    at = line.find(key)
    if at < 0:
        return None
    start = at + len(key)
    end = line.find(b"]", start)
    if end < 0:
        return None
    text = line[start:end]  # only number characters: neither key nor escape inside it
    if text.translate(None, b"0123456789,-") or b"\\u" in line[:start] \
            or b"\\u" in line[end:] or line.find(key, end) >= 0:
        return None
    flat = token_times([text])
    return None if flat is None else (start, end, flat[0].tobytes())


cut_ints: Callable[[bytes, bytes], tuple[int, int, bytes] | None] = (
    getattr(_kernels, "cut_ints", None) or cut_ints_py
)


def cut_times(
    line: bytes, parse: Callable[[bytes], Any] = orjson.loads
) -> tuple[Any, Times | None]:
    """``(obj, times)``: ``line`` parsed (``parse``) with its one top-level
    ``token_times_ns`` array cut out (``obj`` holds ``[]`` there; most of a streamed
    record's bytes) and that array's values read apart (``cut_ints``), its
    ``token_counts`` too where they are cut the same way from the rest, or
    ``(parse(line), None)`` when the times member is not surely that one (absent, twice,
    in a line with a unicode escape), its text is not exactly the JSON orjson writes for
    its values (a caller reads such a line exactly), or the line without it is not JSON.
    A bad line raises as ``parse`` does."""
    cut = cut_ints(line, TIMES_KEY)
    if cut is None:
        return parse(line), None
    start, end, values = cut
    rest = line[:start] + line[end:]
    counts = cut_ints(rest, COUNTS_KEY)  # None: the counts stay in the row, as read
    if counts is not None:
        cstart, cend, cvalues = counts
        rest = rest[:cstart] + rest[cend:]
    try:
        obj = parse(rest)
    except ValueError:
        obj = None
    if type(obj) is not dict or obj.get("token_times_ns") != [] or (
            counts is not None and obj.get("token_counts") != []):
        return parse(line), None
    times = np.frombuffer(values, dtype=np.int64)
    if counts is None:
        return obj, Times(times, start, end)
    shift = 0 if cstart < start else end - start  # where the counts' text is in the line
    return obj, Times(times, start, end, np.frombuffer(cvalues, dtype=np.int64),
                      cstart + shift, cend + shift)


def token_times(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """The int64 values and per-row counts of ``cut_times``' array texts (the list is
    emptied), or None unless they are exactly the JSON orjson writes for those values
    (digits, a minus, commas: no space, no leading zero, nothing out of int64), which
    ``numpy`` reads in C."""
    lens = np.fromiter((t.count(b",") + 1 if t else 0 for t in texts), dtype=np.int64,
                       count=len(texts))  # fmt: skip
    joined = b",".join(t for t in texts if t)
    texts.clear()  # read into ``joined``: not held beside it (the caller's list, emptied)
    if not joined:
        return np.empty(0, dtype=np.int64), lens
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a text numpy cannot read to its end
        try:
            values = np.fromstring(joined, dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    if len(values) != lens.sum() or not _written_as(values, joined):
        return None  # e.g. a saturated 20-digit value, "01", " 1", "-0": read exactly
    return values, lens


def _written_as(values: np.ndarray, text: bytes) -> bool:
    """Whether orjson writes ``values`` as ``[`` + ``text`` + ``]``."""
    data = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    return len(data) == len(text) + 2 and data[1:-1] == text  # memcmp (a memoryview's == is
    # per item)


def _batches(
    path: str | Path, batch_rows: int, batch_bytes: int, parse: Callable[[bytes], Any]
) -> Iterator[tuple[list[Any], Lines]]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    batch: list[Any] = []
    lines = Lines()
    size = 0
    for obj, line, n in iter_jsonl(path, lines=True, parse=parse):
        batch.append(obj)
        lines.append(line)
        lines.numbers.append(n)
        size += len(line)
        if len(batch) >= batch_rows or size >= batch_bytes:
            yield batch, lines
            batch, lines, size = [], Lines(), 0
    if batch:
        yield batch, lines


def has_float(cols: Mapping[str, list[Any]]) -> bool:
    """Whether a stored field of ``raw_columns`` holds a float (from ``iter_raw_batches``:
    maybe an integer out of range; a real float is read again too, the same either way)."""
    return any(float in set(map(type, cols[name])) for name in STORED)


def write_tables(tables: Iterable[Any], out: str | Path, sch: Any) -> int:
    """Write Arrow tables (one row group each) as one Parquet file, atomically; rows written."""
    require()
    import pyarrow.parquet as pq

    n = 0
    # NAME.tmp created exclusively, never through a link, renamed into place (safe_write.py)
    with safe.open_file(out, "wb", atomic=True) as fh, \
            pq.ParquetWriter(fh, sch, compression="zstd") as writer:
        for t in tables:
            writer.write_table(t)
            n += t.num_rows
    return n


def stale(run_dir: str | Path, *, token_times: bool | None = None) -> tuple[Path, bool]:
    """(the run's ``records.parquet``, whether it must be (re)built first): missing,
    older than the JSONL, or written without the token lists when ``token_times``."""
    d = resolve_run_dir(run_dir)
    pq_file, js = d / PARQUET, d / RECORDS
    old = not pq_file.exists() or (js.exists() and js.stat().st_mtime > pq_file.stat().st_mtime)
    if not old and token_times:
        old = "token_times_ns" not in parquet_columns(pq_file)
    return pq_file, old


def parquet_columns(path: str | Path) -> list[str]:
    require()
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)
