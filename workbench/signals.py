"""SIGTERM stops a run exactly as Ctrl-C (SIGINT) does.

``timeout``, Docker, Kubernetes and Slurm stop a process with SIGTERM. Python's
default is to die on the spot: the manifest would stay ``running`` and requests
in flight would be lost. Here SIGTERM takes SIGINT's path instead:

- while the event loop runs (``run_with_sigterm``), the loop's own signal
  handler cancels the run's main task, exactly what ``asyncio.Runner`` does for
  SIGINT: the replay session records in-flight requests as ``cancelled``, writes
  ``records.parquet``, ``summary.json`` and a ``cancelled`` manifest, and the
  call raises ``KeyboardInterrupt`` afterwards (the CLI exits with
  ``ExitCode.CANCELLED``);
- outside the loop (``interrupt_on_sigterm``, installed by the CLI), SIGTERM
  raises ``KeyboardInterrupt`` where the program is, as SIGINT would.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> None:
    """SIGTERM raises ``KeyboardInterrupt`` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


class _Flag:
    hit = False


@contextlib.contextmanager
def _cancel_task_on_sigterm(loop: asyncio.AbstractEventLoop, cancel: Callable[[], Any],
                            flag: _Flag) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term() -> None:
        flag.hit = True
        cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals on this loop
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def run_with_sigterm(runner: asyncio.Runner, coro: Coroutine[Any, Any, T]) -> T:
    """``runner.run(coro)``; a SIGTERM meanwhile cancels it as SIGINT would, then raises
    ``KeyboardInterrupt``."""
    flag = _Flag()

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        with _cancel_task_on_sigterm(asyncio.get_running_loop(), task.cancel, flag):
            return await coro

    try:
        return runner.run(main())
    except asyncio.CancelledError:
        if flag.hit:
            raise KeyboardInterrupt("signal SIGTERM") from None
        raise
