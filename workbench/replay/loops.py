"""``run_anywhere(coro)``: a coroutine to its result from sync code, inside a running loop too.

Inside a running loop (a notebook), the coroutine runs on a fresh loop on a worker
thread while the caller waits; an interrupt cancels it, lets it save its run and
re-raises (docs/notebooks.md). Outside one it is ``run_on_fast_loop``, or ``run_virtual``
for a run in virtual time (the worker's loop is then a ``VirtualTimeLoop`` too).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from workbench.clock import VirtualTimeLoop, run_virtual
from workbench.replay.prepare import run_on_fast_loop, uvloop_factory
from workbench.signals import wait_result

T = TypeVar("T")

CANCEL_WAIT_S = 120.0  # after an interrupt: how long the cancelled run may take to save itself


class LoopThread(Generic[T]):
    """One coroutine on a fresh event loop on a worker thread; ``future`` gets its outcome.

    ``cancel()`` (any thread) cancels the coroutine's task on its own loop. The thread is a
    daemon: an interpreter that exits does not wait for it.
    """

    def __init__(self, coro: Coroutine[Any, Any, T], *,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
                 name: str = "workbench-loop") -> None:
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._coro = coro
        self._new_loop = loop_factory  # None: asyncio's
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[T] | None = None
        self._cancelled = False
        # a copy of the creating thread's context: entering the caller's own context
        # (already entered on its thread) is exactly the error nest_asyncio produced
        self._context = contextvars.copy_context()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> LoopThread[T]:
        try:
            self._thread.start()
        except BaseException:  # an interrupt while the thread starts
            if self._thread.ident is None:  # never started: no "never awaited" warning
                self._coro.close()
            else:
                self.cancel_and_wait()
            raise
        return self

    def _main(self) -> None:
        try:
            with asyncio.Runner(loop_factory=self._new_loop) as runner:
                result: T = runner.run(self._body(), context=self._context)
        except BaseException as exc:  # every outcome goes to the waiting thread
            if not self.future.done():
                self.future.set_exception(exc)
        else:
            self.future.set_result(result)

    async def _body(self) -> T:
        task = asyncio.current_task()
        with self._lock:
            self._loop, self._task = asyncio.get_running_loop(), task
            cancel_now = self._cancelled
        if cancel_now:  # cancelled before it began: it never runs
            self._coro.close()
            raise asyncio.CancelledError
        return await self._coro

    def cancel(self) -> None:
        """Cancel the coroutine (before it starts, it is cancelled the moment it does)."""
        with self._lock:
            self._cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            # RuntimeError: the loop closed meanwhile (the coroutine has ended)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)

    def cancel_and_wait(self, timeout: float = CANCEL_WAIT_S) -> None:
        """Cancel, then give the coroutine ``timeout`` s to finish its clean-up."""
        self.cancel()
        with contextlib.suppress(concurrent.futures.TimeoutError):
            self.future.exception(timeout=timeout)


def run_anywhere(coro: Coroutine[Any, Any, T], use_uvloop: bool = False, *,
                 virtual: bool = False) -> T:
    """``coro``'s result, from sync code: on this thread when no loop runs here, else on a
    fresh loop on a worker thread; an interrupt meanwhile cancels it, waits, re-raises.
    ``virtual``: on a ``VirtualTimeLoop`` (``use_uvloop`` is then moot)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_virtual(coro) if virtual else run_on_fast_loop(coro, use_uvloop)
    factory = VirtualTimeLoop if virtual else uvloop_factory(use_uvloop)
    thread = LoopThread(coro, loop_factory=factory, name="workbench-run").start()
    try:
        return wait_result(thread.future)
    except KeyboardInterrupt:
        thread.cancel_and_wait()
        raise
