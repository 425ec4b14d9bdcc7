"""The panel's live redraws in a process of their own (``python -m workbench.ui.render``).

Started with the first Run, niced (``RENDER_NICE``), kept for the kernel's life; it reads
the run's ``records.jsonl`` and answers a section's outputs over pickled stdin/stdout
(``multiprocessing.connection``); its stdin's end ends it. Why and how measured:
docs/notebooks.md, "The render process"."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RENDER_NICE = 5  # the render process's niceness: the replay, the engine, the kernel go first
RUNS_KEPT = 4  # runs followed at once (one per panel running)
_runs: dict[str, dict[str, Any]] = {}  # in the render process: the runs it follows


# -- in the render process --------------------------------------------------------------------
def warm_up() -> float:
    """Load what a first figure loads (modules, fonts, Agg); the CPU time it took."""
    start = time.process_time()
    from workbench.executors.background import RecordTail  # noqa: F401  (follow's imports)
    from workbench.report.plots import ReportFigure
    from workbench.report.sections import RunReport  # noqa: F401  (its imports)

    fig = ReportFigure(figsize=(2, 1), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="warm-up")
    ax.set(title="warm-up", xlabel="s", ylabel="ms")
    fig.png()
    return time.process_time() - start


def follow(run_dir: str, run_id: str, limit: int) -> tuple[int, int]:
    """Read the run's new records (at most ``limit`` in all) into the report ``render``
    draws; how many were new and how many there are."""
    from workbench.executors.background import RecordTail
    from workbench.records import RunManifest, RunResult
    from workbench.report.sections import RunReport
    from workbench.storage.rundir import read_json

    run = _runs.pop(run_dir, None)  # (put back last: the most recent run is kept longest)
    if run is None:
        run = {"tail": RecordTail(Path(run_dir) / "records.jsonl"), "records": [],
               "manifest": None, "report": None}
    _runs[run_dir] = run
    while len(_runs) > RUNS_KEPT:  # two panels' runs at once are fine; more are forgotten
        _runs.pop(next(iter(_runs)))
    records: list[Any] = run["records"]
    new = run["tail"].read() if len(records) < limit else []
    if new:
        records.extend(new[:limit - len(records)])
        if run["manifest"] is None:
            with contextlib.suppress(OSError, ValueError):  # not written yet: next time
                doc = read_json(Path(run_dir) / "manifest.json")
                run["manifest"] = RunManifest.from_dict(doc) if isinstance(doc, dict) else None
        manifest = run["manifest"] or RunManifest.from_dict({})
        run["report"] = RunReport(RunResult(run_id, list(records), manifest=manifest))
    return len(new), len(records)


def render(run_dir: str, what: str, name: str, options: dict[str, Any], note: str
           ) -> tuple[tuple[dict[str, Any], ...], float]:
    """Section ``name`` of the run's current report (``follow``), and the CPU time it
    took (no outputs: nothing read of that run yet)."""
    from workbench.ui.live import render_section

    start = time.process_time()
    report = _runs.get(run_dir, {}).get("report")
    if report is None:
        return (), 0.0
    out = render_section(what, name, options, report, note, report.source.records)
    return out, time.process_time() - start


FUNCTIONS: dict[str, Callable[..., Any]] = {"warm_up": warm_up, "follow": follow,
                                         "render": render}


def main() -> int:
    """The render process: calls (name, args) in on stdin, (status, value) out, pickled
    (``multiprocessing.connection``), until stdin ends (the kernel is gone)."""
    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the answers
    calls = Connection(os.dup(0), writable=False)
    with contextlib.suppress(OSError, AttributeError):  # else: the default priority
        os.nice(RENDER_NICE)
    while True:
        try:
            name, args = calls.recv()
        except (EOFError, OSError):
            return 0
        try:
            answer: tuple[str, Any] = ("ok", FUNCTIONS[name](*args))
        except Exception as exc:  # said to the kernel, which logs it; the process goes on
            answer = ("error", f"{type(exc).__name__}: {exc}")
        try:
            out.send(answer)
        except OSError:
            return 0


# -- in the kernel ----------------------------------------------------------------------------
class RenderError(RuntimeError):
    """The render process could not do what it was asked (its message), or is gone."""


class RenderProcess:
    """``python -m workbench.ui.render``, called one call at a time (``call`` blocks: the
    panel calls it from a worker thread, never on the kernel's loop)."""

    def __init__(self) -> None:
        # not a fork of the kernel (threads), nor spawn (it re-runs an unguarded __main__)
        self.proc = subprocess.Popen([sys.executable, "-m", "workbench.ui.render"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.calls = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.answers = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, name: str, *args: Any) -> Any:
        with self.lock:
            try:
                self.calls.send((name, args))
                status, value = self.answers.recv()
            except (EOFError, OSError) as exc:
                raise RenderError(f"the render process is gone ({exc!r})") from exc
        if status != "ok":
            raise RenderError(str(value))
        return value

    def close(self) -> None:
        """Its stdin closed: it ends (as it does when the kernel ends)."""
        self.calls.close()
        self.answers.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


_process: RenderProcess | None = None


def process() -> RenderProcess:
    """The kernel's render process (started on first use, again if it died)."""
    global _process
    if _process is None or not _process.alive():
        _process = RenderProcess()
    return _process


async def call(name: str, *args: Any) -> Any:
    """``process().call(name, *args)`` from a worker thread, awaited on the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(process().call, name, *args))


def start() -> None:
    """Start (or keep) the render process and warm it up, without waiting: at Run, while
    the engine starts."""
    proc = process()
    threading.Thread(target=_warm, args=(proc,), name="workbench-render-warm-up",
                     daemon=True).start()


def _warm(proc: RenderProcess) -> None:
    try:
        proc.call("warm_up")
    except RenderError:
        log.debug("render warm-up failed", exc_info=True)


if __name__ == "__main__":
    raise SystemExit(main())
