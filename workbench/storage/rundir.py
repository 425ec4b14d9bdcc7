"""Run directories: write them while a run goes, write and load them whole.

The files and their rules are docs/run-directory.md. JSONL lines are written whole
(one ``write`` each, or batched with ``max_delay_ms``: docs/design-notes.md), so a
crash leaves at worst a cut-short last line, which ``read_jsonl`` skips with a warning
(and ``run_damage`` names for a report: docs/run-directory.md, "A damaged run directory").
Integers wider than 64 bits fall back to the stdlib ``json`` (orjson would refuse them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson

from workbench import redact
from workbench import safe_write as safe
from workbench.errors import WRITE_ERRNOS, ConfigError, OutputWriteError
from workbench.kernels import native as _kernels
from workbench.plurals import counted
from workbench.records import RequestRecord, RunManifest, RunResult

log = logging.getLogger(__name__)

RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
LIFECYCLE = "lifecycle.jsonl"
TIMELINE = "metrics_timeline.jsonl"
PARQUET = "records.parquet"
SHARDS = "shards"

# digit runs that may be out of orjson's exact range [-2**63, 2**64) (64-bit hashes: 19-20)
_LONG_DIGITS = re.compile(rb"-?\d{19,}")
_ORJSON_INTS = range(-(2**63), 2**64)


def _default(obj: Any) -> Any:
    """orjson/json fallback for numpy scalars, sets and paths."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _plain(obj: Any) -> Any:
    if isinstance(obj, RequestRecord):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj


_LINE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def dumps_line(obj: Any) -> bytes:
    """One compact JSON line (with trailing newline); NaN becomes null."""
    return _line(obj)[0]


def _line(obj: Any) -> tuple[bytes, bool]:
    """``dumps_line``, and whether orjson serialised ``obj`` itself (a record or a dict
    as it is, in C; not converted first, not by the stdlib)."""
    if type(obj) is dict or isinstance(obj, RequestRecord):  # orjson serialises both in C,
        try:  # the newline appended there (lifecycle and timeline rows are dicts)
            return orjson.dumps(obj, default=_default, option=_LINE), True
        except TypeError:
            pass
    return _dumps(_plain(obj), indent=False) + b"\n", False


def _dumps(obj: Any, *, indent: bool) -> bytes:
    """orjson, or the stdlib for what it refuses (an int wider than 64 bits); NaN: null."""
    option = orjson.OPT_SERIALIZE_NUMPY | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(obj, default=_default, option=option)
    except TypeError:
        return json.dumps(_nan_to_none(obj), default=_default, indent=2 if indent else None,
                          separators=None if indent else (",", ":")).encode()


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


def loads_line(line: bytes) -> Any:
    """Parse one JSON line, keeping integers of any width exact: a line orjson writes back
    byte for byte had no integer out of its range (nearly all); any other with a digit
    run out of [-2**63, 2**64) is parsed by the stdlib. Where the kernels run, one scan of
    the line's integer literals (``json_ints_fit``, workbench/kernels.c) decides instead
    of the write-back, which cost as much as the parse (docs/design-notes.md)."""
    obj = orjson.loads(line)
    if _kernels is not None and isinstance(line, bytes):
        return obj if _kernels.json_ints_fit(line) else json.loads(line)
    data = orjson.dumps(obj)
    if line.startswith(data) and not line[len(data):].strip():
        return obj
    for m in _LONG_DIGITS.finditer(line):
        if int(m[0]) not in _ORJSON_INTS:  # or digits of a string or a fraction: either way
            return json.loads(line)
    return obj


