"""Run a coroutine's first step at once, as Python 3.12's eager tasks do.

aiohttp hands a request's body writer to ``asyncio.create_task``; from Python
3.12 on it asks for an eager start, so the request's bytes leave inside
``session.post``. On 3.11 the task waits for the next loop iteration — behind
every other callback ready by then (a wave of finishing streams, each preparing
its next request). ``start_now`` gives 3.11 the same behaviour for that one
coroutine: its first step runs in the caller's frame, and only if it truly has
to wait (a paused transport: a large body on a slow reader) is the rest driven
as a Task would drive it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["start_now"]


def start_now(coro: Coroutine[Any, Any, T]) -> tuple[Coroutine[Any, Any, T], bool]:
    """Step ``coro`` now. Returns a coroutine that finishes it (or just hands back its
    result or exception), and whether ``coro`` already ran to its end."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return _value(stop.value), True
    except BaseException as exc:  # re-raised where the caller awaits
        return _raise(exc), True
    return _resume(coro, yielded), False


async def _value(value: T) -> T:
    return value


async def _raise(exc: BaseException) -> Any:
    raise exc


async def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    """Drive a started ``coro`` like ``asyncio.Task``: resume it when the future it
    yielded is done (it reads the result itself), pass cancellation in as ``throw``."""
    while True:
        try:
            if yielded is None:  # a bare yield: asyncio.sleep(0)
                await asyncio.sleep(0)
            else:
                yielded._asyncio_future_blocking = False
                await _until_done(yielded)
        except BaseException as exc:  # cancelled while it waited
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


async def _until_done(fut: asyncio.Future[Any]) -> None:
    """Wait for ``fut`` without taking its result or exception (the driven coroutine does)."""
    if not fut.done():
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake(_f: object) -> None:
            if not done.done():
                done.set_result(None)

        fut.add_done_callback(wake)
        await done
