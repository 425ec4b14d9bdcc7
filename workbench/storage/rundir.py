"""Run directories: write them while a run goes, write and load them whole.

Layout (docs/interface.md), one directory per run::

    records.jsonl            one RequestRecord per line, appended as each request ends
    manifest.json            what ran (config of the four axes, trace identity, versions)
    summary.json             ``workbench.metrics.summarize`` of the records (written by
                             ``workbench.metrics.files.save``)
    lifecycle.jsonl          one line per unit (admitted, routing slot, rounds done, reason)
    metrics_timeline.jsonl   server ``/metrics`` samples, when the run scraped them

JSONL files are crash-safe: by default ``RecordWriter`` issues each line as one
unbuffered write, so a line is on disk (in the OS) as soon as ``write`` returns
and a crash can at worst leave the *last* line cut short — which ``load`` skips
with a warning. A live replay batches instead (``max_delay_ms``): lines are
gathered and written in one ``write`` when ``max_batch`` lines are pending, when
the oldest pending line is ``max_delay_ms`` old (a loop timer fires even if no
further record comes), and on ``flush``/``close``; so a hard crash (SIGKILL,
power) loses at most the records of the last ``max_delay_ms``, and a cancel,
Ctrl-C or error that closes the writer loses nothing. Integers wider than 64
bits (Dynamo sequence hashes) fall back to the stdlib ``json`` on both sides,
since orjson would refuse or round them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import orjson

from workbench import redact
from workbench.errors import ConfigError
from workbench.records import RequestRecord, RunResult

log = logging.getLogger(__name__)

RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
LIFECYCLE = "lifecycle.jsonl"
TIMELINE = "metrics_timeline.jsonl"

_WIDE_INT = re.compile(rb"\d{20}")  # ≥ 20 digits may exceed 64 bits


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


def dumps_line(obj: Any) -> bytes:
    """One compact JSON line (with trailing newline); NaN becomes null."""
    if isinstance(obj, RequestRecord):  # orjson serialises the slots dataclass in C
        try:
            return orjson.dumps(
                obj, default=_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
            )
        except TypeError:
            pass
    obj = _plain(obj)
    try:
        data = orjson.dumps(obj, default=_default, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # e.g. an int wider than 64 bits
        text = json.dumps(_nan_to_none(obj), default=_default, separators=(",", ":"))
        data = text.encode()
    return data + b"\n"


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


def loads_line(line: bytes) -> Any:
    """Parse one JSON line, keeping integers of any width exact."""
    if _WIDE_INT.search(line):
        return json.loads(line)
    return orjson.loads(line)


class RecordWriter:
    """Append one JSON line per ``write`` and have it on disk when ``write`` returns.

    Takes a ``RequestRecord``, a dataclass or a plain dict (lifecycle rows,
    timeline samples). ``mode="w"`` starts the file afresh (a new run), ``"a"``
    continues it. ``fsync=True`` also survives a power cut, at a cost per line.
    """

    def __init__(
        self,
        path: str | Path,
        mode: Literal["w", "a"] = "w",
        *,
        fsync: bool = False,
        max_delay_ms: float | None = None,
        max_batch: int = 512,
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, mode + "b", buffering=0)  # noqa: SIM115 - closed in close()
        self._fsync = fsync
        self._max_delay_s = None if max_delay_ms is None else max_delay_ms / 1000
        self._max_batch = max_batch
        self._pending: list[bytes] = []
        self._first_pending = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.count = 0

    def write(self, obj: Any) -> None:
        line = redact.line(dumps_line(obj))  # no secret reaches a file (workbench.redact)
        self.count += 1
        if self._max_delay_s is None:
            self._write_out(line)
            return
        pending = self._pending
        pending.append(line)
        if len(pending) == 1:
            self._first_pending = time.monotonic()
            self._arm_timer()
        if len(pending) >= self._max_batch or (
            time.monotonic() - self._first_pending >= self._max_delay_s
        ):
            self.flush()

    def _arm_timer(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wake us later: do not hold the line
            self.flush()
            return
        if self._timer is None and self._max_delay_s is not None:
            self._timer = loop.call_later(self._max_delay_s, self._on_timer)

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
        view = memoryview(data)
        while view:
            written = self._fh.write(view)
            view = view[written or 0 :]
        if self._fsync:
            os.fsync(self._fh.fileno())

    def write_all(self, objs: Iterable[Any]) -> None:
        for obj in objs:
            self.write(obj)

    def close(self) -> None:
        if not self._fh.closed:
            self.flush()
            self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def write_json(path: str | Path, obj: Any) -> Path:
    """Write a JSON document atomically (temp file + rename): readers never see half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = redact.obj(obj)  # no secret reaches a file (workbench.redact)
    try:
        data = orjson.dumps(
            obj, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
        )
    except TypeError:
        data = json.dumps(_nan_to_none(obj), default=_default, indent=2).encode()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data + b"\n")
    os.replace(tmp, path)
    return path


