"""Arrow arrays to and from numpy through their buffers (``Array.from_buffers``,
``Array.buffers()``), so that writing ``records.parquet`` and reading its columns never
imports pandas: pyarrow imports it on the first ``pa.array``, ``pa.scalar``,
``to_numpy(zero_copy_only=False)`` or compute call with a Python value (~0.2 s of a
``simulate -o``; docs/virtual-time.md, "The run files without pandas").

The writers take only what they convert exactly as ``pa.array`` would and return None
for anything else (a float in an int column, a bool, a value out of int64, a string
numpy cannot hold...): the caller then converts with ``pa.array``, which decides (and
raises) as before. The readers give what the compute functions gave (nulls filled).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_NONE = type(None)
_INT_KINDS = frozenset({int, _NONE})
_STR_KINDS = frozenset({str, _NONE})
_BOOL_KINDS = frozenset({bool, _NONE})
INT32_MAX = 2**31 - 1


def _pa() -> Any:
    import pyarrow as pa

    return pa


def _valid(values: Sequence[Any], kinds: set[type]) -> np.ndarray:
    """Which of ``values`` (of the types ``kinds``) are not None."""
    if _NONE not in kinds:
        return np.ones(len(values), dtype=bool)
    return np.fromiter((v is not None for v in values), dtype=bool, count=len(values))


def _bitmap(valid: np.ndarray) -> Any:
    """Arrow's validity buffer of a bool mask (None: all valid, as ``pa.array`` leaves it)."""
    return None if valid.all() else _pa().py_buffer(np.packbits(valid, bitorder="little"))


#: the numpy dtype of each Arrow type ``from_numpy`` makes
_DTYPES: dict[str, np.dtype[Any]] = {
    "int64": np.dtype(np.int64), "double": np.dtype(np.float64), "int32": np.dtype(np.int32),
}  # fmt: skip


def from_numpy(values: np.ndarray, arrow_type: Any, *, nan_is_null: bool = False) -> Any:
    """An Arrow array of ``arrow_type`` (``int64``, ``double``, ``int32``) over ``values``
    of that dtype, as ``pa.array(values, type=arrow_type, from_pandas=nan_is_null)`` makes
    it (``nan_is_null``: NaN as null), or None for any other type or dtype."""
    dtype = _DTYPES.get(str(arrow_type))
    if dtype is None or values.ndim != 1 or values.dtype != dtype:
        return None
    data = np.ascontiguousarray(values)
    valid = None
    if nan_is_null and dtype.kind == "f":
        nan = np.isnan(data)
        valid = _bitmap(~nan) if nan.any() else None
    return _pa().Array.from_buffers(arrow_type, len(data), [valid, _pa().py_buffer(data)])


def int64(values: Sequence[Any]) -> Any:
    """``pa.array(values, type=pa.int64())`` for a list of ints (and None) in int64's
    range, else None."""
    kinds = set(map(type, values))
    if not kinds <= _INT_KINDS:
        return None
    valid = _valid(values, kinds)
    plain = values if _NONE not in kinds else [0 if v is None else v for v in values]
    try:
        data = np.array(plain, dtype=np.int64)
    except OverflowError:
        return None
    pa = _pa()
    return pa.Array.from_buffers(pa.int64(), len(data), [_bitmap(valid), pa.py_buffer(data)])


def bools(values: Sequence[Any]) -> Any:
    """``pa.array(values, type=pa.bool_())`` for a list of bools (and None), else None."""
    kinds = set(map(type, values))
    if not kinds <= _BOOL_KINDS:
        return None
    n = len(values)
    valid = _valid(values, kinds)
    truth = np.fromiter((v is True for v in values), dtype=bool, count=n)
    pa = _pa()
    bits = pa.py_buffer(np.packbits(truth, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), n, [_bitmap(valid), bits])


