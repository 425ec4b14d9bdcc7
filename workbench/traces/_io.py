"""Strict file and number reading for every reader: each problem is one TraceFormatError.

Files are opened one way (``open_trace``: regular files only, bounded, gzip inflated);
numbers written as text must be plain ASCII (docs/trace-bounds.md, "Files" and
"Strict parsing").
"""

from __future__ import annotations

import contextlib
import csv
import decimal
import errno
import io
import math
import os
import re
import stat
import types
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from workbench.errors import ConfigError, TraceFormatError
from workbench.plurals import noun
from workbench.traces import bounds

BOM = "\ufeff"
_INT_TEXT = re.compile(r"[ \t]*[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[ \t]*")
_FLOAT_TEXT = re.compile(
    r"[ \t]*[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|(?i:inf|infinity|nan))[ \t]*"
)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _os_rule(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "cannot open file: a symlink loop (too many levels of symbolic links)"
    return f"cannot open file: {exc.strerror or exc}"


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` and its ``fstat``, opened non-blocking (a FIFO would block
    the open) and checked on the descriptor to be a regular file: what is read is what was
    checked."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise TraceFormatError(path, 0, _os_rule(exc)) from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise TraceFormatError(path, 0, f"cannot read file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise TraceFormatError(path, 0, f"not a regular file: {kind}")
    return fd, st


def folder_files(path: Path, suffixes: tuple[str, ...] = ()) -> list[Path]:
    """The files of a folder read as one trace, by name: regular, not hidden (an editor's
    or a sync tool's ``.x.json``), ending in one of ``suffixes`` (any name when empty).
    One list for detection, the readers and the trace's identity (``load.source_sha256``)."""
    return sorted(p for p in path.iterdir() if p.name.endswith(suffixes or "") and p.is_file()
                  and not p.name.startswith("."))


def open_trace(path: Path, limit: int | None = None, *, inflate: bool = True) -> bytes:
    """The first ``limit`` bytes of a regular file (all of it when None, refused past
    ``bounds.MAX_TRACE_BYTES``); a gzip file's content when ``inflate`` (a trace; a
    config is read as it is). Opened non-blocking (a FIFO would block the open) and
    checked with ``fstat`` on the open descriptor: what is read is what was checked."""
    fd, st = _open_regular(path)
    try:
        cap = bounds.MAX_TRACE_BYTES
        if limit is None and st.st_size > cap:
            raise TraceFormatError(path, 0, _too_big(st.st_size))
        want = cap + 1 if limit is None else limit
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = _read_up_to(fh, want, st.st_size)
    except OSError as exc:
        raise TraceFormatError(path, 0, f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if limit is None and len(data) > cap:  # grew past its size, or a size-0 special file
        raise TraceFormatError(path, 0, _too_big(len(data)))
    if inflate and data[:2] == GZIP_MAGIC:
        # a head shorter than asked for is the whole file: its stream must end in it
        return _inflate(path, data, limit, whole=limit is None or len(data) < limit)
    return data


def _read_up_to(fh: BinaryIO, want: int, size: int) -> bytes:
    """At most ``want`` bytes of ``fh``. One ``read(n)`` allocates all ``n`` before it
    reads, so the first asks for the size ``fstat`` gave and a byte more; a file that
    grew since (or a size-0 special file) is read on in 16 MiB pieces, up to ``want``."""
    first = min(want, size + 1)
    data = fh.read(first)
    if len(data) < first or len(data) >= want:
        return data
    grown = bytearray(data)
    while len(grown) < want and (piece := fh.read(min(16 << 20, want - len(grown)))):
        grown += piece
    return bytes(grown)


GZIP_MAGIC = b"\x1f\x8b"


def _inflate(path: Path, raw: bytes, limit: int | None, *, whole: bool) -> bytes:
    """A gzip file's content: the first ``limit`` bytes, or all of it within
    ``bounds.MAX_TRACE_BYTES`` (a bomb stops at the bound); appended members in turn.
    ``whole``: ``raw`` is the whole file, so a stream that breaks or stops short in it
    is the file's fault, said as such even when only a head is asked for (detection)."""
    import zlib

    want = limit if limit is not None else bounds.MAX_TRACE_BYTES + 1
    out = bytearray()
    rest = raw
    while rest and len(out) < want:  # bounded: each pass consumes a member or stops
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(rest, want - len(out))
        except zlib.error as exc:
            if not whole:
                break  # a head cut mid-stream is expected when sniffing
            raise TraceFormatError(path, 0, f"gzip data is broken ({exc})") from None
        if inflater.unconsumed_tail:  # stopped at the bound
            break
        if not inflater.eof:
            if whole:
                raise TraceFormatError(path, 0, "gzip data is cut short (a truncated file)")
            break
        rest = inflater.unused_data
    if limit is None and len(out) > bounds.MAX_TRACE_BYTES:
        raise TraceFormatError(path, 0, "decompressed, " + _too_big(len(out)))
    return bytes(out[:want])


#: the first bytes of what is not a UTF-8 text trace though it often holds one, and what to
#: do about it (gzip alone is read: ``open_trace``, one layer of it)
_NOT_TEXT = (
    (GZIP_MAGIC, "compressed with gzip twice: one layer is read (gunzip it once)"),
    (b"BZh", "compressed with bzip2: only gzip is read (bunzip2 it, or gzip it)"),
    (b"\xfd7zXZ\x00", "compressed with xz: only gzip is read (unxz it, or gzip it)"),
    (b"\x28\xb5\x2f\xfd", "compressed with zstd: only gzip is read (unzstd it, or gzip it)"),
    (b"PK\x03\x04", "a zip archive: only gzip is read (unzip it and name the file inside)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive: only gzip is read (extract the file inside)"),
    (b"\xff\xfe", "UTF-16 text: traces are UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (b"\xfe\xff", "UTF-16 text: traces are UTF-8 (iconv -f UTF-16 -t UTF-8)"),
)


def not_text_rule(head: bytes) -> str | None:
    """Why a file that starts with ``head`` is no text trace, when its first bytes say
    (a compressor's or an archive's magic number, a UTF-16 BOM); None otherwise."""
    return next((rule for magic, rule in _NOT_TEXT if head.startswith(magic)), None)


def _too_big(size: int) -> str:
    return (f"file is larger than the bound of {bounds.MAX_TRACE_BYTES:,} bytes "
            f"({size:,} bytes or more; {bounds.DOC}){WINDOW_HINT}")


#: what a file past the bounds of a whole read can still do (docs/trace-bounds.md, "A window
#: of a large file"): the readers that read a window without holding the file
WINDOW_HINT = ("; an azure trace replays a window of it read as a stream, not held: "
               "trace.offset and trace.max_items (--offset, --max-items)")


def bytes_rule(data: bytes) -> tuple[int, str] | None:
    """``(line, rule)`` when ``data`` (a whole file, or the head detection reads) is no text
    trace a reader could take line by line; None otherwise. One rule for detection and
    every reader: a compressor's or UTF-16's first bytes, a NUL byte, lines ended by a
    bare CR, a second BOM (docs/trace-bounds.md, "Files")."""
    if (rule := not_text_rule(data)) is not None:
        return 1, rule
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        return line, "binary data (NUL byte): not a text trace"
    if b"\n" not in data and b"\r" in data.strip():
        return 1, ("lines end in a bare CR (classic Mac OS line endings): traces take LF or "
                   "CRLF (convert: tr '\\r' '\\n' < FILE)")
    if (at := _inner_bom_line(data)) is not None:
        return at, BOM_RULE
    return None


#: the one rule of a byte order mark that is not the file's first character
#: (docs/trace-bounds.md, "Files"): ``cat a.csv b.csv`` keeps b's at the start of a line,
#: a file exported twice starts with two
BOM_RULE = ("a byte order mark (U+FEFF) inside the file, not only as its first character: "
            "files joined with cat keep each one's (remove them: sed 's/\\xef\\xbb\\xbf//g' FILE)")
_BOM_BYTES = BOM.encode()


def _inner_bom_line(data: bytes) -> int | None:
    """The line of the first BOM past the one a file may start with, at the start of the
    file or of a line (where joined files put theirs); None when there is none."""
    if data.startswith(_BOM_BYTES * 2):
        return 1
    at = data.find(b"\n" + _BOM_BYTES)
    return None if at < 0 else data[: at + 1].count(b"\n") + 1


def read_text(path: Path) -> str:
    """The whole file as text: regular, bounded in bytes and lines, no NUL, UTF-8, not
    blank, lines ended by LF or CRLF; a BOM dropped."""
    data = open_trace(path)
    if (found := bytes_rule(data)) is not None:
        raise TraceFormatError(path, *found)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceFormatError(path, line, "not UTF-8 text") from None
    text = text.removeprefix(BOM)  # spreadsheet exports start with one; it is never content
    if not text.strip():
        raise TraceFormatError(path, 0, "file is empty")
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > bounds.MAX_TRACE_LINES:
        raise TraceFormatError(path, bounds.MAX_TRACE_LINES + 1, (
            f"file has {lines:,} lines, past the bound of {bounds.MAX_TRACE_LINES:,} lines "
            f"per trace ({bounds.DOC}): split it and replay the parts{WINDOW_HINT}"))  # fmt: skip
    return text


#: the separators spreadsheet exports use instead of commas, by name
OTHER_SEPARATORS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}


def separator_rule(header: str, fmt: str) -> str | None:
    """Why a CSV header line without a comma is another separator's export (None: it is
    not): one rule for detection and every CSV reader."""
    if "," in header:
        return None
    sep = next((c for c in OTHER_SEPARATORS if c in header), None)
    if sep is None:
        return None
    shown = "\\t" if sep == "\t" else sep
    return (f"the header is separated by {OTHER_SEPARATORS[sep]}, not commas: {fmt} is "
            f"comma-separated CSV (export it as CSV, or tr '{shown}' ',' < FILE when no "
            "field holds a comma)")


def header_names(line: str) -> set[str]:
    """The column names of a CSV header line as the sniffers see them: split at commas,
    spaces, a BOM and double quotes around a name dropped."""
    return {c.strip().strip('"') for c in line.lstrip(BOM).split(",")}


def header_sniffer(columns: tuple[str, ...]) -> Callable[[list[str]], bool]:
    """A format's sniffer: the first line is a CSV header naming every one of ``columns``
    (others may follow; the reader's ``check_columns`` says which it takes)."""
    wanted = set(columns)

    def sniff(lines: list[str]) -> bool:
        return bool(lines) and header_names(lines[0]) >= wanted

    return sniff


def check_columns(path: Path, line: int, header: list[str], known: Collection[str],
                  expected: str, why: Mapping[str, str] | None = None) -> None:
    """One ``TraceFormatError`` at the header ``line`` naming the columns of ``header`` not
    in ``known``: ``unknown column Region; expected exactly A,B,C`` (``expected``: what
    follows ``expected``; ``why``: a column's reason, added to the rule when it is there)."""
    extra = [c for c in header if c not in known]
    if not extra:
        return
    reason = next((f": {why[c]}" for c in extra if why and c in why), "")
    raise TraceFormatError(path, line, f"unknown {noun(len(extra), 'column')} "
                                       f"{', '.join(extra)}; expected {expected}{reason}")


def read_csv(
    path: Path, required: tuple[str, ...], fmt: str
) -> tuple[list[str], int, Iterator[tuple[int, dict[str, str]]]]:
    """Header (its columns checked now; ``fmt`` names the format in errors), its line (blank
    lines before it are skipped, as blank rows are everywhere) and an iterator of
    ``(line_number, row)`` that checks each row's width as it comes, then that there was a
    row at all. Rows are made one at a time (docs/design-notes.md, "Trace loading": peak
    memory per row)."""
    text = read_text(path)
    reader = csv.reader(io.StringIO(text))
    del text  # the StringIO holds its own copy
    header, line = _csv_header(path, reader, required, fmt)
    return header, line, _csv_rows(path, reader, header, line)


#: the head of a streamed file checked by the whole-file rules (``bytes_rule``) before its
#: first row: a bare-CR file, a NUL byte or a joined file's BOM named as a whole read names
#: them, not read as one long row
STREAM_HEAD_BYTES = 1 << 16
_FIRST_LINE = types.SimpleNamespace(line_num=0)  # ``_read_errors``' line of the head: 1


def stream_csv(
    path: Path, required: tuple[str, ...], fmt: str
) -> tuple[list[str], int, Iterator[tuple[int, list[str]]]]:
    """``read_csv`` without holding the file: read as the rows are asked for (a reader
    that stops asking stops reading), so neither the size nor the line bound applies; a
    reader bounds what it keeps (docs/trace-bounds.md, "A window of a large file"). Rows
    are ``(line, fields)`` in the header's order (no dict: a window may sit past millions
    of rows). The file is opened as ``open_trace`` opens it (a regular file; gzip
    inflated as read)."""
    raw = io.BufferedReader(io.FileIO(_open_regular(path)[0], "r"), STREAM_HEAD_BYTES)
    binary: io.BufferedReader[Any] = raw
    try:
        with _read_errors(path, _FIRST_LINE):
            if raw.peek(8)[:8].startswith(GZIP_MAGIC):
                import gzip

                binary = io.BufferedReader(gzip.GzipFile(fileobj=raw), STREAM_HEAD_BYTES)
            # the whole-file read's rules (``bytes_rule``) on the head: a stream is never held
            head = binary.peek(STREAM_HEAD_BYTES)[:STREAM_HEAD_BYTES]
    except BaseException:
        binary.close()
        raise
    if (found := bytes_rule(head)) is not None:
        binary.close()
        raise TraceFormatError(path, *found)
    # bytes that are no UTF-8 kept as surrogates, refused at their row's line (a decoder
    # error comes a buffer ahead, at no line)
    text = io.TextIOWrapper(binary, encoding="utf-8-sig", errors="surrogateescape",
                            newline="")
    reader = csv.reader(text)
    try:
        with _read_errors(path, reader):
            header, line = _csv_header(path, reader, required, fmt)
            _check_text(path, line, header)
    except BaseException:
        text.close()
        raise
    return header, line, _streamed_rows(path, text, reader, header, line)


def _streamed_rows(path: Path, text: io.TextIOWrapper, reader: Any, header: list[str],
                   header_line: int) -> Iterator[tuple[int, list[str]]]:
    """``_csv_fields`` over a file read as it goes, each row's text checked
    (``_check_text``), the file closed when the rows end or are no longer asked for."""
    try:
        with _read_errors(path, reader):
            for line, fields in _csv_fields(path, reader, header, header_line):
                _check_text(path, line, fields)
                yield line, fields
    finally:
        text.close()


def _check_text(path: Path, line: int, fields: list[str]) -> None:
    """A streamed row's text as ``bytes_rule`` and ``read_text`` check a whole file's: UTF-8
    (no byte kept as a surrogate), no NUL, no byte order mark at the start of the line."""
    joined = "".join(fields)
    if "\x00" in joined:
        raise TraceFormatError(path, line, "binary data (NUL byte): not a text trace")
    if fields and fields[0].startswith(BOM):
        raise TraceFormatError(path, line, BOM_RULE)
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        raise TraceFormatError(path, line, "not UTF-8 text") from None


@contextlib.contextmanager
def _read_errors(path: Path, reader: Any) -> Iterator[None]:
    """What reading a streamed file can raise, as one ``TraceFormatError`` at the line
    being read: a broken or cut gzip stream, an I/O error."""
    import gzip
    import zlib

    try:
        yield
    except (OSError, EOFError, zlib.error) as exc:
        why = ("gzip data is broken or cut short" if isinstance(exc, gzip.BadGzipFile | EOFError
                                                                  | zlib.error)
               else f"cannot read file: {getattr(exc, 'strerror', None) or exc}")
        raise TraceFormatError(path, reader.line_num + 1, why) from None


def _csv_header(path: Path, reader: Any, required: tuple[str, ...],
                fmt: str) -> tuple[list[str], int]:
    """The header of a CSV ``reader`` (blank lines before it skipped) and its line, its
    columns checked: ``required`` there, no separator but commas, no name twice."""
    try:
        fields = next(reader)
        while not any(f.strip() for f in fields):  # read_text refused an all-blank file
            fields = next(reader)
    except StopIteration:
        raise TraceFormatError(path, 0, "file is empty") from None
    except csv.Error as exc:
        raise TraceFormatError(path, reader.line_num or 1,
                               f"cannot read CSV header ({exc})") from None
    except UnicodeDecodeError:
        raise TraceFormatError(path, reader.line_num + 1, "not UTF-8 text") from None
    header, line = [h.strip() for h in fields], reader.line_num
    if len(fields) == 1 and (rule := separator_rule(fields[0], fmt)) is not None:
        raise TraceFormatError(path, line, rule)
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceFormatError(
            path, line, f"missing {noun(len(missing), 'column')}: {', '.join(missing)}")
    if len(set(header)) != len(header):
        raise TraceFormatError(path, line, "duplicate column names in header")
    return header, line


def _csv_rows(path: Path, reader: Any, header: list[str],
              header_line: int) -> Iterator[tuple[int, dict[str, str]]]:
    for lineno, fields in _csv_fields(path, reader, header, header_line):
        yield lineno, dict(zip(header, fields, strict=True))


def _csv_fields(path: Path, reader: Any, header: list[str],
                header_line: int) -> Iterator[tuple[int, list[str]]]:
    """Each non-blank row of ``reader`` as ``(line, fields)``, its width checked; then that
    there was one."""
    width, any_row = len(header), False
    try:
        for fields in reader:
            lineno = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if len(fields) != width:
                rule = f"expected {width} fields, found {len(fields)}"
                raise TraceFormatError(path, lineno, rule)
            any_row = True
            yield lineno, fields
    except csv.Error as exc:
        raise TraceFormatError(path, reader.line_num, f"malformed CSV ({exc})") from None
    if not any_row:
        raise TraceFormatError(path, header_line + 1, "no data rows")


def _number_text(path: Path, line: int, name: str, value: Any, kind: str) -> Any:
    """``value`` itself, unless it is text not spelled as a plain ASCII number."""
    if isinstance(value, str):
        pattern = _INT_TEXT if kind == "an integer" else _FLOAT_TEXT
        if not pattern.fullmatch(value):
            raise TraceFormatError(path, line, f"{name} must be {kind}, got {bounds.shown(value)}")
    return value


def as_int(
    path: Path, line: int, name: str, value: Any, *, minimum: int | None = 0,
    maximum: int | None = None,
) -> int:
    """An integer field (``12`` or ``12.0``, text in ASCII); rejects NaN, fractions,
    bools and values out of range."""
    if isinstance(value, bool):
        raise TraceFormatError(path, line, f"{name} must be an integer, got {bounds.shown(value)}")
    if isinstance(value, int):
        i = value  # exact, however large
    else:
        value = _number_text(path, line, name, value, "an integer")
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise TraceFormatError(
                path, line, f"{name} must be an integer, got {bounds.shown(value)}"
            ) from None
        if not math.isfinite(f) or f != int(f) or not _integral_text(value):
            raise TraceFormatError(path, line, f"{name} must be an integer, "
                                               f"got {bounds.shown(value)}")
        i = int(f)
    if minimum is not None and i < minimum:
        raise TraceFormatError(path, line, f"{name} must be >= {minimum}, "
                                           f"got {bounds.shown(value)}")
    if maximum is not None and i > maximum:
        raise TraceFormatError(path, line, bounds.over(name, value, maximum, "tokens"))
    return i


def _integral_text(value: Any) -> bool:
    """Text with a fraction or an exponent is integral in decimal, not only as a float
    (``4.9999999999999999`` is not 5); it matched ``_INT_TEXT``, so the test is cheap."""
    if not isinstance(value, str) or not any(c in value for c in ".eE"):
        return True
    d = decimal.Decimal(value.strip())
    return d == d.to_integral_value()


def as_float(
    path: Path, line: int, name: str, value: Any, *, minimum: float | None = 0.0,
    maximum: float | None = None, unit: str = "ms",
) -> float:
    """A finite number field (text in ASCII); rejects NaN/inf, bools and values out of
    range (``unit``: what ``maximum`` is counted in, named in the error)."""
    if isinstance(value, bool):
        raise TraceFormatError(path, line, f"{name} must be a number, got {bounds.shown(value)}")
    value = _number_text(path, line, name, value, "a number")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise TraceFormatError(path, line, f"{name} must be a number, "
                                           f"got {bounds.shown(value)}") from None
    if not math.isfinite(f):
        raise TraceFormatError(path, line, f"{name} must be finite, got {bounds.shown(value)}")
    if minimum is not None and f < minimum:
        raise TraceFormatError(path, line, f"{name} must be >= {minimum}, "
                                           f"got {bounds.shown(value)}")
    if maximum is not None and f > maximum:
        raise TraceFormatError(path, line, bounds.over(name, value, maximum, unit))
    return f


def token_count(path: Path, line: int, name: str, value: Any, *, minimum: int = 0) -> int:
    """A token count: an integer in ``[minimum, bounds.MAX_ROUND_TOKENS]``."""
    return as_int(path, line, name, value, minimum=minimum, maximum=bounds.MAX_ROUND_TOKENS)


def wait_ms(path: Path, line: int, name: str, value: Any) -> float:
    """A wait between rounds in ms: finite, in ``[0, bounds.MAX_WAIT_MS]``."""
    return as_float(path, line, name, value, maximum=bounds.MAX_WAIT_MS)


def offset_ms(path: Path, line: int, name: str, value: Any) -> float:
    """An arrival offset from the trace start in ms: finite, in ``[0, bounds.MAX_ARRIVAL_MS]``."""
    return as_float(path, line, name, value, maximum=bounds.MAX_ARRIVAL_MS)


def epoch_ms(path: Path, line: int, name: str, value: Any) -> float:
    """An absolute time in Unix ms: finite, in ``[0, bounds.MAX_EPOCH_MS]``."""
    return as_float(path, line, name, value, maximum=bounds.MAX_EPOCH_MS)


def check_options(fmt: str, unknown: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    """One ``ConfigError`` naming the format, the options it does not take and the valid
    ones (a silent ignore hides typos)."""
    if unknown:
        names = ", ".join(sorted(unknown))
        raise ConfigError(
            f"{fmt} reader got unknown {noun(len(unknown), 'option')} {names}; "
            f"valid: {', '.join(valid) or 'none'}"
        )


def check_block_size(block_size: Any) -> None:
    """A reader's ``block_size`` option: an integer in ``[1, bounds.MAX_ROUND_TOKENS]``."""
    if (isinstance(block_size, bool) or not isinstance(block_size, int)
            or not 1 <= block_size <= bounds.MAX_ROUND_TOKENS):
        raise ConfigError(
            f"block_size must be an integer in 1..{bounds.MAX_ROUND_TOKENS}, "
            f"got {bounds.shown(block_size)}")


# -- the column-wise fast path of the CSV readers (canonical, session) ------------------

FAST_PATH_MIN_ROWS = 2000  # below this the strict row-by-row path is fast enough


def fast_frame(text: str, kinds: dict[str, str]) -> Any:
    """pandas' C parser over plainly written CSV text (``kinds``: each column in header
    order, ``"int"`` or ``"str"``), or ``None`` when in doubt (quotes, a BOM, stray CRs,
    another header ...): the caller's strict path, which alone reports errors, decides."""
    if '"' in text or text.startswith("\ufeff") or "\r" in text.replace("\r\n", "\n"):
        return None
    # every line exactly as wide as the header: pandas would otherwise silently take
    # surplus leading fields as an index (the strict path calls that an error)
    commas = len(kinds) - 1
    if any(line.count(",") != commas for line in text.splitlines() if line):
        return None
    import pandas as pd

    dtypes = {name: ("int64" if kind == "int" else str) for name, kind in kinds.items()}
    try:
        frame = pd.read_csv(
            io.StringIO(text), dtype=dtypes, keep_default_na=False, na_filter=False, engine="c"
        )
    except Exception:  # any parser complaint: let the strict path name it
        return None
    if list(frame.columns) != list(kinds) or frame.empty:
        return None
    return frame


def fast_strings(frame: Any, name: str) -> list[str]:
    """A text column as Python strings."""
    return list(frame[name].to_numpy(dtype=object))


def fast_ms(frame: Any, name: str, pattern: re.Pattern[str]) -> np.ndarray | None:
    """A millisecond column as float64 when every value matches ``pattern``, else ``None``
    (one regex pass over the joined column: without quotes no value holds a newline)."""
    values = frame[name].to_numpy(dtype=object)
    joined = "\n".join(values)
    if re.fullmatch(f"(?:(?:{pattern.pattern})\n)*(?:{pattern.pattern})", joined) is None:
        return None
    return np.asarray(values).astype(np.float64)


def fast_rounds_fine(
    sids: list[str], prefix: np.ndarray, inp: np.ndarray, out: np.ndarray,
    wait: np.ndarray | None, arrival: np.ndarray | None,
) -> bool:
    """The row rules both CSV readers share, column-wise (the strict path names a row that
    breaks one): ids non-blank and sendable, a prompt of lengths >= 0, an output, every
    round inside ``bounds``."""
    return bool(
        wait is not None and arrival is not None and all(s.strip() for s in sids)
        and bounds.ids_sendable(set(sids))
        and (prefix >= 0).all() and (inp >= 0).all() and (out >= 1).all()
        and (prefix + inp > 0).all()
        and (prefix + inp + out <= bounds.MAX_ROUND_TOKENS).all()
        and (wait <= bounds.MAX_WAIT_MS).all()
        and (arrival <= bounds.MAX_ARRIVAL_MS).all()
    )


def choice_option(fmt: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """A reader option that takes one of ``allowed`` words (``--trace-option NAME=...``);
    anything else a ``ConfigError`` naming the format, the option and the choices."""
    if value not in allowed:
        raise ConfigError(f"{fmt} option {name} must be one of {', '.join(allowed)}, got "
                          f"{bounds.shown(value)}")
    return str(value)