def read_json(path: str | Path) -> Any:
    return loads_line(Path(path).read_bytes())


def read_jsonl(path: str | Path) -> list[Any]:
    """Every line of a JSONL file; a cut-short *last* line (a crash) is skipped with a warning.

    A bad line anywhere else means the file was damaged some other way, and
    silently dropping it would hide lost data, so that raises ``ValueError``.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = loads_line(line)
        except ValueError as exc:
            if i == last and not data.endswith(b"\n"):
                log.warning("%s: skipping truncated last line %d (%s)", path, i + 1, exc)
                continue
            raise ValueError(f"{path}:{i + 1}: invalid JSON line ({exc})") from None
        out.append(obj)
    return out


def _trim_partial_tail(path: Path) -> None:
    """Cut a crash's unfinished last line so appending continues on a clean line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        os.truncate(path, data.rfind(b"\n") + 1)


def _rewrite(path: Path, rows: Iterable[Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with RecordWriter(tmp) as w:
        w.write_all(rows)
    os.replace(tmp, path)


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


def write_run(result: RunResult, directory: str | Path, summary: dict[str, Any]) -> Path:
    """Write every run file into ``directory`` (created), ``summary`` as ``summary.json``.

    Safe to call after ``RecordWriter``s streamed records/lifecycle there: lines
    already on disk are kept and only the missing ones are appended. A run that kept
    its records on disk only (``RunResult.records_on_disk``) has nothing to sync from
    memory: its files are copied, never overwritten. ``workbench.metrics.files.save``
    computes the summary and calls this.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if result.records_on_disk:
        _copy_run_files(Path(result.run_dir or d), d)
    else:
        _sync_records(d / RECORDS, result.records)
        _sync_rows(d / LIFECYCLE, result.lifecycle)
    if result.metrics_timeline or (d / TIMELINE).exists():
        _sync_rows(d / TIMELINE, result.metrics_timeline)
    manifest = {**result.manifest, "run_id": result.run_id, "cancelled": result.cancelled}
    write_json(d / MANIFEST, manifest)
    write_json(d / SUMMARY, summary)
    result.run_dir = str(d)
    return d


def _copy_run_files(src: Path, dst: Path) -> None:
    """Records and lifecycle rows of a run kept on disk only, into ``dst`` (if elsewhere)."""
    if src.resolve() == dst.resolve():
        return
    for name in (RECORDS, LIFECYCLE):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)


class RunDirError(ConfigError, FileNotFoundError):
    """A run directory is missing, unreadable or not a run (one line, no traceback; a
    command-line error: exit code 2)."""


def _is_run_dir(d: Path) -> bool:
    """``d`` holds records or a manifest; one that is not a regular file is an error
    (reading a FIFO would hang, a device would not end)."""
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
    """``directory`` itself, or its only run subdirectory (``out_dir/<run_id>``).

    Anything else (missing, a file, unreadable, no run or several) is one
    ``RunDirError`` saying which.
    """
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


def load(directory: str | Path) -> RunResult:
    """Read a run directory back into a ``RunResult`` (see ``read_jsonl`` on crashes)."""
    d = resolve_run_dir(directory)
    manifest = read_json(d / MANIFEST) if (d / MANIFEST).exists() else {}
    records = load_records(d)
    run_id = manifest.get("run_id") or (records[0].run_id if records else d.name)
    cancelled = bool(manifest.get("cancelled")) or manifest.get("status") == "cancelled"
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


def iter_run_dirs(root: str | Path) -> Iterator[Path]:
    """Run directories directly under ``root`` (for comparing several runs)."""
    root = Path(root)
    for p in sorted(root.iterdir()):
        if p.is_dir() and _is_run_dir(p):
            yield p