def strings(values: Sequence[Any]) -> Any:
    """``pa.array(values, type=pa.string())`` for a list of str (and None), else None
    (also for text that is not UTF-8-encodable, or over 2 GiB in all)."""
    kinds = set(map(type, values))
    if not kinds <= _STR_KINDS:
        return None
    try:
        encoded = [b"" if v is None else v.encode() for v in values]
    except UnicodeEncodeError:  # a lone surrogate: pa.array's error decides
        return None
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
              out=offsets[1:])  # fmt: skip
    if offsets[-1] > INT32_MAX:
        return None
    valid = _valid(values, kinds)
    pa = _pa()
    return pa.StringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded)),
        _bitmap(valid), len(values) - int(valid.sum()),
    )


def list_array(lens: np.ndarray, flat: Any) -> Any:
    """A list array of rows of ``lens`` values each over ``flat`` (an Arrow array)."""
    pa = _pa()
    offsets = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    return pa.ListArray.from_arrays(from_numpy(offsets, pa.int32()), flat)


# ------------------------------------------------------------------ reading
def validity(arr: Any) -> np.ndarray:
    """Which slots of a (one-chunk) Arrow array hold a value."""
    buf = arr.buffers()[0]
    if buf is None:  # no bitmap: all valid (or, a null-typed array, all absent)
        return np.full(len(arr), arr.null_count == 0, dtype=bool)
    return _bits(buf, arr.offset, len(arr))


def _bits(buf: Any, offset: int, n: int) -> np.ndarray:
    raw = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little", count=offset + n)[offset:].astype(bool)


#: the Arrow type names ``filled`` reads from buffers; another one goes the compute way
READABLE = frozenset({"int64", "int32", "double", "bool", "string"})


def filled(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(values, valid)`` of a one-chunk array of a ``READABLE`` type:
    nulls as 0 / NaN / False / ``""`` (what ``fill_null`` then ``to_numpy`` gave; text as
    an object array)."""
    n = len(arr)
    valid = validity(arr)
    kind = str(arr.type)
    if kind == "string":
        texts = arr.to_pylist()
        out = np.empty(n, dtype=object)
        out[:] = ["" if t is None else t for t in texts]
        return out, valid
    if kind == "bool":
        bits = _bits(arr.buffers()[1], arr.offset, n) if n else np.zeros(0, dtype=bool)
        return bits & valid, valid
    dtype = _DTYPES[kind]
    if n == 0:
        return np.zeros(0, dtype=dtype), valid
    data = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + n]
    return np.where(valid, data, np.nan if dtype.kind == "f" else 0).astype(dtype), valid


def texts(arr: Any) -> np.ndarray:
    """A string array's values as an object array (None where absent)."""
    out = np.empty(len(arr), dtype=object)
    out[:] = arr.to_pylist()
    return out


def equal_text(arr: Any, value: str) -> np.ndarray:
    """``pc.equal(arr, value)`` with nulls False, for a one-chunk ``string`` array: its
    bytes compared in place (no Python string made a row)."""
    want = np.frombuffer(value.encode(), dtype=np.uint8)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[arr.offset : arr.offset + n + 1]
    same = (np.diff(offsets) == len(want)) & validity(arr)
    if len(want) and same.any():
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None \
            else np.zeros(0, dtype=np.uint8)
        rows = np.flatnonzero(same)
        at = offsets[rows].astype(np.int64)[:, None] + np.arange(len(want))
        same[rows] = (data[at] == want).all(axis=1)
    return same


def dense_rank(values: np.ndarray) -> np.ndarray:
    """``pc.rank(values, sort_keys="ascending", tiebreaker="dense")`` of text (an object
    array, None absent): 1 for the smallest text, nulls after every text, tied."""
    present = np.array([v is not None for v in values], dtype=bool)
    ranks = np.empty(len(values), dtype=np.int64)
    uniq, inverse = np.unique(values[present], return_inverse=True)  # str order: UTF-8's
    ranks[present] = inverse.reshape(-1) + 1
    ranks[~present] = len(uniq) + 1
    return ranks
