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

from workbench.errors import TraceFormatError
from workbench.records import Workload
from workbench.traces import _builtin  # noqa: F401  (every built-in reader registers)
from workbench.traces._io import BOM, check_options, not_text_rule, open_trace
from workbench.traces.bounds import MAX_HEAD_BYTES, check_workload
from workbench.traces.formats import FORMATS, Reader, Sniffer, TraceFormat, register_format
from workbench.traces.graph import check_graph

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
    if (rule := not_text_rule(open_trace(path, 8))) is not None:
        raise TraceFormatError(path, 1, rule)  # what to do, not "name the format"
    _refuse_broken_json_head(path, lines[0])
    raise TraceFormatError(
        path, 1, f"cannot tell the trace format; name it (--format on the command line, fmt= in "
        f"Python, trace.format in a config): one of {', '.join(FORMATS.names())}"
    )


def _detect_folder(path: Path) -> str:
    folder_formats = [n for n in FORMATS.names() if FORMATS.get(n).folders]
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    for name in folder_formats:
        own = [p for p in files if p.name.endswith(FORMATS.get(name).folders)]
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
        f"{readers}, and none of its {len(files)} files is one (name a file, or the format)")


def _refuse_broken_json_head(path: Path, first: str) -> None:
    """A head that opens like JSON but does not parse is that line's JSON error, not an
    unknown format: the readers say ``line N: invalid JSON`` for the same damage later on."""
    if not first.startswith(("{", "[")):
        return
    head = open_trace(path, MAX_HEAD_BYTES + 1)
    lines = head.removeprefix(BOM.encode()).split(b"\n")
    lineno = next((n for n, raw in enumerate(lines, start=1) if raw.strip()), 1)
    if len(head) > MAX_HEAD_BYTES and lineno == len(lines):
        return  # a first line longer than the sniffed head: it was cut, not broken
    try:
        orjson.loads(first)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(
            path, lineno, f"invalid JSON ({exc}), so no JSON trace format can be recognised"
        ) from None


def load_trace(path: str | Path, fmt: str = "auto", **options: Any) -> Workload:
    """Load any supported trace into a ``Workload``; ``fmt="auto"`` detects the format
    (``meta["detected_format"]``); ``options`` go to the reader (``block_size`` ...)."""
    path = Path(path)
    detected = fmt == "auto"
    name = detect_format(path) if detected else FORMATS.canonical(fmt, "trace.format")
    if path.is_dir() and not FORMATS.get(name).folders:
        open_trace(path)  # the reader's own refusal: "not a regular file: a directory"
    reader = FORMATS.get(name)
    # one refusal for every reader (a silent ignore hides typos)
    check_options(name, {k: v for k, v in options.items() if k not in reader.options},
                  reader.options)
    workload = reader.read(path, **options)
    check_workload(path, workload)  # the documented bounds, whatever the reader
    check_graph(path, workload)  # sub-agent links: parents exist, no cycle
    meta = dict(workload.meta)
    meta["format"] = name
    if detected:
        meta["detected_format"] = name
    return dataclasses.replace(workload, meta=meta, fmt=name, source=str(path))


def source_sha256(path: str | Path) -> str:
    """A trace's identity: its file's sha256, or for a folder read as one trace, the
    sha256 over its files' names, sizes and bytes in name order (hidden files left out)."""
    path = Path(path)
    if not path.is_dir():
        return file_sha256(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
        h.update(f"{f.name}\0{f.stat().st_size}\0{file_sha256(f)}\0".encode())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """A file's sha256, read a buffer at a time."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def available_formats() -> list[str]:
    return FORMATS.names()
