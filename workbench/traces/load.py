"""``load_trace``, ``detect_format`` and ``available_formats`` over every built-in reader.

A format (``formats.TraceFormat``) is a ``sniff`` of a file's first lines and a ``read``
into a ``Workload`` that loads nothing partial; importing this module registers every
built-in reader (``_builtin``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Workload
from workbench.traces import (
    _builtin,  # noqa: F401  (every built-in reader registers)
    bounds,
)
from workbench.traces._io import (
    BOM,
    OTHER_SEPARATORS,
    bytes_rule,
    check_options,
    folder_files,
    open_trace,
    separator_rule,
)
from workbench.traces.bounds import MAX_HEAD_BYTES, check_workload
from workbench.traces.formats import FORMATS, Reader, Sniffer, TraceFormat, register_format
from workbench.traces.graph import check_graph
from workbench.traces.graph import window as graph_window
from workbench.traces.json_io import document_rule

__all__ = ["FORMATS", "Reader", "Sniffer", "TraceFormat", "register_format"]

SNIFF_LINES = 5


def head_lines(path: Path, n: int = SNIFF_LINES) -> list[str]:
    """The first ``n`` non-empty lines (at most ``bounds.MAX_HEAD_BYTES`` read, opened as
    every reader opens a file), decoded leniently, a leading BOM dropped."""
    out: list[str] = []
    for raw in open_trace(path, MAX_HEAD_BYTES).split(b"\n"):
        line = raw.decode("utf-8", errors="replace").strip()
        if not out:
            line = line.removeprefix(BOM).strip()
        if line:
            out.append(line)
            if len(out) >= n:
                break
    return out


def detect_format(path: str | Path) -> str:
    """Name of the first registered format whose sniffer accepts the file's head; for a
    folder, the first format that reads folders and accepts its first file (by name)."""
    path = Path(path)
    if path.is_dir():
        return _detect_folder(path)
    lines = head_lines(path)
    if not lines:
        raise TraceFormatError(path, 0, "file is empty")
    for name in FORMATS.names():
        if FORMATS.get(name).sniff(lines):
            return name
    if path.stat().st_size > bounds.MAX_TRACE_BYTES:
        open_trace(path)  # the readers' refusal of a file past the size bound, before its bytes
    head = open_trace(path, MAX_HEAD_BYTES)
    if (found := bytes_rule(head)) is not None:  # what to do, not "name the format"
        raise TraceFormatError(path, *found)
    _refuse_json_document(path, head)
    _refuse_other_separator(path, lines[0])
    _refuse_broken_json_head(path, lines[0])
    raise TraceFormatError(
        path, 1, f"cannot tell the trace format; name it (--format on the command line, fmt= in "
        f"Python, trace.format in a config): one of {', '.join(FORMATS.names())}"
    )


def _detect_folder(path: Path) -> str:
    folder_formats = [n for n in FORMATS.names() if FORMATS.get(n).folders]
    for name in folder_formats:
        own = folder_files(path, FORMATS.get(name).folders)
        if not own:
            continue
        lines = head_lines(own[0])
        if FORMATS.get(name).sniff(lines):
            return name
        # the first file decides: an empty or cut one is its own error, named, as a file's
        if not lines:
            raise TraceFormatError(own[0], 0, "file is empty (a folder's format is told by "
                                              "its first file by name)")
        _refuse_broken_json_head(own[0], lines[0])
    readers = ", ".join(folder_formats)
    raise TraceFormatError(
        path, 0, f"not a regular file: a directory; a folder is read as one trace only by "
        f"{readers}, and none of its {len(folder_files(path))} files is one (name a file, "
        "or the format)")


def _refuse_other_separator(path: Path, first: str) -> None:
    """A CSV header a format would take were its separators commas: the CSV readers' rule
    (``_io.separator_rule``), naming that format."""
    sep = next((c for c in OTHER_SEPARATORS if c in first), None)
    if sep is None or "," in first:
        return
    as_csv = [first.replace(sep, ",")]
    name = next((n for n in FORMATS.names() if FORMATS.get(n).sniff(as_csv)), None)
    if name is not None and (rule := separator_rule(first, name)) is not None:
        raise TraceFormatError(path, 1, rule)


def _refuse_json_document(path: Path, head: bytes) -> None:
    """A file that is one JSON document (an array, a pretty-printed object), which no sniffer
    took: the readers' rule (JSON lines, one object a line), naming the format of the
    array's first record when the head holds it whole."""
    text = head.decode("utf-8", errors="replace").removeprefix(BOM)
    if not text.lstrip().startswith(("[", "{")):
        return
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    first = doc[0] if isinstance(doc, list) and doc else doc
    record = [orjson.dumps(first).decode()] if isinstance(first, dict) else []
    names = [n for n in FORMATS.names() if record and FORMATS.get(n).sniff(record)]
    whole = " and ".join(n for n in FORMATS.names() if FORMATS.get(n).folders)
    reader = names[0] if names else f"each JSON format but {whole}"
    if (rule := document_rule(text, reader)) is not None:
        lineno = text[: len(text) - len(text.lstrip())].count("\n") + 1
        raise TraceFormatError(path, lineno, rule)