class RecordWriter:
    """Append one JSON line per ``write`` (a ``RequestRecord``, a dataclass or a dict), on
    disk when it returns unless batched: by time (``max_delay_ms``), or ``per_turn``, the
    lines of one turn of the running event loop written together at the start of its next
    turn (a virtual run's records: docs/virtual-time.md, "Record writes: one per loop
    turn"); ``fsync`` survives a power cut."""

    def __init__(
        self,
        path: str | Path,
        mode: Literal["w", "a"] = "w",
        *,
        fsync: bool = False,
        max_delay_ms: float | None = None,
        max_batch: int = 512,
        per_turn: bool = False,
        on_error: Callable[[OutputWriteError], None] | None = None,
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # created exclusively, never through a link (safe_write.py)
            fd = safe.open_fd(self.path, append=mode == "a")
        except OSError as exc:
            raise OutputWriteError(self.path, exc) from None
        self._fh = open(fd, mode + "b", buffering=0)  # noqa: SIM115 - closed in close()
        self._size = os.fstat(fd).st_size  # where the last whole line ends
        #: the first failed write; later lines are dropped (the run is stopping). Without
        #: ``on_error`` it is raised; with it, reported there (a timer has nobody to raise to)
        self.error: OutputWriteError | None = None
        self._on_error = on_error
        self._fsync = fsync
        self._max_delay_s = None if max_delay_ms is None else max_delay_ms / 1000
        self._max_batch = max_batch
        self._per_turn = per_turn and max_delay_ms is None
        self._pending: list[bytes] = []
        self._first_pending = 0.0
        self._timer: asyncio.Handle | None = None
        self.count = 0
        self.writes = 0  # write calls made (a batch is one)

    def write(self, obj: Any) -> None:
        self.write_line(obj)

    def write_line(self, obj: Any) -> bytes | None:
        """``write``, returning the line when it is orjson's serialisation of ``obj`` as it
        is (no conversion, nothing redacted), else None: a caller that mirrors the file
        from the objects (``metrics.columns.RecordTables``) knows the line holds their values."""
        raw, own = _line(obj)
        line = redact.line(raw)  # no secret reaches a file (workbench.redact)
        self.count += 1
        mirrored = line if own and line is raw else None
        delay = self._max_delay_s
        if delay is None and not self._per_turn:
            self._write_out(line)
            return mirrored
        pending = self._pending
        pending.append(line)
        if len(pending) == 1:
            if delay is not None:
                self._first_pending = time.monotonic()
            self._arm_timer()
        if len(pending) >= self._max_batch or (
            delay is not None and time.monotonic() - self._first_pending >= delay
        ):
            self.flush()
        return mirrored

    def _arm_timer(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wake us later: do not hold the line
            self.flush()
            return
        if self._timer is not None:
            return
        if self._max_delay_s is not None:
            self._timer = loop.call_later(self._max_delay_s, self._on_timer)
        elif self._per_turn:  # after every callback of this turn: before a virtual
            self._timer = loop.call_soon(self._on_timer)  # loop's next step or time advance

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write every pending line now (one ``write`` call)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and not self._fh.closed:
            data = b"".join(self._pending)
            self._pending.clear()
            self._write_out(data)

    def _write_out(self, data: bytes) -> None:
        """Whole lines or nothing: a write that fails part-way (disk full, file too large)
        is cut back to the last whole line, and the error goes to ``on_error``."""
        if self.error is not None:
            return
        try:
            written = self._fh.write(data)  # nearly always whole: no view made
            if written != len(data):
                view = memoryview(data)[written or 0 :]
                while view:
                    written = self._fh.write(view)
                    view = view[written or 0 :]
            if self._fsync:
                os.fsync(self._fh.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fh.fileno(), self._size)
            self.error = OutputWriteError(self.path, exc)
            if self._on_error is None:
                raise self.error from None
            self._on_error(self.error)
            return
        self._size += len(data)
        self.writes += 1

    def write_all(self, objs: Iterable[Any]) -> None:
        """``write`` of each; unbatched, their lines go out ``max_batch`` to a ``write``
        call, every one on disk when it returns (a run's timeline: one call, not a line's)."""
        if self._max_delay_s is not None or self._per_turn:
            for obj in objs:
                self.write(obj)
            return
        pending = self._pending
        for obj in objs:
            pending.append(redact.line(_line(obj)[0]))  # no secret reaches a file
            self.count += 1
            if len(pending) >= self._max_batch:
                self.flush()
        self.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self.flush()
            self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json(path: str | Path, obj: Any) -> Path:
    """Write a JSON document atomically (temp file + rename): readers never see half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return safe.write_atomic(path, _manifest_bytes(obj))  # never through a link (safe_write.py)


def _manifest_bytes(obj: Any) -> bytes:
    """A JSON document as ``write_json`` stores it: redacted, indented, one final newline."""
    return _dumps(redact.obj(obj), indent=True) + b"\n"  # no secret reaches a file (redact)


def read_json(path: str | Path) -> Any:
    return loads_line(Path(path).read_bytes())


def read_jsonl(path: str | Path) -> list[Any]:
    """Every line of a JSONL file; a cut-short *last* line (a crash) is skipped with a
    warning, a bad line elsewhere raises ``ValueError`` (lost data must not hide)."""
    return list(iter_jsonl(path))


def iter_jsonl(
    path: str | Path, *, lines: bool = False, parse: Callable[[bytes], Any] = loads_line
) -> Iterator[Any]:
    """``read_jsonl`` one line at a time, without the file or the list in memory;
    ``lines``: each object with its line and its number, ``(obj, line, n)``; ``parse``:
    what reads a line
    (``orjson.loads``: out-of-range integers as floats, for a caller that checks)."""
    path = Path(path)
    if not path.exists():
        return
    with path.open("rb") as f:
        for i, line in enumerate(f):
            if line.isspace():  # blank (a line read has at least its newline, or is the
                continue  # last one's text: never empty); no copy of a long line made
            try:
                obj = parse(line)
            except ValueError as exc:
                rest = f.read()  # the last non-blank line of a file cut short: skipped
                if not rest.strip() and not (line + rest).endswith(b"\n"):
                    log.warning("%s: skipping truncated last line %d (%s)", path, i + 1, exc)
                    return
                raise ValueError(f"{path}:{i + 1}: invalid JSON line ({exc})") from None
            yield (obj, line, i + 1) if lines else obj


def _trim_partial_tail(path: Path) -> None:
    """Cut a crash's unfinished last line so appending continues on a clean line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        os.truncate(path, data.rfind(b"\n") + 1)


def _rewrite(path: Path, rows: Iterable[Any]) -> None:
    tmp = safe.temp_of(path)
    with RecordWriter(tmp) as w:
        w.write_all(rows)
    safe.commit(tmp, path)


def _record_key(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d.get("request_id"), d.get("unit_ordinal"), d.get("round_idx"), d.get("warmup"))


def _sync_records(path: Path, records: list[RequestRecord]) -> None:
    """Make ``path`` hold exactly ``records``, appending only what was not streamed yet."""
    _trim_partial_tail(path)
    disk_keys = [_record_key(d) for d in read_jsonl(path)]
    on_disk = set(disk_keys)
    mine = [(_record_key(r.to_dict()), r) for r in records]
    if on_disk <= {k for k, _ in mine} and len(on_disk) == len(disk_keys):
        with RecordWriter(path, "a") as w:
            w.write_all(r for k, r in mine if k not in on_disk)
    else:  # the file holds something else (another run, duplicates): start over
        _rewrite(path, records)


def _sync_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Same for plain rows: keep the streamed prefix when it matches, append the rest."""
    _trim_partial_tail(path)
    on_disk = read_jsonl(path)
    normal = [loads_line(dumps_line(r)) for r in rows]
    if on_disk == normal[: len(on_disk)]:
        with RecordWriter(path, "a") as w:
            w.write_all(rows[len(on_disk) :])
    else:
        _rewrite(path, rows)


def write_manifest(run_dir: str | Path, manifest: RunManifest | dict[str, Any]) -> Path:
    """``run_dir/manifest.json`` replaced atomically, redacted; a dict is written as it is
    (``write_run``'s: ``RunManifest.to_dict`` plus keys)."""
    doc = manifest.to_dict() if isinstance(manifest, RunManifest) else manifest
    return write_json(Path(run_dir) / MANIFEST, doc)


def read_manifest(run_dir: str | Path, *, strict: bool = False) -> RunManifest:
    """``run_dir/manifest.json`` as a ``RunManifest`` (any schema). Missing: an empty one
    with no status; damaged: the same, or ``ValueError`` naming the file when ``strict``."""
    path = Path(run_dir) / MANIFEST
    try:
        doc = read_json(path)
    except FileNotFoundError:
        doc = {}
    except (OSError, ValueError) as exc:
        if strict:
            raise ValueError(f"{path}: not a readable manifest ({exc})") from None
        doc = None
    if not isinstance(doc, dict):
        if strict:
            raise ValueError(f"{path}: a manifest is a JSON object, not {type(doc).__name__}")
        doc = {}
    return RunManifest.from_dict(doc)


def write_run(result: RunResult, directory: str | Path) -> Path:
    """Write every run file but the summary and ``records.parquet`` into ``directory``
    (``metrics.files.save`` writes those). Lines already streamed there are kept, only
    missing ones appended; a run kept on disk only has its files copied."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if result.records_on_disk:
        _copy_run_files(Path(result.run_dir or d), d)
    else:
        _sync_records(d / RECORDS, result.records)
        _sync_rows(d / LIFECYCLE, result.lifecycle)
    if result.metrics_timeline or (d / TIMELINE).exists():
        _sync_rows(d / TIMELINE, result.metrics_timeline)
    # the keys after the manifest's own, as every saved run has them (byte for byte)
    doc = {**result.manifest.to_dict(), "run_id": result.run_id, "cancelled": result.cancelled}
    write_manifest(d, doc)
    result.run_dir = str(d)
    return d


def _copy_run_files(src: Path, dst: Path) -> None:
    """Records and lifecycle rows of a run kept on disk only, into ``dst`` (if elsewhere)."""
    if src.resolve() == dst.resolve():
        return
    for name in (RECORDS, LIFECYCLE):
        if (src / name).exists():
            with open(src / name, "rb") as fin, safe.open_file(dst / name, "wb") as fout:
                shutil.copyfileobj(fin, fout)


# -- claiming a run directory (docs/run-directory.md, "One run, one directory") -------------
#: every name a run writes in its directory: one of them present means a run is (or was) there
RUN_FILES = (MANIFEST, RECORDS, SUMMARY, LIFECYCLE, TIMELINE, PARQUET, SHARDS,
             MANIFEST + ".tmp", SUMMARY + ".tmp")
STALE_SCAN_MAX = 10_000  # sibling run directories a new run looks at for stale ones


class RunDirTaken(ConfigError):
    """``out_dir/<run_id>`` holds a run or is a symlink: a configuration error (exit code 2)."""


def claim_run_dir(out_dir: str | Path, run_id: str, manifest: Any, *,
                  overwrite: bool = False) -> Path:
    """Make ``out_dir/<run_id>`` this run's own and write its first ``manifest.json``
    (``O_CREAT | O_EXCL``): the rules are docs/run-directory.md, "One run, one directory".
    Raises ``RunDirTaken`` (exit code 2) before anything is sent."""
    root = Path(out_dir)
    d = contained_dir(root, run_id)
    try:
        d.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        raise _mkdir_error(d, exc) from None
    _refuse_link(d, root)  # (a symlink planted between the check and the mkdir)
    if overwrite:
        _clear_run(d)
    for name in RUN_FILES:  # a link planted where a run file's temporary will go (the run
        if safe.temp_of(d / name).is_symlink():  # files themselves: RunDirTaken below)
            raise safe.LinkRefused(safe.temp_of(d / name))
    data = _manifest_bytes(manifest)
    try:
        fd = os.open(d / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | safe.NOFOLLOW, 0o644)
    except FileExistsError:
        raise RunDirTaken(_taken(d)) from None
    try:
        present = [n for n in RUN_FILES if n != MANIFEST and os.path.lexists(d / n)]
        if present:
            os.unlink(d / MANIFEST)
            raise RunDirTaken(_taken(d, present))
        try:
            safe.write_fd(fd, data, d / MANIFEST)
        except OutputWriteError:  # disk full before the run: no empty manifest left behind
            with contextlib.suppress(OSError):
                os.unlink(d / MANIFEST)
            raise
    finally:
        os.close(fd)
    warn_stale_runs(root, skip=run_id)
    return d


def _taken(d: Path, present: list[str] | None = None) -> str:
    what = f"holds {', '.join(present)}" if present else "already holds a run"
    note = running_note(read_manifest(d)) if present is None else None
    return (f"{d} {what}{f' ({note})' if note else ''}: a run id names one run; give another "
            "--run-id (or none, for a fresh one), or --overwrite to replace a finished run")


def contained_dir(root: str | Path, name: str) -> Path:
    """``root/name`` for a run, a sweep or a report (``root`` created); a symlink or a path
    resolving outside ``root`` raises ``RunDirTaken``."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _mkdir_error(root, exc) from None
    d = root / name
    _refuse_link(d, root)
    return d


def _mkdir_error(d: Path, exc: OSError) -> Exception:
    """A directory that cannot be made: a failed write (full or broken disk, exit code 5)
    or a configuration error (2)."""
    if exc.errno in WRITE_ERRNOS:
        return OutputWriteError(d, exc)
    return RunDirTaken(f"{d}: cannot create the directory ({exc.strerror or exc})")


def _refuse_link(d: Path, root: Path) -> None:
    if d.is_symlink():
        raise RunDirTaken(f"{d} is a symlink (to {os.readlink(d)}): workbench writes only "
                          f"inside {root}; remove it or give another name")
    if d.exists() and Path(os.path.realpath(d)).parent != Path(os.path.realpath(root)):
        raise RunDirTaken(f"{d} resolves outside {root}: workbench writes only inside it")


def _clear_run(d: Path) -> None:
    """``--overwrite``: remove a finished run's files (never a live run's)."""
    note = running_note(read_manifest(d))
    if note and "still running" in note:
        raise RunDirTaken(f"{d}: {note}; --overwrite replaces finished runs only")
    for name in RUN_FILES:
        p = d / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def process_identity() -> dict[str, Any]:
    """This process as a manifest names it: pid, host and the pid's start time."""
    return {"pid": os.getpid(), "hostname": socket.gethostname(),
            "pid_start": _pid_start(os.getpid())}


def _pid_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat_line[stat_line.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None  # field 22 of proc(5)


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return start is None or _pid_start(pid) in (None, start)


def _running_here(manifest: RunManifest) -> tuple[int, bool] | None:
    """A ``running`` manifest of this host: its process's pid and whether it still runs
    (a pid reused since is not the run's: ``pid_start``); None otherwise."""
    host = manifest.host
    if manifest.status != "running" or not isinstance(host, dict):
        return None
    pid = host.get("pid")
    if not isinstance(pid, int) or host.get("hostname") != socket.gethostname():
        return None
    return pid, _alive(pid, host.get("pid_start"))


def killed(manifest: RunManifest) -> bool:
    """The manifest was left ``running`` by a process of this host that is gone: the run
    was killed (SIGKILL, the OOM killer, a power cut) before it could say how it ended."""
    here = _running_here(manifest)
    return here is not None and not here[1]


def running_note(manifest: RunManifest) -> str | None:
    """For a ``running`` manifest of this host: whether its process still runs or died
    leaving it so; None otherwise."""
    here = _running_here(manifest)
    if here is None:
        return None
    pid, alive = here
    if alive:
        return f"still running (process {pid})"
    return (f"INCOMPLETE: the run was killed (left 'running' by process {pid} on "
            f"{manifest.host['hostname']}, which is no longer alive); its records up to then "
            "are on disk, it has no summary")


def warn_stale_runs(root: str | Path, skip: str | None = None) -> list[str]:
    """Log one warning per run directory under ``root`` left ``running`` by a dead
    process (at most ``STALE_SCAN_MAX`` entries looked at); returns the warnings."""
    out: list[str] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)[:STALE_SCAN_MAX]
    except OSError:
        return out
    for e in entries:
        if e.name == skip or not e.is_dir(follow_symlinks=False):
            continue
        note = running_note(read_manifest(Path(e.path)))
        if note and not note.startswith("still"):
            out.append(f"{e.path}: {note}")
            log.warning("%s", out[-1])
    return out


class RunDirError(ConfigError, FileNotFoundError):
    """A run directory is missing, unreadable or not a run (exit code 2)."""


def _is_run_dir(d: Path) -> bool:
    """``d`` holds records or a manifest; one not a regular file (a FIFO) is an error."""
    found = False
    for name in (RECORDS, MANIFEST):
        try:
            mode = (d / name).stat().st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunDirError(f"{d / name}: cannot read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(mode):
            raise RunDirError(f"{d / name} is not a regular file")
        found = True
    return found


def resolve_run_dir(directory: str | Path) -> Path:
    """``directory`` itself, or its only run subdirectory (``out_dir/<run_id>``); anything
    else is one ``RunDirError`` saying which."""
    d = Path(directory)
    try:
        if not d.is_dir():
            missing = not d.exists() and not d.is_symlink()
            what = "no such directory" if missing else "not a directory"
            raise RunDirError(f"{d} is not a run directory ({what}; give out_dir/<run_id>)")
        if _is_run_dir(d):
            return d
        subs = sorted(p for p in d.iterdir() if p.is_dir() and _is_run_dir(p))
    except RunDirError:
        raise
    except OSError as exc:
        raise RunDirError(f"{d}: cannot read ({exc.strerror or exc})") from None
    if len(subs) == 1:
        return subs[0]
    hint = f"; it holds {len(subs)} runs: {', '.join(p.name for p in subs)}" if subs else ""
    raise RunDirError(f"{d} is not a run directory (no {RECORDS} or {MANIFEST}){hint}")


def _scan_jsonl(path: Path) -> tuple[int, int, int | None]:
    """``(objects, warm-up records, cut line)`` of a JSONL file read as ``iter_jsonl``
    reads it (its cut-short last line's number, else None); a bad line elsewhere raises
    ``ValueError`` naming the file and line, as ``iter_jsonl`` does."""
    n = warm = 0
    cut: int | None = None
    if not path.exists():
        return 0, 0, None
    with path.open("rb") as f:
        for i, line in enumerate(f):
            if line.isspace():
                continue
            try:
                obj = orjson.loads(line)  # out-of-range ints as floats: only counted here
            except ValueError as exc:
                rest = f.read()
                if not rest.strip() and not (line + rest).endswith(b"\n"):
                    cut = i + 1
                    break
                raise ValueError(f"{path}:{i + 1}: invalid JSON line ({exc})") from None
            n += 1
            warm += bool(isinstance(obj, dict) and obj.get("warmup"))
    return n, warm, cut


def run_damage(directory: str | Path) -> list[str]:
    """What a reader of a run directory must be told was damaged, one line each, naming
    the file, the line and what the numbers are then based on: a JSONL file whose last
    line was cut short (a crash: its whole lines are read), ``records.jsonl`` holding
    fewer records than ``summary.json`` counted (lines missing). A damaged manifest or a
    bad line elsewhere is no note but a ``RunDirError`` (nothing can be trusted to render
    from it). docs/run-directory.md, "A damaged run directory"."""
    d = Path(directory)
    try:
        read_manifest(d, strict=True)
    except ValueError as exc:
        raise RunDirError(str(exc)) from None
    notes: list[str] = []
    scans: dict[str, tuple[int, int, int | None]] = {}
    for name, what in ((RECORDS, "record"), (LIFECYCLE, "event"), (TIMELINE, "sample")):
        try:
            n, warm, cut = _scan_jsonl(d / name)
        except OSError as exc:
            raise RunDirError(f"{d / name}: cannot read ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise RunDirError(f"{exc}: the run directory is damaged") from None
        scans[name] = (n, warm, cut)
        if cut is not None:
            notes.append(f"{name}: line {cut} cut short (the run was interrupted?): "
                         f"{counted(n, what)} read")
    summed = _summary_requests(d)
    if summed is not None:
        n, warm, cut = scans[RECORDS]
        read = n if summed[1] else n - warm
        if read + (cut is not None) < summed[0]:  # beyond the cut line, said above
            notes.append(f"{RECORDS}: {counted(read, 'record')} read, {SUMMARY} counted "
                         f"{summed[0]} (lines missing): the report counts the {read}")
    return notes


def _summary_requests(d: Path) -> tuple[int, bool] | None:
    """``summary.json``'s request count and whether it counted warm-ups (None: no summary
    or none readable; the report does not read it for a run)."""
    try:
        s = read_json(d / SUMMARY)
    except (OSError, ValueError):
        return None
    n = s.get("requests") if isinstance(s, dict) else None
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    return n, bool(s.get("warmup_included"))


def load(directory: str | Path) -> RunResult:
    """Read a run directory back into a ``RunResult`` (see ``read_jsonl`` on crashes)."""
    d = resolve_run_dir(directory)
    manifest = read_manifest(d, strict=True)  # any schema; a damaged one raises
    records = load_records(d)
    run_id = manifest.run_id or (records[0].run_id if records else d.name)
    cancelled = bool(manifest.cancelled) or manifest.status == "cancelled"
    return RunResult(
        run_id=run_id,
        records=records,
        manifest=manifest,
        lifecycle=read_jsonl(d / LIFECYCLE),
        metrics_timeline=read_jsonl(d / TIMELINE),
        run_dir=str(d),
        cancelled=cancelled,
    )


def load_records(directory: str | Path) -> list[RequestRecord]:
    """The ``RequestRecord``s of a run directory (its ``records.jsonl``)."""
    return [RequestRecord.from_dict(x) for x in read_jsonl(Path(directory) / RECORDS)]
