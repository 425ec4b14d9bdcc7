"""A replay in a process of its own, followed through a bounded snapshot (the panel's Run;
docs/executors.md). Without an ``out_dir`` the run goes to a temporary directory that
``result()`` reads back and deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from workbench import redact
from workbench.config import RunConfig
from workbench.errors import WorkbenchError, stderr_tail
from workbench.records import RequestRecord, RunResult
from workbench.replay.prepare import new_run_id, run_on_fast_loop
from workbench.storage.rundir import TIMELINE, load, loads_line, read_jsonl, read_manifest

PROGRESS_EVERY_S = 0.1
TERMINAL = ("done", "failed", "cancelled")


class BackgroundRunError(WorkbenchError):
    """The background replay failed; ``kind`` names the exception the child raised."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}" if kind else message)
        self.kind = kind


@dataclass(frozen=True)
class Snapshot:
    """Where a background run is, as the kernel last heard (``seq`` grows with every change)."""

    phase: str = "starting"
    done: int = 0
    total: int = 0
    status: str | None = None  # the manifest's status at the end (completed, partial, ...)
    error: str | None = None
    error_kind: str = ""
    seq: int = 0

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL


class SnapshotBox:
    """A ``Snapshot`` behind a lock: the reader thread writes, any thread reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = Snapshot()

    def read(self) -> Snapshot:
        with self._lock:
            return self._snap

    def update(self, **changes: Any) -> Snapshot:
        with self._lock:
            if self._snap.finished:  # an outcome is final
                return self._snap
            if self._snap.phase == "stopping" and changes.get("phase") in ("running",):
                changes.pop("phase")  # still stopping until the run says how it ended
            self._snap = dataclasses.replace(self._snap, seq=self._snap.seq + 1, **changes)
            return self._snap


class RecordTail:
    """The records a run directory's ``records.jsonl`` has gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[RequestRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next call
        self.offset += end
        lines = chunk[:end].splitlines()
        return [RequestRecord.from_dict(loads_line(line)) for line in lines if line.strip()]


