"""Shared hypothesis strategy for the readers' corruption property tests."""

import tempfile
from pathlib import Path

from hypothesis import strategies as st

OPS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "truncate", "delete", "duplicate"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def corrupt(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    """Byte flips, truncation, line deletion and duplication at drawn positions."""
    for op, pos, value in ops:
        if not data:
            break
        pos %= len(data)
        lines = data.split(b"\n")
        k = pos % len(lines)
        if op == "flip":
            data = data[:pos] + bytes([value]) + data[pos + 1 :]
        elif op == "truncate":
            data = data[:pos]
        elif op == "delete":
            data = b"\n".join(lines[:k] + lines[k + 1 :])
        else:
            data = b"\n".join(lines[: k + 1] + lines[k:])
    return data


def loads_or_format_error(data: bytes, suffix: str, *fmts: str, **options: object) -> None:
    """Write ``data`` to a temp file and load it as each of ``fmts``: a Workload or one
    TraceFormatError naming a line and a rule, never anything else."""
    from workbench.errors import TraceFormatError
    from workbench.records import Workload
    from workbench.traces.load import load_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"c{suffix}"
        path.write_bytes(data)
        for fmt in fmts:
            try:
                assert isinstance(load_trace(path, fmt=fmt, **options), Workload)
            except TraceFormatError as exc:
                assert exc.line >= 0 and exc.rule


def loads_or_format_error_both_paths(
    data: bytes, suffix: str, fast: bool, *fmts: str, **options: object
) -> None:
    """``loads_or_format_error`` with the canonical CSV reader's vectorized fast path
    forced on (``fast``) or off, restored afterwards (the session reader shares it)."""
    from workbench.traces import canonical

    saved = canonical.FAST_PATH_MIN_ROWS
    canonical.FAST_PATH_MIN_ROWS = 0 if fast else 10**9
    try:
        loads_or_format_error(data, suffix, *fmts, **options)
    finally:
        canonical.FAST_PATH_MIN_ROWS = saved
