"""``signals.wait_result``: the main thread waiting for a worker thread still runs a
signal's handler, and gets the worker's result or error (docs/run-directory.md,
"Stopping")."""

from __future__ import annotations

import concurrent.futures
import signal
import threading

import pytest

from workbench.signals import wait_result


def test_a_signal_taken_by_another_thread_runs_its_handler_while_the_main_thread_waits(
) -> None:
    """A thread blocked in a wait takes SIGUSR1 (``pthread_kill``, as the kernel may hand
    a process's SIGTERM to any thread); the handler runs on the main thread while it
    waits in ``wait_result``, and the worker sees it."""
    handled = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda _s, _f: handled.set())
    asleep = threading.Thread(target=handled.wait, args=(30,), daemon=True)
    asleep.start()

    def work() -> bool:
        assert asleep.ident is not None
        signal.pthread_kill(asleep.ident, signal.SIGUSR1)
        return handled.wait(30)

    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert wait_result(pool.submit(work)) is True
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_wait_result_gives_the_result_or_the_error() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert wait_result(pool.submit(lambda: 42)) == 42
        with pytest.raises(ZeroDivisionError):
            wait_result(pool.submit(lambda: 1 / 0))