class BackgroundRun:
    """``cfg`` replayed by a child process; ``snapshot()``, ``stop()``, ``result()``."""

    def __init__(self, cfg: RunConfig) -> None:
        self.temp_dir = None if cfg.out_dir else tempfile.mkdtemp(prefix="workbench-panel-")
        changes: dict[str, Any] = {}
        if self.temp_dir:
            changes["out_dir"] = self.temp_dir
        if not cfg.run_id:  # known up front: the kernel reads the run directory as it grows
            changes["run_id"] = new_run_id(cfg)
        self.cfg = cfg.replace(**changes) if changes else cfg
        self.run_dir = Path(self.cfg.out_dir or "") / (self.cfg.run_id or "")
        self.box = SnapshotBox()
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._result: RunResult | None = None
        self.returncode: int | None = None  # the child's exit status, once it has exited

    def start(self) -> BackgroundRun:
        # closed by close(), after the run: read back only to say why a child failed
        self._stderr = tempfile.TemporaryFile(prefix="workbench-run-")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workbench.executors.background"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.cfg.to_dict()).encode() + b"\n")
        self.proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, name="workbench-run-reader",
                                        daemon=True)
        self._reader.start()
        return self

    def snapshot(self) -> Snapshot:
        return self.box.read()

    def stop(self) -> None:
        """Ask the run to stop (in-flight requests end as ``cancelled``); returns at once."""
        if self.box.read().finished or self.proc is None or self.proc.stdin is None:
            return
        self.box.update(phase="stopping")
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()

    def wait(self, timeout: float | None = None) -> Snapshot:
        """Block until the outcome is known (for scripts; the panel polls instead)."""
        if self._reader is not None:
            self._reader.join(timeout)
        return self.box.read()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # not one of ours (a stray print): ignored
            if isinstance(msg, dict):
                self._apply(msg)
        code = self.returncode = self.proc.wait()
        if not self.box.read().finished:
            tail = stderr_tail(self._stderr)
            self.box.update(phase="failed", error_kind="ProcessExit",
                            error=f"the replay process exited ({code}) without a result"
                                  + (f": {tail}" if tail else ""))
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()

    def _apply(self, msg: dict[str, Any]) -> None:
        if "phase" in msg:
            self.box.update(phase=str(msg["phase"]))
        elif "progress" in msg:
            done, total = msg["progress"]
            self.box.update(done=int(done), total=int(total))
        elif "end" in msg:
            end = msg["end"]
            self.box.update(phase="cancelled" if end.get("cancelled") else "done",
                            status=end.get("status"))
        elif "error" in msg:
            err = msg["error"]
            self.box.update(phase="failed", error=str(err.get("message")),
                            error_kind=str(err.get("kind") or ""))

    def records(self) -> RecordTail:
        """A reader of the records this run has written so far (kernel side)."""
        return RecordTail(self.run_dir / "records.jsonl")

    def result(self) -> RunResult:
        """The finished run, read back from its run directory; raises if it failed."""
        snap = self.box.read()
        if not snap.finished:
            raise WorkbenchError("the run has not finished yet")
        if self._result is not None:
            return self._result
        if snap.phase == "failed":
            self.close()
            raise BackgroundRunError(snap.error_kind, snap.error or "failed")
        result = self._load()
        if self.temp_dir:  # no out_dir asked for: the records live in memory only
            result.run_dir = None
        self._result = result
        self.close()
        return result

    def _load(self) -> RunResult:
        """The run as ``run_async`` would have returned it (records kept on disk stay there)."""
        manifest = read_manifest(self.run_dir)
        if manifest.records_kept is not False or self.temp_dir:
            return load(self.run_dir)
        timeline = self.run_dir / TIMELINE
        return RunResult(
            manifest.run_id or str(self.cfg.run_id), [], manifest=manifest,
            metrics_timeline=read_jsonl(timeline) if timeline.exists() else [],
            run_dir=str(self.run_dir), cancelled=manifest.status == "cancelled")

    def close(self) -> None:
        """Forget the temporary run directory and the child's stderr (after the end)."""
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class _Out:
    """JSON lines to the parent on stdout: one ``write`` syscall each, progress throttled."""

    def __init__(self) -> None:
        self.fd = sys.stdout.fileno()
        self.last = 0.0
        self.pending: tuple[int, int] | None = None

    def send(self, msg: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, json.dumps(msg).encode() + b"\n")

    def progress(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY_S or done == 0:
            self.last, self.pending = now, None
            self.send({"progress": [done, total]})
            return
        if self.pending is None:  # a count held back goes out at most PROGRESS_EVERY_S late
            asyncio.get_running_loop().call_later(PROGRESS_EVERY_S, self.flush)
        self.pending = (done, total)

    def flush(self) -> None:
        if self.pending is not None:
            self.send({"progress": list(self.pending)})
            self.last, self.pending = time.perf_counter(), None

    def phase(self, phase: str) -> None:
        self.flush()  # the last count before the run moves on
        self.send({"phase": phase})


class _Lines:
    """Lines from a file descriptor with ``os.read``, not a buffered reader (executors.md)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def readline(self) -> bytes:
        """The next line with its newline; what is left at the end; ``b""`` once at the end."""
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                line, self.buf = self.buf, b""
                return line
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


async def _child_run(cfg: RunConfig, out: _Out, stdin: _Lines) -> RunResult:
    from workbench.executors.dispatch import run_async

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def watch_parent() -> None:  # a "stop" line, or stdin's end (the kernel is gone): stop
        with contextlib.suppress(OSError):
            while (line := stdin.readline()) and line.strip() != b"stop":
                pass
        with contextlib.suppress(RuntimeError):  # the run has ended and its loop is closed
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    return await run_async(cfg, progress=out.progress, stop=stop, phase=out.phase)


def main() -> int:
    out, stdin = _Out(), _Lines(sys.stdin.fileno())
    try:
        cfg = RunConfig.from_dict(json.loads(stdin.readline()))
        out.phase("starting")
        result = run_on_fast_loop(_child_run(cfg, out, stdin), cfg.executor.uvloop)
    except BaseException as exc:  # every outcome goes to the parent; the exit code too
        cancelled = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
        if cancelled:
            out.send({"end": {"cancelled": True, "status": "cancelled"}})
        else:
            # the run's secrets (API key, a URL's password) were registered by the run
            out.send({"error": {"kind": type(exc).__name__, "message": redact.text(str(exc))}})
        return 1
    out.send({"end": {"cancelled": result.cancelled,
                      "status": result.manifest.status}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