def _refuse_broken_json_head(path: Path, first: str) -> None:
    """A head that opens like JSON but does not parse is that line's JSON error, not an
    unknown format: the readers say ``line N: invalid JSON`` for the same damage later on."""
    if not first.startswith(("{", "[")):
        return
    head = open_trace(path, MAX_HEAD_BYTES + 1)
    lines = head.removeprefix(BOM.encode()).split(b"\n")
    lineno = next((n for n, raw in enumerate(lines, start=1) if raw.strip()), 1)
    if len(head) > MAX_HEAD_BYTES and lineno == len(lines):  # cut, not broken
        raise TraceFormatError(
            path, lineno, f"cannot tell the trace format: line {lineno} is longer than the "
            f"{MAX_HEAD_BYTES:,} bytes format detection reads; name the format (--format on "
            f"the command line, fmt= in Python, trace.format in a config)")
    try:
        orjson.loads(first)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(
            path, lineno, f"invalid JSON ({exc}), so no JSON trace format can be recognised"
        ) from None


def load_trace(path: str | Path, fmt: str = "auto", *,
               window: tuple[int, int | None] | None = None, **options: Any) -> Workload:
    """Load any supported trace into a ``Workload``; ``fmt="auto"`` detects the format
    (``meta["detected_format"]``); ``options`` go to the reader (``block_size`` ...);
    ``window=(offset, count)``: units offset .. offset + count − 1 only (``graph.window``),
    read by a reader that reads windows without holding the file (docs/trace-bounds.md,
    "A window of a large file"), else cut from the whole workload."""
    path = Path(path)
    detected = fmt == "auto"
    name = detect_format(path) if detected else FORMATS.canonical(fmt, "trace.format")
    if path.is_dir() and not FORMATS.get(name).folders:
        open_trace(path)  # the reader's own refusal: "not a regular file: a directory"
    reader = FORMATS.get(name)
    # one refusal for every reader (a silent ignore hides typos)
    check_options(name, {k: v for k, v in options.items() if k not in reader.options},
                  reader.options)
    if window is not None:
        _check_window(window)
    if window is not None and reader.windows:
        workload = reader.read(path, window, **options)
    else:
        workload = reader.read(path, **options)
    check_workload(path, workload)  # the documented bounds, whatever the reader
    check_graph(path, workload)  # sub-agent links: parents exist, no cycle
    if window is not None and not reader.windows:
        workload = graph_window(workload, *window)
    meta = dict(workload.meta)
    meta["format"] = name
    if detected:
        meta["detected_format"] = name
    return dataclasses.replace(workload, meta=meta, fmt=name, source=str(path))


def _check_window(window: Any) -> None:
    """``window`` is ``(offset, count)``: an offset ≥ 0 and a count ≥ 1 or None."""
    ok = (isinstance(window, tuple) and len(window) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in window if v is not None)
          and window[0] is not None and window[0] >= 0 and (window[1] is None or window[1] >= 1))
    if not ok:
        raise ConfigError(f"trace window must be (offset, count): offset an integer >= 0, "
                          f"count an integer >= 1 or None (all), got {window!r:.80} (it is "
                          "no reader option: trace.offset and trace.max_items give it)")


def source_sha256(path: str | Path, fmt: str = "auto") -> str:
    """A trace's identity: its file's sha256, or for a folder read as one trace, the
    sha256 over the names, sizes and bytes, in name order, of the files its reader reads
    (``fmt``'s, detected when "auto": ``_io.folder_files``), so a README or a hidden file
    beside them changes nothing and a trace file changes it."""
    path = Path(path)
    if not path.is_dir():
        return file_sha256(path)
    name = detect_format(path) if fmt == "auto" else FORMATS.canonical(fmt, "trace.format")
    h = hashlib.sha256()
    for f in folder_files(path, FORMATS.get(name).folders):
        h.update(f"{f.name}\0{f.stat().st_size}\0{file_sha256(f)}\0".encode())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """A file's sha256, read a buffer at a time."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def available_formats() -> list[str]:
    return FORMATS.names()
