"""SIGTERM and the other stop signals (``errors.STOP_SIGNALS``) stop a run as Ctrl-C does
(docs/run-directory.md, "Stopping"); children end with their parent (``die_with_parent``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import ctypes
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from workbench.errors import STOP_SIGNALS

T = TypeVar("T")




class SignalStop:
    """What ``stop_on_signals`` caught (``hit``, ``name``); ``arm(loop, stop)`` names what
    stops the run once its loop runs (at once for a signal that came earlier)."""

    def __init__(self) -> None:
        self.hit = False
        self.name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: Callable[[], Any] | None = None
        self._thread: int | None = None  # the thread the armed loop runs on

    def arm(self, loop: asyncio.AbstractEventLoop, stop: Callable[[], Any]) -> None:
        self._loop, self._stop = loop, stop
        self._thread = threading.get_ident()
        if self.hit:
            stop()

    def disarm(self) -> None:
        self._loop = self._stop = self._thread = None

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.hit:  # a second signal: stop now, named by the first (the run's stop_signal)
            raise KeyboardInterrupt(f"signal {self.name}")
        self.hit, self.name = True, signal.Signals(signum).name
        if self._loop is None or self._stop is None:
            return
        if self._thread == threading.get_ident():
            # the loop is on this thread: stop directly (a queued callback would wait for a
            # task that may never yield, a stalled virtual closed loop), then wake the loop
            self._stop()
            self._loop.call_soon_threadsafe(lambda: None)  # only wakes the loop
        else:
            self._loop.call_soon_threadsafe(self._stop)


#: how often a main thread waiting for a worker thread wakes to run signal handlers (s)
SIGNAL_POLL_S = 0.2


def wait_result(fut: concurrent.futures.Future[T]) -> T:
    """``fut.result()`` from the main thread, waking every ``SIGNAL_POLL_S`` so a signal's
    Python handler runs (docs/run-directory.md, "Stopping")."""
    while True:  # bounded: by the future, which its run's own bounds end
        try:
            return fut.result(timeout=SIGNAL_POLL_S)
        except concurrent.futures.TimeoutError:
            continue


@contextlib.contextmanager
def stop_on_signals() -> Iterator[SignalStop]:
    """While inside, the first stop signal stops the run through what was armed
    (``SignalStop.arm``); a second raises ``KeyboardInterrupt``. Main thread only."""
    flag = SignalStop()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    sigs = (signal.SIGINT, *STOP_SIGNALS)
    previous = {sig: signal.signal(sig, flag.on_signal) for sig in sigs}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """While inside (a stopped or finished run saving its summary and Parquet:
    ``ReplaySession.run``), SIGINT and the stop signals wait: the first one that came is
    raised again on the way out, and its own handler takes its course then. A second
    Ctrl-C used to raise ``KeyboardInterrupt`` inside the save and leave a ``cancelled``
    manifest without summary or Parquet (docs/run-directory.md, "Stopping"). Main thread
    only (elsewhere Python runs no handler); an ignored signal stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *STOP_SIGNALS)}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if came:
            signal.raise_signal(came[0])


PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """In a child process, first thing: ``sig`` when the parent dies, however it dies
    (docs/run-directory.md, "Processes")."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the pipes are the only guard
            return
    if os.getppid() != parent_pid:  # the parent died before the call
        os.kill(os.getpid(), sig)


@contextlib.contextmanager
def calling_on_signals(loop: asyncio.AbstractEventLoop, callback: Callable[[], Any],
                       sigs: tuple[int, ...] = (signal.SIGINT, *STOP_SIGNALS)
                       ) -> Iterator[None]:  # fmt: skip
    """While inside, each of ``sigs`` calls ``callback`` on ``loop`` instead of its
    handler (main thread only; an ignored signal stays ignored); the handlers are put back
    on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in sigs}
    added = []
    try:
        for sig in sigs:
            if previous[sig] is not signal.SIG_IGN:
                loop.add_signal_handler(sig, callback)
                added.append(sig)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals on this loop
        pass
    try:
        yield
    finally:
        for sig in added:
            loop.remove_signal_handler(sig)
            handler = previous[sig]
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


#: the stop of the run ``run_with_sigterm`` plays in this context (None outside one)
_STOPPING: contextvars.ContextVar[SignalStop | None] = contextvars.ContextVar(
    "workbench_stopping", default=None)


def stop_signal_name() -> str | None:
    """The signal that stopped the run in progress in this context (``SIGINT``,
    ``SIGTERM``, ...; None: none came, or no ``run_with_sigterm`` around it): what a live
    run's manifest records as ``stop_signal`` (docs/run-directory.md, "Stopping")."""
    flag = _STOPPING.get()
    return flag.name if flag is not None and flag.hit else None


def _note(flag: SignalStop, signum: int) -> None:
    if not flag.hit:  # the first signal is the one that stopped the run
        flag.hit, flag.name = True, signal.Signals(signum).name


@contextlib.contextmanager
def _noting_sigint(flag: SignalStop) -> Iterator[None]:
    """While inside, SIGINT is noted in ``flag`` and then handled as before (the runner's
    own handler: cancel the task, a second one raises ``KeyboardInterrupt``)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return

    def noting(signum: int, frame: Any) -> Any:
        _note(flag, signum)
        return previous(signum, frame)

    signal.signal(signal.SIGINT, noting)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is noting:
            signal.signal(signal.SIGINT, previous)


def run_with_sigterm(runner: asyncio.Runner, coro: Coroutine[Any, Any, T]) -> T:
    """``runner.run(coro)``; a SIGTERM meanwhile cancels it as SIGINT would, then raises
    ``KeyboardInterrupt("signal SIGTERM")``. The first stop signal's name is
    ``stop_signal_name()`` inside ``coro`` (the run saves it in its manifest)."""
    flag = SignalStop()

    def on_stop(cancel: Callable[[], Any], signum: int) -> None:
        _note(flag, signum)
        cancel()

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        # set here, in the runner's own context (not the caller's): tasks made from now copy it
        token = _STOPPING.set(flag)
        with contextlib.ExitStack() as stack:
            stack.callback(_STOPPING.reset, token)
            for sig in STOP_SIGNALS:
                stack.enter_context(calling_on_signals(
                    loop, functools.partial(on_stop, task.cancel, sig), (sig,)))
            stack.enter_context(_noting_sigint(flag))
            return await coro

    try:
        return runner.run(main())
    except asyncio.CancelledError:
        if flag.hit:
            raise KeyboardInterrupt(f"signal {flag.name}") from None
        raise
